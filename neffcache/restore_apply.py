"""Restore I/O: scan what is in place, then fetch, verify and install files atomically.

Every path is opened relative to its root's directory descriptor, one component at a time with
``O_NOFOLLOW``: a symlink planted inside a target directory is never followed, so nothing is
read or written outside the root. A file is streamed from its blob into a temp file in its final
directory, its size and sha256 checked while streaming, fsynced, chmodded, ``os.replace``d
into place and its directory fsynced; the temp file is unlinked in ``finally``. Nothing
half-written ever has a final name.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from neffcache.errors import (
    DeadlineExceededError,
    IntegrityError,
    NotFoundError,
    UnavailableError,
)
from neffcache.hashing import CHUNK
from neffcache.restore_plan import (
    STATE_FILE,
    FetchGroup,
    FileId,
    PresentFile,
    RestorePlan,
    StateRecord,
    Target,
    decode_state,
    encode_state,
)
from neffcache.store import Store, blob_key

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_TMP_PREFIX = ".neffcache-"
_TMP_SUFFIX = ".tmp"
Progress = Callable[[int, int, int], None]  # (files done, files total, bytes fetched)


class UnsafePathError(OSError):
    """A path component inside a target root is a symlink or not a directory."""


@dataclass(frozen=True, slots=True)
class FileFailure:
    root: str
    path: str
    kind: str  # integrity | unavailable | io | deadline
    message: str

    def to_json(self) -> dict[str, str]:
        return {"root": self.root, "path": self.path, "kind": self.kind, "error": self.message}


@dataclass(frozen=True, slots=True)
class RestoreReport:
    """What ``apply_restore`` did: files installed, bytes fetched from the store, failures."""

    installed: tuple[Target, ...]
    failures: tuple[FileFailure, ...]
    bytes_fetched: int
    deadline_hit: bool
    states: tuple[tuple[FileId, StateRecord], ...] = field(default=(), repr=False)


# --- directory descriptors --------------------------------------------------------------------

class Roots:
    """Open descriptors of each target root (created if needed); close when done."""

    def __init__(self, target_dirs: Mapping[str, str]) -> None:
        self.fds: dict[str, int] = {}
        self.dirs = dict(target_dirs)
        try:
            for name, d in sorted(target_dirs.items()):
                os.makedirs(d, exist_ok=True)
                self.fds[name] = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    def __enter__(self) -> Roots:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def parent(self, root: str, path: str, *, create: bool) -> Iterator[int]:
        """The descriptor of a file's directory inside ``root``, never through a symlink."""
        fd = os.dup(self.fds[root])
        try:
            for part in path.split("/")[:-1]:
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                try:
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a symlink or file in the way
                        raise UnsafePathError(exc.errno, f"{root}/{path}: component {part!r} "
                                              f"is a symlink or not a directory; refusing to "
                                              f"follow it") from None
                    raise
                os.close(fd)
                fd = nfd
            _assert_inside(fd, self.dirs[root], root, path)
            yield fd
        finally:
            os.close(fd)


def _assert_inside(fd: int, root_dir: str, root: str, path: str) -> None:
    """Defence in depth: the resolved directory must lie inside the resolved root."""
    proc = f"/proc/self/fd/{fd}"
    if not os.path.exists(proc):
        return
    real, base = os.path.realpath(proc), os.path.realpath(root_dir)
    if real != base and not real.startswith(base.rstrip("/") + "/"):
        raise UnsafePathError(1, f"{root}/{path}: resolves outside the target root {base}")


def _file_name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _state_record(st: os.stat_result, sha256: str) -> StateRecord:
    return StateRecord(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, sha256,
                       stat.S_IMODE(st.st_mode))


# --- scan ----------------------------------------------------------------------------------

def load_state(target_dirs: Mapping[str, str]) -> dict[FileId, StateRecord]:
    out: dict[FileId, StateRecord] = {}
    for root, d in target_dirs.items():
        try:
            data = Path(d, STATE_FILE).read_bytes()
        except OSError:
            continue
        out.update(((root, p), r) for p, r in decode_state(data).items())
    return out


def save_state(target_dirs: Mapping[str, str], records: Mapping[FileId, StateRecord]) -> None:
    """Write each root's state file atomically (best effort: a failure only costs re-hashing)."""
    for root, d in target_dirs.items():
        mine = {p: r for (rt, p), r in records.items() if rt == root}
        if not mine:
            continue
        tmp = Path(d, f"{_TMP_PREFIX}{uuid.uuid4().hex[:12]}{_TMP_SUFFIX}")
        try:
            tmp.write_bytes(encode_state(mine))
            os.replace(tmp, Path(d, STATE_FILE))
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()


