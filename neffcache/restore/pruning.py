"""Prune a restore destination: remove the entries the matrix and fingerprint no longer need."""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from neffcache.backends import Backend, get_backend, root_dirs
from neffcache.command_steps import consent
from neffcache.config import read_settings
from neffcache.errors import DeadlineExceededError, ExitRule, NeffcacheError, UsageError
from neffcache.fingerprint import Fingerprint, check_usable, collect_fingerprint
from neffcache.hashing import is_sha256
from neffcache.manifest import DIGEST_FIELD, SIGNATURE_FIELD, entry_key
from neffcache.matrix import Matrix
from neffcache.matrix_io import load_matrix
from neffcache.request_rules import checked_request
from neffcache.restore.fs import DirCache, Roots, local_manifest_path, lock_destination
from neffcache.restore.local import LOCAL_ENTRIES, manifest_of, read_local_doc
from neffcache.restore.ready import remove_markers_of
from neffcache.restore.state import forget_paths

FileAt = tuple[str, str]  # (root, path)
Keep = Callable[[str, Mapping[str, Any]], bool]  # (entry key, its local copy) -> stays


@dataclass(frozen=True, slots=True)
class PrunedEntry:
    """An entry prune removes: its key, cell and fingerprint, and its files that go."""

    entry_key: str
    cell_id: str
    fingerprint_key: str
    files: int
    bytes: int


@dataclass(frozen=True, slots=True)
class PruneResult(ExitRule):
    """What ``prune`` planned (``dry_run``) or did. ``remove``: (root, path, size) of each file that
    goes; ``shared``: files kept because a kept entry wants their path; ``unreadable``: copies left
    alone; ``removed``/``bytes_removed``: files removed (one changed or gone is ``skipped``)."""

    target: str
    fingerprint_key: str
    dry_run: bool
    kept: tuple[str, ...]
    pruned: tuple[PrunedEntry, ...]
    remove: tuple[tuple[str, str, int], ...] = field(repr=False)
    shared: int
    unreadable: tuple[str, ...] = ()
    removed: int = 0
    bytes_removed: int = 0
    skipped: int = 0

    @property
    def bytes_to_remove(self) -> int:
        return sum(size for _, _, size in self.remove)

    def to_json(self) -> dict[str, Any]:
        """The document ``neffcache prune --json`` prints."""
        return {"target": self.target, "fingerprint_key": self.fingerprint_key,
                "dry_run": self.dry_run, "kept": list(self.kept),
                "pruned": [asdict(p) for p in self.pruned],
                "files_to_remove": len(self.remove), "bytes_to_remove": self.bytes_to_remove,
                "files_shared": self.shared, "unreadable": list(self.unreadable),
                "removed": self.removed, "bytes_removed": self.bytes_removed,
                "skipped": self.skipped}


@checked_request
class PruneRequest:
    """What ``prune`` does.

    to           the restore destination (``neffcache restore --to DIR``)
    matrix       the matrix whose entries stay: a TOML file's path or a loaded ``Matrix``
    python       the interpreter the fingerprint describes (None: NEFFCACHE_PYTHON, the
                 config file, else the running one); ``fingerprint`` overrides both
    dry_run      plan only. Otherwise removing needs consent: ``confirmed=True``, or
                 ``confirm(preview)`` returning True (False: nothing removed, the preview is
                 returned). It never prompts."""

    to: str | Path
    matrix: str | Path | Matrix
    python: str | None = None
    fingerprint: Fingerprint | None = None
    dry_run: bool = False
    confirmed: bool = False
    confirm: Callable[[PruneResult], bool] | None = None


def prune(request: PruneRequest) -> PruneResult:
    """Remove from ``request.to`` the entries the matrix and fingerprint no longer need. Raises
    UsageError (exit 2) for a DIR that is not a restore destination or removal without consent,
    NeffcacheError (exit 1) while a restore holds DIR's lock, FingerprintMismatchError (exit 5) for
    an unknown neuron target."""
    target = Path(request.to).expanduser().absolute()
    if not (target / LOCAL_ENTRIES).is_dir():
        raise UsageError(f"{target}: not a restore destination (no {LOCAL_ENTRIES}/; "
                         "neffcache restore MATRIX --to DIR makes one)")
    m = request.matrix if isinstance(request.matrix, Matrix) else load_matrix(request.matrix)
    backend = get_backend(m.backend)
    fingerprint = request.fingerprint or collect_fingerprint(
        backend.name, os.environ, python=read_settings(os.environ, python=request.python).python)
    check_usable(fingerprint)  # an unknown target matches nothing: it would keep nothing
    wanted = {entry_key(c, fingerprint) for c in m.cells}

    def keep(key: str, copy: Mapping[str, Any]) -> bool:
        return key in wanted

    preview = plan_prune(target, backend, keep, fingerprint.key)
    if request.dry_run or not preview.pruned or not consent(
            request.confirmed, request.confirm, preview,
            f"prune would remove {len(preview.pruned)} entry(ies) and {len(preview.remove)} "
            f"file(s) from {preview.target}; refusing without consent",
            hint="neffcache prune DIR --matrix M --yes"):
        return preview
    try:
        return _prune_locked(target, backend, keep, fingerprint.key, time.monotonic(), "prune")
    except DeadlineExceededError:
        raise NeffcacheError(f"{target}: a restore is running there; prune touches nothing "
                             "a restore holds", hint="rerun neffcache prune once it ends"
                             ) from None


