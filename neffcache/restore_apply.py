"""Restore I/O: scan what is in place, then run the fetch units in two bounded lanes.

Files are written through directory descriptors opened one component at a time with
``O_NOFOLLOW`` (``DirCache``): a symlink planted inside a target directory is never followed, so
nothing is written outside the root. How one unit fetches, verifies and installs its files
atomically is in ``neffcache.restore_fetch`` (units) and ``neffcache.restore_files`` (files);
this module schedules units in plan order (none after the deadline) and tallies what they did.
Durability is batched: ``syncfs`` where Linux has it, else fsync per file and directory.

The scan is one ``fstatat`` per wanted file; a file is hashed only when its size is one an
entry wants and the state file does not vouch for it (same size, mtime, ctime, inode).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from neffcache.hashing import CHUNK
from neffcache.manifest import PackRecord, PartDigests
from neffcache.restore_plan import (
    STATE_FILE,
    FileId,
    PresentFile,
    RestorePlan,
    StateRecord,
    Target,
    decode_state,
    encode_state,
)
from neffcache.restore_units import (
    DEFAULT_UNITS,
    PackRun,
    UnitPolicy,
    plan_units,
    unit_groups,
)
from neffcache.store import Store
from neffcache.thread_pool import map_in_threads, run_lanes

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_TMP_PREFIX = ".neffcache-"
_TMP_SUFFIX = ".tmp"
_MAX_OPEN_DIRS = 64  # per DirCache: ``trim`` syncs and closes them beyond that
Progress = Callable[[int, int, int], None]  # (files done, files total, bytes fetched)
Outcome = tuple[Target, "StateRecord | FileFailure"]


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
    requests: int = 0


# --- directory descriptors --------------------------------------------------------------------

class Roots:
    """Open descriptors of each target root (created if needed); close when done."""

    def __init__(self, target_dirs: Mapping[str, str]) -> None:
        self.fds: dict[str, int] = {}
        self.dirs = dict(target_dirs)
        self.real: dict[str, str] = {}  # each root's resolved path, for _assert_inside
        self.created: set[tuple[str, str]] = set()  # directories this restore made
        try:
            for name, d in sorted(target_dirs.items()):
                os.makedirs(d, exist_ok=True)
                self.fds[name] = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                self.real[name] = os.path.realpath(d)
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
        dirs = DirCache(self)
        try:
            yield dirs.get(root, path.rpartition("/")[0], create=create)
        finally:
            dirs.close()


class DirCache:
    """Directory descriptors inside the roots for one thread: each opened once, from its parent,
    with ``O_NOFOLLOW`` (created first when asked), and checked to lie inside its root. Records
    which directories gained entries, so ``sync`` fsyncs each of them once. Descriptors stay
    valid until ``trim`` or ``close``, which the owner calls between batches of work."""

    def __init__(self, roots: Roots, *, check_inside: bool = True) -> None:
        self.roots = roots
        self.check_inside = check_inside
        self.fds: dict[tuple[str, str], int] = {}
        self.dirty: set[tuple[str, str]] = set()

    def get(self, root: str, dir_path: str, *, create: bool) -> int:
        """The descriptor of ``dir_path`` ("" for the root itself) inside ``root``."""
        if not dir_path:
            return self.roots.fds[root]
        key = (root, dir_path)
        fd = self.fds.get(key)
        if fd is not None:
            return fd
        parent, _, name = dir_path.rpartition("/")
        pfd = self.get(root, parent, create=create)
        created = self.roots.created
        # Under a directory this restore created, the child cannot exist yet: mkdir first.
        made = create and (root, parent) in created and self._mkdir(root, parent, name, pfd)
        while True:
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=pfd)
                break
            except FileNotFoundError:
                if not create or made:
                    raise
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a symlink or file in the way
                    raise UnsafePathError(exc.errno, f"{root}/{dir_path}: component {name!r} "
                                          f"is a symlink or not a directory; refusing to "
                                          f"follow it") from None
                raise
            made = self._mkdir(root, parent, name, pfd) or True
        try:
            # A directory made by this restore, opened without following links from a checked
            # parent, needs no further check; one that was there already gets one.
            if self.check_inside and key not in created:
                _assert_inside(fd, self.roots.real[root], root, dir_path)
        except BaseException:
            os.close(fd)
            raise
        self.fds[key] = fd
        return fd

    def _mkdir(self, root: str, parent: str, name: str, pfd: int) -> bool:
        """Create ``parent/name``; True if this call created it (another thread may win)."""
        try:
            os.mkdir(name, 0o755, dir_fd=pfd)
        except FileExistsError:
            return False
        self.dirty.add((root, parent))  # a new entry in the parent
        self.roots.created.add((root, f"{parent}/{name}" if parent else name))
        return True

    def touched(self, root: str, dir_path: str) -> None:
        """A file was renamed into ``dir_path``: fsync it at the next ``sync``."""
        self.dirty.add((root, dir_path))

    def sync(self) -> None:
        """Make every directory that gained an entry since the last sync durable: one
        ``syncfs`` per root where Linux offers it, else an fsync per directory (all are still
        open: the cache syncs before it closes anything)."""
        dirty, self.dirty = self.dirty, set()
        if dirty and sync_filesystems(self.roots.fds[r] for r, _ in dirty):
            return
        for root, dir_path in sorted(dirty):
            os.fsync(self.fds[(root, dir_path)] if dir_path else self.roots.fds[root])

    def trim(self) -> None:
        """Bound the descriptors held: past the limit, sync the dirty ones and close all."""
        if len(self.fds) >= _MAX_OPEN_DIRS:
            self.sync()
            self._close_all()

    def close(self) -> None:
        self._close_all()

    def _close_all(self) -> None:
        fds, self.fds = self.fds, {}
        for fd in fds.values():
            os.close(fd)


def _assert_inside(fd: int, real_root: str, root: str, dir_path: str) -> None:
    """Defence in depth: the directory just opened (component by component, no symlinks) must
    be exactly ``<resolved root>/<dir_path>``; one readlink of /proc/self/fd (skipped where
    there is no /proc)."""
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return
    if real != f"{real_root.rstrip('/')}/{dir_path}":
        raise UnsafePathError(1, f"{root}/{dir_path}: resolves to {real}, outside the target "
                              f"root {real_root}")


_syncfs: Callable[[int], int] | None | bool = False  # False: not looked up yet


def sync_filesystems(fds: Iterable[int]) -> bool:
    """``syncfs(2)`` once for each distinct descriptor: everything dirty on its filesystem is
    written back, in one call instead of one fsync per file and directory (on ext4 without a
    journal, as on many VMs, per-file fsync also writes each inode and parent synchronously).
    False where syncfs is not available (then the caller fsyncs file by file)."""
    global _syncfs
    if _syncfs is False:
        _syncfs = _find_syncfs()
    if _syncfs is None:
        return False
    for fd in set(fds):
        if _syncfs(fd) != 0:  # type: ignore[operator]
            import ctypes

            err = ctypes.get_errno()
            raise OSError(err, f"syncfs: {os.strerror(err)}")
    return True


def _find_syncfs() -> Callable[[int], int] | None:
    return _libc_function("syncfs", "c_int")  # type: ignore[return-value]


_sync_file_range: Callable[[int, int, int, int], int] | None | bool = False
_SYNC_FILE_RANGE_WRITE = 2


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing a range of a file to disk now, without waiting
    (``sync_file_range(2)``, Linux), so the fsync at the end has less left to wait for. A hint:
    where unavailable or failing, nothing happens (the fsync still makes the file durable)."""
    global _sync_file_range
    if _sync_file_range is False:
        _sync_file_range = _libc_function("sync_file_range", "c_int", "c_longlong",
                                          "c_longlong", "c_uint")
    if _sync_file_range is not None and length > 0:
        _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)  # type: ignore[operator]