def scan_present(roots: Roots, wanted: Mapping[FileId, set[int]],
                 state: Mapping[FileId, StateRecord], *, workers: int = 8,
                 deadline: float | None = None) -> tuple[dict[FileId, PresentFile],
                                                          dict[FileId, StateRecord]]:
    """Look at every wanted path: its size and mode, and its sha256 when the size is one an
    entry wants (taken from the state file when size, mtime, ctime and inode are unchanged)."""

    def one(fid: FileId) -> tuple[FileId, PresentFile | None, StateRecord | None]:
        if deadline is not None and time.monotonic() >= deadline:
            return fid, None, None
        root, path = fid
        try:
            with roots.parent(root, path, create=False) as dfd:
                name = _file_name(path)
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                if not stat.S_ISREG(st.st_mode):
                    return fid, None, None
                mode = stat.S_IMODE(st.st_mode)
                if st.st_size not in wanted[fid]:
                    return fid, PresentFile(st.st_size, None, mode), None
                rec = state.get(fid)
                if rec is not None and rec.matches(st.st_size, st.st_mtime_ns,
                                                   st.st_ctime_ns, st.st_ino):
                    return fid, PresentFile(st.st_size, rec.sha256, mode), rec
                sha = _hash_at(dfd, name, deadline)
                if sha is None:
                    return fid, None, None
                return fid, PresentFile(st.st_size, sha, mode), _state_record(st, sha)
        except OSError:
            return fid, None, None

    present: dict[FileId, PresentFile] = {}
    records: dict[FileId, StateRecord] = {}
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for fid, pf, rec in pool.map(one, sorted(wanted)):
            if pf is not None:
                present[fid] = pf
            if rec is not None:
                records[fid] = rec
    return present, records


def _hash_at(dfd: int, name: str, deadline: float | None) -> str | None:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    h = hashlib.sha256()
    with os.fdopen(fd, "rb", buffering=0) as fh:
        while chunk := fh.read(CHUNK):
            if deadline is not None and time.monotonic() >= deadline:
                return None
            h.update(chunk)
    return h.hexdigest()


# --- apply ---------------------------------------------------------------------------------

class _Stopped(Exception):
    """The deadline passed while a file was being fetched."""


class _Collector:
    """Thread-safe tally of what the workers did."""

    def __init__(self, total: int, progress: Progress | None) -> None:
        self.lock = threading.Lock()
        self.total, self.progress = total, progress
        self.files = self.bytes = 0
        self.installed: list[Target] = []
        self.failures: list[FileFailure] = []
        self.states: list[tuple[FileId, StateRecord]] = []

    def add(self, group: FetchGroup, results: list[tuple[Target, StateRecord | FileFailure]]
            ) -> None:
        with self.lock:
            for t, outcome in results:
                if isinstance(outcome, FileFailure):
                    self.failures.append(outcome)
                    continue
                self.installed.append(t)
                self.states.append((t.id, outcome))
            if results and not isinstance(results[0][1], FileFailure):
                self.bytes += group.size
            self.files += len(results)
            if self.progress:
                self.progress(self.files, self.total, self.bytes)


def apply_restore(store: Store, plan: RestorePlan, *, workers: int = 16,
                  deadline: float | None = None, progress: Progress | None = None,
                  roots: Roots | None = None) -> RestoreReport:
    """Fetch every group of the plan with a bounded pool; failures are collected, never raised.

    ``deadline`` is a ``time.monotonic()`` value: no group starts after it, and a transfer in
    progress stops at its next chunk once it has passed (its temp file removed).
    """
    own = roots is None
    roots = roots or Roots(dict(plan.target_dirs))
    tally = _Collector(plan.files_to_fetch, progress)
    try:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            left = _schedule(pool, plan.fetch,
                             lambda g: tally.add(g, _fetch_group(store, roots, g, deadline)),
                             2 * max(1, workers), deadline)
        tally.failures.extend(FileFailure(t.root, t.path, "deadline",
                                          f"{t.root}/{t.path}: not started before the deadline")
                              for g in left for t in g.targets)
    finally:
        if own:
            roots.close()
    deadline_hit = any(f.kind == "deadline" for f in tally.failures)
    return RestoreReport(tuple(tally.installed), tuple(tally.failures), tally.bytes,
                         deadline_hit, tuple(tally.states))