def evict_untrusted(target: Path, backend: Backend, trusted: Callable[[Any, Any], bool], *,
                    deadline: float | None = None) -> PruneResult | None:
    """Prune the entries whose copy ``trusted(signature, manifest_sha256)`` refuses, if any."""
    if not (target / LOCAL_ENTRIES).is_dir():
        return None

    def keep(key: str, copy: Mapping[str, Any]) -> bool:
        return trusted(copy.get(SIGNATURE_FIELD), copy.get(DIGEST_FIELD))

    if not plan_prune(target, backend, keep, "").pruned:
        return None
    return _prune_locked(target, backend, keep, "", deadline, "restore (evict)")


def _prune_locked(target: Path, backend: Backend, keep: Keep, fingerprint_key: str,
                  deadline: float | None, who: str) -> PruneResult:
    with lock_destination(str(target), deadline=deadline, who=who) as held:
        done = apply_prune(target, backend, plan_prune(target, backend, keep, fingerprint_key))
        if not held.unclean:
            held.finished()
    return done


def plan_prune(target: Path, backend: Backend, keep: Keep, fingerprint_key: str) -> PruneResult:
    """Which copies go (those ``keep(key, copy)`` refuses), and which of their files."""
    kept: list[str] = []
    gone: list[tuple[str, Mapping[str, Any]]] = []
    unreadable: list[str] = []
    wanted: set[FileAt] = set()  # the kept entries' files
    for name in sorted(os.listdir(target / LOCAL_ENTRIES)):
        key = name[:-len(".json")] if name.endswith(".json") else ""
        if not is_sha256(key):
            continue  # missing.json, the lock, the report spool
        doc = read_local_doc(target, key, backend.root_names)
        if doc is None:
            unreadable.append(key)
        elif keep(key, doc):
            kept.append(key)
            wanted.update((f["root"], f["path"]) for f in doc["files"])
        else:
            gone.append((key, doc))
    remove: dict[FileAt, int] = {}
    shared: set[FileAt] = set()
    pruned = []
    for key, copy in gone:
        mine = [(f["root"], f["path"], f["size"]) for f in copy["files"]]
        shared.update((r, p) for r, p, _ in mine if (r, p) in wanted)
        going = [(r, p, s) for r, p, s in mine if (r, p) not in wanted]
        remove.update(((r, p), s) for r, p, s in going)
        m = manifest_of(copy, key, with_files=False)
        pruned.append(PrunedEntry(key, m.cell.id if m else "?", m.fingerprint.key if m else "?",
                                  len(going), sum(s for _, _, s in going)))
    return PruneResult(str(target), fingerprint_key, True, tuple(kept), tuple(pruned),
                       tuple((r, p, s) for (r, p), s in sorted(remove.items())), len(shared),
                       tuple(unreadable))


def apply_prune(target: Path, backend: Backend, plan: PruneResult) -> PruneResult:
    """Remove the plan's markers, files, emptied dirs, state rows and copies; hold DIR's lock."""
    remove_markers_of(target, {entry.entry_key for entry in plan.pruned})
    dirs = root_dirs(backend, str(target))
    removed: dict[str, set[str]] = {}
    nbytes = 0
    with Roots(dirs, create=False) as roots, contextlib.closing(DirCache(roots)) as cache:
        for root, path, size in plan.remove:
            if root in roots.fds and _remove(cache, root, path, size):
                removed.setdefault(root, set()).add(path)
                nbytes += size
        for root, paths in removed.items():
            _remove_empty_dirs(cache, root, paths)
    forget_paths(dirs, removed)
    for entry in plan.pruned:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(local_manifest_path(target, entry.entry_key))
    done = sum(map(len, removed.values()))  # plan.remove names each file once
    return replace(plan, dry_run=False, removed=done, bytes_removed=nbytes,
                   skipped=len(plan.remove) - done)


def _remove(cache: DirCache, root: str, path: str, size: int) -> bool:
    """Unlink ``path`` if it is a regular file of ``size`` bytes (not behind a symlink)."""
    parent, _, name = path.rpartition("/")
    try:
        dfd = cache.get(root, parent, create=False)
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            return False
        os.unlink(name, dir_fd=dfd)
    except OSError:  # UnsafePathError too: behind a symlink
        return False
    return True


def _remove_empty_dirs(cache: DirCache, root: str, paths: Iterable[str]) -> None:
    """Remove the directories of ``paths`` left empty, deepest first (never the root)."""
    parents: set[str] = set()
    for path in paths:
        d = path.rpartition("/")[0]
        while d:
            parents.add(d)
            d = d.rpartition("/")[0]
    for d in sorted(parents, key=lambda p: p.count("/"), reverse=True):
        parent, _, name = d.rpartition("/")
        with contextlib.suppress(OSError):  # not empty, gone, or behind a symlink
            os.rmdir(name, dir_fd=cache.get(root, parent, create=False))
