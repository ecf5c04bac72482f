"""Verify a restored directory against its manifest copies; ``DirSource`` reads it."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, BinaryIO

from neffcache.backends import BACKENDS, root_dirs
from neffcache.config import read_settings
from neffcache.documents import Doc, Document
from neffcache.errors import (
    ExitRule,
    IntegrityError,
    ManifestError,
    NeffcacheError,
    NotFoundError,
    UntrustedEntryError,
    UsageError,
)
from neffcache.lifecycle.entry_select import decode_entry
from neffcache.lifecycle.verify import MAX_LISTED
from neffcache.manifest import FileRecord, Manifest, PackRecord, encode_manifest
from neffcache.request_rules import checked_request
from neffcache.restore import LOCAL_ENTRIES, MISSING_FILE, forget_paths, lock_destination
from neffcache.store import MANIFESTS, blob_key, entry_key_of, pack_key
from neffcache.thread_pool import map_in_threads
from neffcache.trust import UNCHECKED, TrustPolicy, load_trust

# Re-hashing a restored directory is disk-bound: more readers than this only contend.
LOCAL_WORKERS_MAX = 8


@dataclass(frozen=True, slots=True)
class LocalCheck:
    """A path and every (size, sha256, mode) an entry wants there (any one is fine)."""

    root: str
    path: str
    file: str
    wanted: tuple[tuple[int, str, int], ...]


@dataclass(frozen=True, slots=True)
class LocalProblem(Document):
    path: str
    kind: str  # missing | type | size | sha256 | mode | manifest | untrusted
    message: Annotated[str, Doc(key="error")]


@dataclass(frozen=True, slots=True)
class VerifyLocalDirResult(ExitRule):
    """What ``verify_local`` found in a restored directory: counts, bytes, every problem."""

    target: str
    entries: int
    files: int
    bytes_checked: int
    problems: tuple[LocalProblem, ...]
    seconds: float

    def error(self) -> NeffcacheError | None:
        if not self.problems:
            return None
        return IntegrityError(f"{len(self.problems)} problem(s) in {self.target}; first: "
                              f"{self.problems[0].message}",
                              hint=f"neffcache restore MATRIX --to {self.target}")

    def to_json(self) -> dict[str, Any]:
        return {"ok": not self.problems, "target": self.target, "entries": self.entries,
                "files": self.files, "bytes_checked": self.bytes_checked,
                "problems": [p.to_json() for p in self.problems[:MAX_LISTED]],
                "problem_count": len(self.problems), "seconds": round(self.seconds, 3)}


@checked_request
class VerifyLocalDirRequest:
    """What ``verify_local_dir`` checks: ``target``, a directory ``neffcache restore`` wrote;
    ``workers`` parallel reads (at most 8 are used). With ``trusted_keys``, an entry whose
    manifest copy none of them signed is a problem (kind ``untrusted``): a restore trusting
    those keys removes its files."""

    target: str | Path
    workers: int = 8
    progress: Callable[[int, int], None] | None = None
    trusted_keys: Sequence[str] = ()
    require_signatures: bool = False


def verify_local_dir(request: VerifyLocalDirRequest) -> VerifyLocalDirResult:
    """Re-hash every file restored into ``target`` (no store is read); a problem is exit 4.
    Raises UsageError (exit 2) when ``target`` is not a directory neffcache restore wrote."""
    trust = load_trust(read_settings(os.environ), request)
    return verify_local(Path(request.target),
                        workers=min(request.workers, LOCAL_WORKERS_MAX),
                        progress=request.progress, trust=trust)


def plan_local_checks(manifests: Sequence[Manifest], target: str) -> tuple[LocalCheck, ...]:
    wanted: dict[tuple[str, str, str], list[tuple[int, str, int]]] = {}
    for f, file in placed(manifests, target):  # the file: <target>/<root>/<path>
        wanted.setdefault((f.root, f.path, file), []).append((f.size, f.sha256, f.mode))
    return tuple(LocalCheck(r, p, file, tuple(dict.fromkeys(w)))
                 for (r, p, file), w in sorted(wanted.items()))


def placed(manifests: Sequence[Manifest], target: str) -> Iterator[tuple[FileRecord, str]]:
    """Each file of the manifests, with its path in the restored directory ``target``."""
    for m in manifests:
        dirs = root_dirs(BACKENDS[m.fingerprint.backend], target)
        for f in m.files:
            yield f, f"{dirs[f.root]}/{f.path}"


def read_local_manifests(target: Path, trust: TrustPolicy = UNCHECKED
                         ) -> tuple[tuple[Manifest, ...], list[LocalProblem]]:
    """The manifest copies that decode (even refused ones: their files are there), problems."""
    found, problems = [], []
    for p in sorted((target / LOCAL_ENTRIES).glob("*.json")):
        if p.name == MISSING_FILE:  # what the store lacked at the last restore: no manifest
            continue
        try:
            m = decode_entry(p.read_bytes(), str(p), p.name.removesuffix(".json"),
                             known_backend=True)
            found.append(m)
            trust.admit(m, str(p))
        except UntrustedEntryError as exc:
            problems.append(LocalProblem(str(p), "untrusted", str(exc)))
        except (ManifestError, OSError) as exc:
            problems.append(LocalProblem(str(p), "manifest", str(exc)))
    return tuple(found), problems


def check_file(c: LocalCheck) -> tuple[int, LocalProblem | None]:
    """(bytes read, problem or None) for one path; never follows a symlink at the path."""
    try:
        fd = os.open(c.file, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return 0, LocalProblem(c.file, "missing", f"{c.file}: missing")
    except OSError as exc:
        return 0, LocalProblem(c.file, "type", f"{c.file}: cannot open as a regular file "
                               f"({exc.strerror})")
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            return 0, LocalProblem(c.file, "type", f"{c.file}: not a regular file")
        sizes = {w[0] for w in c.wanted}
        if st.st_size not in sizes:
            return 0, LocalProblem(c.file, "size", f"{c.file}: {st.st_size} bytes, expected "
                                   f"{' or '.join(str(s) for s in sorted(sizes))}")
        sha, mode = hashlib.file_digest(fh, "sha256").hexdigest(), stat.S_IMODE(st.st_mode)
    if not any(w[1] == sha for w in c.wanted):
        return st.st_size, LocalProblem(c.file, "sha256", f"{c.file}: sha256 {sha[:12]} is not "
                                        f"the manifest's {c.wanted[0][1][:12]} (damaged)")
    if not any(w[1] == sha and w[2] == mode for w in c.wanted):
        return st.st_size, LocalProblem(c.file, "mode", f"{c.file}: mode {mode:o}, expected "
                                        f"{c.wanted[0][2]:o}")
    return st.st_size, None


def verify_local(target: Path, *, workers: int = 4,
                 progress: Callable[[int, int], None] | None = None,
                 trust: TrustPolicy = UNCHECKED) -> VerifyLocalDirResult:
    """Under the restore lock: a running restore's half-done tree is not damage."""
    started = time.monotonic()
    target = Path(target).expanduser().absolute()
    if not (target / LOCAL_ENTRIES).is_dir():
        raise UsageError(f"{target}: no {LOCAL_ENTRIES}/ here: not a directory neffcache "
                         f"restore wrote", hint=f"neffcache restore MATRIX --to {target}")
    with lock_destination(str(target), who="verify --local") as held:
        manifests, problems = read_local_manifests(target, trust)
        checks = plan_local_checks(manifests, str(target))
        checked = 0
        for i in range(0, len(checks), 512):
            for nbytes, problem in map_in_threads(check_file, checks[i:i + 512], workers):
                checked += nbytes
                if problem is not None:
                    problems.append(problem)
            if progress:
                progress(min(i + 512, len(checks)), len(checks))
        bad = {p.path for p in problems}  # a set: a wiped directory has a problem per file
        damaged = {(c.root, c.path) for c in checks if c.file in bad}
        if damaged:
            forget_states(manifests, str(target), damaged)
        if not held.unclean:  # a killed restore's mark stays for the next restore's sweep
            held.finished()
    return VerifyLocalDirResult(str(target), len(manifests), len(checks), checked,
                                tuple(problems), time.monotonic() - started)