def _libc_function(name: str, *argtypes: str) -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
        fn.argtypes = [getattr(ctypes, a) for a in argtypes]
        fn.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return fn  # type: ignore[no-any-return]


def state_record(st: os.stat_result, sha256: str) -> StateRecord:
    return StateRecord(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, sha256,
                       stat.S_IMODE(st.st_mode))


# --- state file ------------------------------------------------------------------------------

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


# --- scan ------------------------------------------------------------------------------------

def scan_present(roots: Roots, wanted: Mapping[FileId, set[int]],
                 state: Mapping[FileId, StateRecord], *, workers: int = 8,
                 deadline: float | None = None, hash_unknown: bool = True
                 ) -> tuple[dict[FileId, PresentFile], dict[FileId, StateRecord]]:
    """Look at every wanted path: its size and mode, and its sha256 when the size is one an
    entry wants — from the state file when size, mtime, ctime and inode are unchanged, else by
    hashing it (in a pool; skipped with ``hash_unknown=False``, leaving the file unknown).

    The look is one ``fstatat`` per file relative to its root, not following a symlink in the
    last component. It may pass through a symlinked directory, but it only reads metadata and
    a match with the state file means the very inode neffcache verified; a file that must be
    hashed is opened component by component without following any symlink."""
    present: dict[FileId, PresentFile] = {}
    records: dict[FileId, StateRecord] = {}
    to_hash: list[tuple[FileId, os.stat_result]] = []
    fds = roots.fds
    for fid in wanted:
        root, path = fid
        try:
            st = os.stat(path, dir_fd=fds[root], follow_symlinks=False)
        except OSError:
            continue  # absent, or a file in the way: fetched (or refused) later
        if not stat.S_ISREG(st.st_mode):
            continue
        mode = stat.S_IMODE(st.st_mode)
        if st.st_size not in wanted[fid]:
            present[fid] = PresentFile(st.st_size, None, mode)
            continue
        rec = state.get(fid)
        if rec is not None and rec.matches(st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                                           st.st_ino):
            present[fid] = PresentFile(st.st_size, rec.sha256, mode)
            records[fid] = rec
        elif hash_unknown:
            to_hash.append((fid, st))
    if to_hash:
        _hash_present(roots, to_hash, present, records, workers, deadline)
    return present, records


