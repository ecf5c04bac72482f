"""Install one file atomically: temp file beside the target, verify, rename (never fsynced)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import BinaryIO

from neffcache.errors import DeadlineExceededError, IntegrityError, NotFoundError, UnavailableError
from neffcache.hashing import CHUNK
from neffcache.restore.fs import DirCache, UnsafePathError, tmp_name
from neffcache.restore.plan import FetchGroup, Target
from neffcache.restore.state import StateRecord, state_record

NEW = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
BATCH_FILES = 32  # small files per flush/rename batch at most (see batch_files)
_UMASK = -1  # the process umask, read once by the first Fetcher


@dataclass(frozen=True, slots=True)
class FileFailure:
    root: str
    path: str
    kind: str  # integrity | unavailable | io | deadline
    message: str

    def to_json(self) -> dict[str, str]:
        return {"root": self.root, "path": self.path, "kind": self.kind, "error": self.message}


Outcome = tuple[Target, "StateRecord | FileFailure"]

LISTED_FAILURES = 100  # failed files held as records (then the first of each kind); others counted


@dataclass(frozen=True, slots=True)
class Failures:
    """The files that failed: ``count``; ``listed`` the first ones, then the first of each kind."""

    listed: tuple[FileFailure, ...] = ()
    count: int = 0

    def __add__(self, other: Failures) -> Failures:
        tally = FailureTally()
        for f in (*self.listed, *other.listed):
            tally.add(f)
        return replace(tally.done(), count=self.count + other.count)


class FailureTally:
    """Collects failures as ``Failures`` (not thread-safe: the caller holds its lock)."""

    __slots__ = ("_count", "_first", "_kinds", "_listed")

    def __init__(self, listed: int = LISTED_FAILURES) -> None:
        self._listed = listed
        self._first: list[FileFailure] = []
        self._kinds: dict[str, FileFailure] = {}  # the first of each kind
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, f: FileFailure) -> None:
        self._count += 1
        if len(self._first) < self._listed:
            self._first.append(f)
        self._kinds.setdefault(f.kind, f)

    def done(self) -> Failures:
        listed = {id(f) for f in self._first}
        extra = [f for f in self._kinds.values() if id(f) not in listed]
        return Failures((*self._first, *extra), self._count)


def set_mode(fd: int, mode: int) -> None:
    """Files are created with their final mode; fix it only where the umask took bits away."""
    if mode & _UMASK or _UMASK < 0:
        os.fchmod(fd, mode)


class Stopped(Exception):
    """The deadline passed while a unit was running."""


def read_umask() -> None:
    """Read the process umask once, before any worker thread creates files."""
    global _UMASK
    if _UMASK < 0:
        _UMASK = os.umask(0o022)
        os.umask(_UMASK)


def place(dirs: DirCache, t: Target, write: Callable[[int], None]) -> StateRecord:
    """A temp file beside ``t``'s path, written by ``write(fd)`` (which verifies), renamed."""
    dir_path, _, name = t.path.rpartition("/")
    dfd = dirs.get(t.root, dir_path, create=True)
    tmp = tmp_name()
    fd = os.open(tmp, NEW, t.mode, dir_fd=dfd)
    placed = False
    try:
        write(fd)
        set_mode(fd, t.mode)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        placed = True
        return state_record(os.fstat(fd), t.sha256)
    finally:
        os.close(fd)
        if not placed:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)


class Batch:
    """Small files written to temp files, renamed together once verified (else removed on exit)."""

    def __init__(self, dirs: DirCache) -> None:
        self.dirs = dirs
        self.items: list[tuple[Target, str, int, str, int]] = []  # target, dir, dfd, tmp, fd

    def __len__(self) -> int:
        return len(self.items)

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close(self.items, placed=set())
        self.items = []

    def add(self, g: FetchGroup, data: bytes | memoryview) -> list[Outcome]:
        """Write ``data`` (verified) to a temp file for each target; failures now."""
        out: list[Outcome] = []
        for t in g.targets:
            dir_path = t.path.rpartition("/")[0]
            fd = -1
            try:
                dfd = self.dirs.get(t.root, dir_path, create=True)
                tmp = tmp_name()
                fd = os.open(tmp, NEW, t.mode, dir_fd=dfd)
                self.items.append((t, dir_path, dfd, tmp, fd))
                write_all(fd, data)
                set_mode(fd, t.mode)
            except Exception as exc:  # noqa: BLE001
                if fd >= 0:
                    self._close([self.items.pop()], placed=set())
                out.append((t, failure(t, exc)))
        return out

    def commit(self) -> list[Outcome]:
        items, self.items = self.items, []
        out: list[Outcome] = []
        placed: set[int] = set()
        try:
            for t, _dir_path, dfd, tmp, fd in items:
                try:
                    os.replace(tmp, t.path.rpartition("/")[2], src_dir_fd=dfd, dst_dir_fd=dfd)
                    placed.add(fd)
                    out.append((t, state_record(os.fstat(fd), t.sha256)))
                except OSError as exc:
                    out.append((t, failure(t, exc)))
        finally:
            self._close(items, placed)
        return out

    @staticmethod
    def _close(items: Iterable[tuple[Target, str, int, str, int]], placed: set[int]) -> None:
        for _t, _d, dfd, tmp, fd in items:
            if fd not in placed:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
            os.close(fd)