def forget_states(manifests: Sequence[Manifest], target: str,
                  damaged: set[tuple[str, str]]) -> None:
    """Drop the damaged paths from their roots' state files, so restore fetches them again."""
    gone: dict[str, set[str]] = {}
    for root, path in damaged:
        gone.setdefault(root, set()).add(path)
    for name in sorted({m.fingerprint.backend for m in manifests}):
        dirs = root_dirs(BACKENDS[name], target)
        forget_paths(dirs, {r: p for r, p in gone.items() if r in dirs})


class DirSource:
    """A restored directory as a ``repair.Source`` (packs rebuilt; the caller checks bytes)."""

    def __init__(self, target: str | Path) -> None:
        self.url = f"dir:{target}"
        root = Path(target)
        if not root.is_dir():
            raise UsageError(f"--from-dir {target}: not a directory")
        manifests, _ = read_local_manifests(root)
        self.manifests = {m.entry_key: m for m in manifests}
        # reversed: the first file (pack) of each sha256 is the one kept
        self.files = {f.sha256: file for f, file in reversed(list(placed(manifests, str(root))))}
        self.packs = {p.sha256: p for m in reversed(manifests) for p in reversed(m.packs)}

    def read(self, key: str) -> bytes:
        with self.open(key) as src:
            return src.read()

    def open(self, key: str) -> BinaryIO:
        name = key.rsplit("/", 1)[-1]
        entry = entry_key_of(key) if key.startswith(MANIFESTS) else None
        if entry is not None and entry in self.manifests:
            return io.BytesIO(encode_manifest(self.manifests[entry]))
        if key == blob_key(name) and name in self.files:
            try:
                return open(self.files[name], "rb")
            except OSError as exc:
                raise NotFoundError(f"{self.url}: {key}: {exc}") from exc
        if key == pack_key(name) and name in self.packs:
            return io.BytesIO(b"".join(self._pack(self.packs[name])))
        raise NotFoundError(f"{self.url}: {key}: not in the directory's manifests")

    def _pack(self, pack: PackRecord) -> Iterator[bytes]:
        at = 0
        for m in pack.members:
            yield b"\0" * (m.offset - at)
            yield self.read(blob_key(m.sha256))
            at = m.offset + m.size
        yield b"\0" * (pack.size - at)