def _schedule(pool: ThreadPoolExecutor, groups: Sequence[FetchGroup],
              run: Callable[[FetchGroup], None], window: int, deadline: float | None
              ) -> list[FetchGroup]:
    """Submit groups in order, at most ``window`` in flight, none after the deadline; wait for
    those in flight. Returns the groups never started."""
    queue = list(reversed(groups))
    pending: set[Future[None]] = set()
    while queue or pending:
        while queue and len(pending) < window:
            if deadline is not None and time.monotonic() >= deadline:
                left, queue = list(reversed(queue)), []
                for fut in wait(pending).done:
                    fut.result()
                return left
            pending.add(pool.submit(run, queue.pop()))
        done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
        for fut in done:
            fut.result()  # run() itself never raises; surface bugs if it does
    return []


def _fetch_group(store: Store, roots: Roots, group: FetchGroup, deadline: float | None
                 ) -> list[tuple[Target, StateRecord | FileFailure]]:
    first, rest = group.targets[0], group.targets[1:]
    out: list[tuple[Target, StateRecord | FileFailure]] = []
    try:
        if deadline is not None and time.monotonic() >= deadline:
            raise _Stopped
        with store.open(blob_key(group.sha256)) as src:
            out.append((first, _install(roots, first, src, deadline)))
    except Exception as exc:  # noqa: BLE001 - every failure becomes a reported FileFailure
        failure = _failure(first, exc, group.sha256)
        return [(t, FileFailure(t.root, t.path, failure.kind, failure.message))
                for t in group.targets]
    for t in rest:
        try:
            with roots.parent(first.root, first.path, create=False) as dfd:
                fd = os.open(_file_name(first.path), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
                             dir_fd=dfd)
            with os.fdopen(fd, "rb") as src:
                out.append((t, _install(roots, t, src, deadline)))
        except Exception as exc:  # noqa: BLE001
            out.append((t, _failure(t, exc, group.sha256)))
    return out


def _failure(t: Target, exc: BaseException, sha256: str) -> FileFailure:
    where = f"{t.root}/{t.path}"
    if isinstance(exc, (_Stopped, DeadlineExceededError)):
        return FileFailure(t.root, t.path, "deadline", f"{where}: stopped at the deadline")
    if isinstance(exc, NotFoundError):
        return FileFailure(t.root, t.path, "integrity",
                           f"{where}: blob {sha256[:12]} is missing from the store")
    if isinstance(exc, IntegrityError):
        return FileFailure(t.root, t.path, "integrity", str(exc))
    if isinstance(exc, UnavailableError):
        return FileFailure(t.root, t.path, "unavailable", str(exc))
    if isinstance(exc, UnsafePathError):
        return FileFailure(t.root, t.path, "io", exc.strerror or str(exc))
    if isinstance(exc, OSError):
        return FileFailure(t.root, t.path, "io", f"{where}: cannot write: {exc.strerror}")
    return FileFailure(t.root, t.path, "io", f"{where}: {type(exc).__name__}: {exc}")


def _install(roots: Roots, t: Target, src: BinaryIO, deadline: float | None) -> StateRecord:
    """Stream ``src`` into a temp file beside ``t``'s final path, verify, then rename it there."""
    name = _file_name(t.path)
    with roots.parent(t.root, t.path, create=True) as dfd:
        tmp = f"{_TMP_PREFIX}{uuid.uuid4().hex[:12]}{_TMP_SUFFIX}"
        placed = False
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600, dir_fd=dfd)
            with os.fdopen(fd, "wb") as out:
                _copy_verified(src, out, t, deadline)
                out.flush()
                os.fsync(out.fileno())
                os.fchmod(out.fileno(), t.mode)
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            placed = True
            os.fsync(dfd)  # the rename itself is durable before the file counts as installed
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            return _state_record(st, t.sha256)
        finally:
            if not placed:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)


def _copy_verified(src: BinaryIO, out: BinaryIO, t: Target, deadline: float | None) -> None:
    h = hashlib.sha256()
    n = 0
    while True:
        if deadline is not None and time.monotonic() >= deadline:
            raise _Stopped
        chunk = src.read(CHUNK)
        if not chunk:
            break
        n += len(chunk)
        if n > t.size:
            raise IntegrityError(f"{t.root}/{t.path}: blob {t.sha256[:12]} is larger than "
                                 f"{t.size} bytes; not installed")
        h.update(chunk)
        out.write(chunk)
    if n != t.size:
        raise IntegrityError(f"{t.root}/{t.path}: blob {t.sha256[:12]} has {n} bytes, "
                             f"expected {t.size} (truncated); not installed")
    digest = h.hexdigest()
    if digest != t.sha256:
        raise IntegrityError(f"{t.root}/{t.path}: blob sha256 is {digest[:12]}, expected "
                             f"{t.sha256[:12]} (corrupt); not installed")