def copies(dirs: DirCache, g: FetchGroup) -> list[Outcome]:
    """The group's other targets, copied from the installed first one (verified again)."""
    first = g.targets[0]
    out: list[Outcome] = []
    for t in g.targets[1:]:
        try:
            dfd = dirs.get(first.root, first.path.rpartition("/")[0], create=False)
            fd = os.open(first.path.rpartition("/")[2],
                         os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            with os.fdopen(fd, "rb") as src:
                out.append((t, place(dirs, t, functools.partial(copy_verified, src, t=t))))
        except Exception as exc:  # noqa: BLE001
            out.append((t, failure(t, exc)))
    return out


def copy_verified(src: BinaryIO, fd: int, t: Target, deadline: float | None = None) -> None:
    h = hashlib.sha256()
    n = 0
    while True:
        if deadline is not None and time.monotonic() >= deadline:
            raise Stopped
        chunk = src.read(CHUNK)
        if not chunk:
            break
        n += len(chunk)
        if n > t.size:
            raise IntegrityError(f"{t.root}/{t.path}: blob {t.sha256[:12]} is larger than "
                                 f"{t.size} bytes; not installed")
        h.update(chunk)
        write_all(fd, chunk)
    if n != t.size:
        raise IntegrityError(f"{t.root}/{t.path}: blob {t.sha256[:12]} has {n} bytes, "
                             f"expected {t.size} (truncated); not installed")
    digest = h.hexdigest()
    if digest != t.sha256:
        raise IntegrityError(f"{t.root}/{t.path}: blob sha256 is {digest[:12]}, expected "
                             f"{t.sha256[:12]} (corrupt); not installed")


def batch_files(pack_threads: int, transfer_threads: int) -> int:
    """Small files per batch: every pack thread's batch must fit the open-file soft limit."""
    import resource

    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        soft = 1024
    if soft == resource.RLIM_INFINITY:
        return BATCH_FILES
    budget = soft // 2 - 4 * transfer_threads
    return max(1, min(BATCH_FILES, budget // max(1, pack_threads)))


def read_piece(src: BinaryIO, view: memoryview) -> bytes | memoryview:
    """The next at most ``len(view)`` bytes of ``src``, without a copy where it can."""
    if getattr(src, "zero_copy_reads", False):
        return src.read(len(view))
    try:
        return view[:src.readinto(view)]  # type: ignore[attr-defined]
    except (AttributeError, NotImplementedError, io.UnsupportedOperation):
        return src.read(len(view))


# Files are written in slices of this size. Measured here (kernel 6.18, ext4, 2-core VM): a
# 339 MiB restore written as 1 MiB writes cost 0.78 s of system time, as 16-128 KiB writes
# 0.37-0.45 s (likely the large page-cache folios the kernel allocates for large writes). The
# extra syscalls are a few thousand per restore.
WRITE_BYTES = 64 << 10


def write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view[:WRITE_BYTES]):]


def fail_all(g: FetchGroup, exc: BaseException) -> list[Outcome]:
    return [(t, failure(t, exc)) for t in g.targets]


def failure(t: Target, exc: BaseException) -> FileFailure:
    where = f"{t.root}/{t.path}"
    if isinstance(exc, (Stopped, DeadlineExceededError)):
        return FileFailure(t.root, t.path, "deadline", f"{where}: stopped at the deadline")
    if isinstance(exc, NotFoundError):
        return FileFailure(t.root, t.path, "integrity",
                           f"{where}: blob {t.sha256[:12]} is missing from the store")
    if isinstance(exc, IntegrityError):
        return FileFailure(t.root, t.path, "integrity", str(exc))
    if isinstance(exc, UnavailableError):
        return FileFailure(t.root, t.path, "unavailable", str(exc))
    if isinstance(exc, UnsafePathError):
        return FileFailure(t.root, t.path, "io", exc.strerror or str(exc))
    if isinstance(exc, OSError):
        return FileFailure(t.root, t.path, "io", f"{where}: cannot write: {exc.strerror or exc}")
    return FileFailure(t.root, t.path, "io", f"{where}: {type(exc).__name__}: {exc}")