def _hash_present(roots: Roots, items: list[tuple[FileId, os.stat_result]],
                  present: dict[FileId, PresentFile], records: dict[FileId, StateRecord],
                  workers: int, deadline: float | None) -> None:
    def one(item: tuple[FileId, os.stat_result]) -> tuple[FileId, str | None]:
        (root, path), _st = item
        if deadline is not None and time.monotonic() >= deadline:
            return item[0], None
        try:
            with roots.parent(root, path, create=False) as dfd:
                return item[0], _hash_at(dfd, path.rpartition("/")[2], deadline)
        except OSError:
            return item[0], None

    for (fid, sha), (_, st) in zip(map_in_threads(one, items, workers), items, strict=True):
        if sha is not None:
            present[fid] = PresentFile(st.st_size, sha, stat.S_IMODE(st.st_mode))
            records[fid] = state_record(st, sha)


def _hash_at(dfd: int, name: str, deadline: float | None) -> str | None:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    h = hashlib.sha256()
    with os.fdopen(fd, "rb", buffering=0) as fh:
        while chunk := fh.read(CHUNK):
            if deadline is not None and time.monotonic() >= deadline:
                return None
            h.update(chunk)
    return h.hexdigest()


# --- apply -----------------------------------------------------------------------------------

class _Collector:
    """Thread-safe tally of what the workers did."""

    def __init__(self, total: int, progress: Progress | None) -> None:
        self.lock = threading.Lock()
        self.total, self.progress = total, progress
        self.files = self.bytes = 0
        self.installed: list[Target] = []
        self.failures: list[FileFailure] = []
        self.states: list[tuple[FileId, StateRecord]] = []

    def add(self, outcomes: Sequence[Outcome], nbytes: int) -> None:
        with self.lock:
            for t, outcome in outcomes:
                if isinstance(outcome, FileFailure):
                    self.failures.append(outcome)
                    continue
                self.installed.append(t)
                self.states.append((t.id, outcome))
            self.bytes += nbytes
            self.files += len(outcomes)
            if self.progress and outcomes:
                self.progress(self.files, self.total, self.bytes)


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def apply_restore(store: Store, plan: RestorePlan, *, workers: int = 16,
                  deadline: float | None = None, progress: Progress | None = None,
                  roots: Roots | None = None, packs: Sequence[PackRecord] = (),
                  policy: UnitPolicy = DEFAULT_UNITS,
                  parts: Sequence[PartDigests] = ()) -> RestoreReport:
    """Fetch every group of the plan (from ``packs`` — the entries' ``PackRecord``s, in cell
    order — where they hold it; large blobs verified per part where ``parts``, the entries'
    ``PartDigests``, describe them); failures are collected, never raised.

    Two lanes: pack runs, whose cost is creating thousands of small files (kernel and GIL
    work that more threads than CPUs only slow down, measured), run on at most one thread per
    CPU plus one; blob GETs and parts, whose cost is waiting on the network, on ``workers``.
    ``deadline`` is a ``time.monotonic()`` value: no unit starts after it, and a transfer in
    progress stops at its next chunk once it has passed (its temp file removed).
    """
    from neffcache.restore_fetch import Fetcher

    own = roots is None
    roots = roots or Roots(dict(plan.target_dirs))
    units = plan_units(plan.fetch, packs, policy, parts)
    tally = _Collector(plan.files_to_fetch, progress)
    from neffcache.restore_files import batch_files

    workers = max(1, workers)
    file_workers = max(1, min(workers, usable_cpus() + 1))
    fetcher = Fetcher(store, roots, deadline, batch_files(file_workers, workers))
    runs = [u for u in units if isinstance(u, PackRun)]
    blobs = [u for u in units if not isinstance(u, PackRun)]
    try:
        left = run_lanes([(file_workers, runs), (workers, blobs)],
                         lambda u: tally.add(*fetcher.run(u)), deadline)
        tally.add(fetcher.abandon(left), 0)
    finally:
        if own:
            roots.close()
    deadline_hit = any(f.kind == "deadline" for f in tally.failures)
    return RestoreReport(tuple(tally.installed), tuple(tally.failures), tally.bytes,
                         deadline_hit, tuple(tally.states), len(units) - len(left))


__all__ = ["DirCache", "FileFailure", "Progress", "RestoreReport", "Roots", "UnsafePathError",
           "apply_restore", "load_state", "save_state", "scan_present", "start_writeback",
           "state_record", "sync_filesystems", "unit_groups", "usable_cpus"]
