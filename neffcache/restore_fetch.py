"""Run one fetch unit: bring its bytes from the store, verify them, install them atomically.

Every file is written to a temp file beside its final path, its size and sha256 checked, its
mode set, fsynced and ``os.replace``d into place; its directory is fsynced before the unit
reports the file installed (once per directory per unit). The temp file is removed on any
failure: nothing half-written ever has a final name.

- ``PackRun``: one ranged read of a pack; each member (small by construction) is read whole,
  checked against its sha256 and written; a corrupt member fails alone, a short read fails the
  rest. A pack missing from the store falls back to the members' own blobs.
- ``BlobGet``: one GET, streamed into the temp file and hashed on the way.
- ``BlobPart``: ranged GETs of one large blob run in parallel and ``pwrite`` into one shared
  temp file; whichever worker completes the next part in order hashes it (read back from the
  page cache), so hashing overlaps the transfer; the worker that hashes the last part (or sees
  the last part fail) finishes the file.
A file wanted at several paths is fetched once and copied locally (and verified again).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import mmap
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import BinaryIO

from neffcache.errors import (
    DeadlineExceededError,
    IntegrityError,
    NotFoundError,
    UnavailableError,
)
from neffcache.hashing import CHUNK
from neffcache.restore_apply import (
    DirCache,
    FileFailure,
    Outcome,
    Roots,
    UnsafePathError,
    start_writeback,
    state_record,
    sync_filesystems,
)
from neffcache.restore_plan import FetchGroup, StateRecord, Target
from neffcache.restore_units import BlobGet, BlobPart, PackRun, Unit, unit_groups
from neffcache.store import Store, blob_key
from neffcache.store.base import pack_key

_TMP = f".neffcache-{uuid.uuid4().hex[:8]}-"
_TMP_SUFFIX = ".tmp"
_names = itertools.count()
_NEW = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_BATCH_FILES = 32  # small files per fsync/rename batch (each holds a descriptor until then)
_UMASK = -1  # the process umask, read once by the first Fetcher


def _set_mode(fd: int, mode: int) -> None:
    """Files are created with their final mode; fix it only where the umask took bits away."""
    if mode & _UMASK or _UMASK < 0:
        os.fchmod(fd, mode)


class _Stopped(Exception):
    """The deadline passed while a unit was running."""


def _tmp_name() -> str:
    return f"{_TMP}{next(_names):x}{_TMP_SUFFIX}"


class Fetcher:
    """Runs units for ``apply_restore``; ``run`` never raises. Holds the large files being
    assembled from parts across units."""

    def __init__(self, store: Store, roots: Roots, deadline: float | None) -> None:
        global _UMASK
        self.store, self.roots, self.deadline = store, roots, deadline
        if _UMASK < 0:  # read once, before any worker thread creates files
            _UMASK = os.umask(0o022)
            os.umask(_UMASK)
        self._lock = threading.Lock()
        self._assemblies: dict[str, _Assembly] = {}

    def run(self, unit: Unit) -> tuple[list[Outcome], int]:
        """(outcome per target finished by this call, bytes fetched for them)."""
        dirs = DirCache(self.roots)
        try:
            if isinstance(unit, PackRun):
                out = self._pack(unit, dirs)
            elif isinstance(unit, BlobGet):
                out = self._blob(unit.group, dirs)
            else:
                out = self._part(unit, dirs)
            try:
                dirs.sync()
            except OSError as exc:
                out = [(t, o if isinstance(o, FileFailure) else _failure(t, exc, ""))
                       for t, o in out]
        finally:
            dirs.close()
        return out, _bytes(out, unit_groups(unit))

    def abandon(self, units: Sequence[Unit]) -> list[Outcome]:
        """Deadline failures for units never started; large files left unfinished removed."""
        out: list[Outcome] = []
        seen: set[str] = set()
        for unit in units:
            for g in unit_groups(unit):
                if g.sha256 in seen:
                    continue
                seen.add(g.sha256)
                asm = self._assemblies.pop(g.sha256, None)
                if asm is not None:
                    asm.discard()
                out.extend(_fail_all(g, _Stopped()))
        return out

    # -- units --------------------------------------------------------------------------------

    def _check(self) -> None:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise _Stopped

    def _pack(self, run: PackRun, dirs: DirCache) -> list[Outcome]:
        try:
            self._check()
            body = self.store.open(pack_key(run.pack), run.start, run.length)
        except NotFoundError:  # packs are an extra: the members are blobs too
            return [o for s in run.slices for o in self._blob(s.group, dirs)]
        except Exception as exc:  # noqa: BLE001 - every failure becomes a FileFailure
            return [o for s in run.slices for o in _fail_all(s.group, exc)]
        out: list[Outcome] = []
        with body, _Batch(dirs) as batch:
            window = _Window(body, run.start)
            for i, s in enumerate(run.slices):
                g = s.group
                data: bytes | memoryview = b""
                try:
                    self._check()
                    data = window.take(s.offset, g.size)
                    _verify_member(data, g, run.pack)
                except IntegrityError as exc:
                    out.extend(_fail_all(g, exc))
                    if len(data) < g.size:  # the stream ended: the rest is missing too
                        for rest in run.slices[i + 1:]:
                            out.extend(_fail_all(rest.group, IntegrityError(
                                f"pack {run.pack[:12]} ends before offset {rest.offset} "
                                f"(truncated)")))
                        break
                    continue
                except Exception as exc:  # noqa: BLE001
                    for rest in run.slices[i:]:
                        out.extend(_fail_all(rest.group, exc))
                    break
                out.extend(batch.add(g, data))
                if len(batch) >= _BATCH_FILES:
                    out.extend(batch.commit())
                    dirs.trim()
            out.extend(batch.commit())
        return out

    def _blob(self, g: FetchGroup, dirs: DirCache) -> list[Outcome]:
        first = g.targets[0]
        try:
            self._check()
            with self.store.open(blob_key(g.sha256)) as src:
                rec = _place(dirs, first, lambda fd: _copy_verified(src, fd, first,
                                                                    self.deadline))
        except Exception as exc:  # noqa: BLE001
            return _fail_all(g, exc)
        return [(first, rec), *_copies(dirs, g)]

    def _part(self, part: BlobPart, dirs: DirCache) -> list[Outcome]:
        g = part.group
        with self._lock:
            asm = self._assemblies.get(g.sha256)
            if asm is None:
                asm = self._assemblies[g.sha256] = _Assembly(g, part.count)
        error: BaseException | None = None
        try:
            asm.open(dirs)
            if asm.error is None:
                self._check()
                self._fetch_part(part, asm)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a FileFailure
            error = exc
        if not asm.part_done(part, error):
            return []
        with self._lock:
            self._assemblies.pop(g.sha256, None)
        return asm.finish(dirs)

    def _fetch_part(self, part: BlobPart, asm: _Assembly) -> None:
        g, done = part.group, 0
        with self.store.open(blob_key(g.sha256), part.start, part.length) as body:
            while done < part.length:
                self._check()
                chunk = body.read(min(CHUNK, part.length - done))
                if not chunk:
                    break
                # Writes to one file serialize on its inode lock anyway; waiting here (asleep)
                # instead of in the kernel (spinning) saves the CPU the other parts need.
                with asm.write_lock:
                    _pwrite_all(asm.fd, chunk, part.start + done)
                done += len(chunk)
        start_writeback(asm.fd, part.start, done)  # overlap the disk writes with the rest
        if done < part.length:
            t = g.targets[0]
            raise IntegrityError(f"{t.root}/{t.path}: blob {g.sha256[:12]} ends at "
                                 f"{part.start + done} bytes, expected {g.size} (truncated); "
                                 f"not installed")


class _Assembly:
    """A large file written by ``count`` parts into one temp file, hashed in part order as the
    parts land (by whichever worker holds the hashing role)."""

    def __init__(self, g: FetchGroup, count: int) -> None:
        self.group, self.count = g, count
        self.dfd = self.fd = -1
        self.tmp = ""
        self.error: BaseException | None = None
        self.write_lock = threading.Lock()
        self._lock = threading.Lock()
        self._landed: dict[int, tuple[int, int]] = {}  # part index -> (start, length)
        self._finished = 0
        self._next = 0  # parts [0, _next) are hashed
        self._hashing = False
        self._done = False
        self._hash = hashlib.sha256()

    def open(self, dirs: DirCache) -> None:
        """Create the temp file beside the first target (once; an error sticks)."""
        with self._lock:
            if self.fd >= 0 or self.error is not None:
                return
            t = self.group.targets[0]
            try:
                self.dfd = os.dup(dirs.get(t.root, t.path.rpartition("/")[0], create=True))
                self.tmp = _tmp_name()
                self.fd = os.open(self.tmp, _NEW, 0o600, dir_fd=self.dfd)
            except Exception as exc:
                self.error = exc
                if self.dfd >= 0:
                    os.close(self.dfd)
                    self.dfd = -1
                raise

    def part_done(self, part: BlobPart, error: BaseException | None) -> bool:
        """Record a finished part and hash what is ready. True (once) when every part has
        finished and the file is hashed or failed: the caller must then ``finish`` it."""
        with self._lock:
            self._finished += 1
            if error is not None:
                self.error = self.error or error
            else:
                self._landed[part.index] = (part.start, part.length)
            if self._hashing:
                return False
            self._hashing = True
        while True:
            with self._lock:
                if self.error is not None or self._next == self.count \
                        or self._next not in self._landed:
                    self._hashing = False
                    if self._finished == self.count and not self._done and (
                            self.error is not None or self._next == self.count):
                        self._done = True
                        return True
                    return False
                start, length = self._landed[self._next]
            try:
                _hash_range(self.fd, start, length, self._hash)
            except OSError as exc:
                with self._lock:
                    self.error = self.error or exc
                continue
            with self._lock:
                self._next += 1

    def finish(self, dirs: DirCache) -> list[Outcome]:
        g, t = self.group, self.group.targets[0]
        try:
            if self.error is not None:
                raise self.error
            digest = self._hash.hexdigest()
            if digest != g.sha256:
                raise IntegrityError(f"{t.root}/{t.path}: blob sha256 is {digest[:12]}, "
                                     f"expected {g.sha256[:12]} (corrupt); not installed")
            os.fchmod(self.fd, t.mode)
            os.fsync(self.fd)
            os.replace(self.tmp, t.path.rpartition("/")[2], src_dir_fd=self.dfd,
                       dst_dir_fd=self.dfd)
            self.tmp = ""
            os.fsync(self.dfd)
            rec = state_record(os.fstat(self.fd), t.sha256)
        except Exception as exc:  # noqa: BLE001
            self.discard()
            return _fail_all(g, exc)
        self.discard()
        return [(t, rec), *_copies(dirs, g)]

    def discard(self) -> None:
        """Close descriptors; remove the temp file unless it was renamed into place."""
        with self._lock:
            if self.fd >= 0:
                if self.tmp:
                    with contextlib.suppress(OSError):
                        os.unlink(self.tmp, dir_fd=self.dfd)
                os.close(self.fd)
                self.fd = -1
            if self.dfd >= 0:
                os.close(self.dfd)
                self.dfd = -1


# --- files -----------------------------------------------------------------------------------

def _place(dirs: DirCache, t: Target, write: Callable[[int], None]) -> StateRecord:
    """Write a temp file beside ``t``'s path with ``write(fd)`` (which verifies), set its mode,
    fsync, rename it into place; the directory is fsynced at the unit's ``dirs.sync()``."""
    dir_path, _, name = t.path.rpartition("/")
    dfd = dirs.get(t.root, dir_path, create=True)
    tmp = _tmp_name()
    fd = os.open(tmp, _NEW, t.mode, dir_fd=dfd)
    placed = False
    try:
        write(fd)
        _set_mode(fd, t.mode)
        os.fsync(fd)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        placed = True
        dirs.touched(t.root, dir_path)
        return state_record(os.fstat(fd), t.sha256)
    finally:
        os.close(fd)
        if not placed:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)


class _Batch:
    """Small files written to temp files first, made durable together (one ``syncfs``, or an
    fsync each where there is none), renamed together, and the renames made durable together
    (``DirCache.sync``): two flushes per batch instead of a file and a directory fsync per
    file, and still never a name pointing at bytes that are not on disk. Uncommitted temp
    files are removed on exit."""

    def __init__(self, dirs: DirCache) -> None:
        self.dirs = dirs
        self.items: list[tuple[Target, str, int, str, int]] = []  # target, dir, dfd, tmp, fd

    def __len__(self) -> int:
        return len(self.items)

    def __enter__(self) -> _Batch:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close(self.items, placed=set())
        self.items = []

    def add(self, g: FetchGroup, data: bytes) -> list[Outcome]:
        """Write ``data`` (already verified) to a temp file for each target; failures now."""
        out: list[Outcome] = []
        for t in g.targets:
            dir_path = t.path.rpartition("/")[0]
            fd = -1
            try:
                dfd = self.dirs.get(t.root, dir_path, create=True)
                tmp = _tmp_name()
                fd = os.open(tmp, _NEW, t.mode, dir_fd=dfd)
                self.items.append((t, dir_path, dfd, tmp, fd))
                _write_all(fd, data)
                _set_mode(fd, t.mode)
            except Exception as exc:  # noqa: BLE001
                if fd >= 0:
                    self._close([self.items.pop()], placed=set())
                out.append((t, _failure(t, exc, g.sha256)))
        return out

    def commit(self) -> list[Outcome]:
        items, self.items = self.items, []
        out: list[Outcome] = []
        placed: set[int] = set()
        try:
            synced = []
            try:
                flushed = bool(items) and sync_filesystems(
                    self.dirs.roots.fds[t.root] for t, *_ in items)
            except OSError as exc:
                return [*out, *((t, _failure(t, exc, t.sha256)) for t, *_ in items)]
            if flushed:
                synced = items  # every temp file's data and inode are on disk
            else:
                for item in items:
                    try:
                        os.fsync(item[4])
                        synced.append(item)
                    except OSError as exc:
                        out.append((item[0], _failure(item[0], exc, item[0].sha256)))
            for t, dir_path, dfd, tmp, fd in synced:
                try:
                    os.replace(tmp, t.path.rpartition("/")[2], src_dir_fd=dfd, dst_dir_fd=dfd)
                    placed.add(fd)
                    self.dirs.touched(t.root, dir_path)
                    out.append((t, state_record(os.fstat(fd), t.sha256)))
                except OSError as exc:
                    out.append((t, _failure(t, exc, t.sha256)))
            self.dirs.sync()
        except OSError as exc:  # a directory fsync failed: nothing in this batch is durable
            out = [(t, o if isinstance(o, FileFailure) else _failure(t, exc, t.sha256))
                   for t, o in out]
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


def _copies(dirs: DirCache, g: FetchGroup) -> list[Outcome]:
    """The group's other targets, copied from the installed first one (verified again)."""
    first = g.targets[0]
    out: list[Outcome] = []
    for t in g.targets[1:]:
        try:
            dfd = dirs.get(first.root, first.path.rpartition("/")[0], create=False)
            fd = os.open(first.path.rpartition("/")[2],
                         os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            with os.fdopen(fd, "rb") as src:
                out.append((t, _place(dirs, t, lambda wfd, s=src, t=t: _copy_verified(
                    s, wfd, t, None))))
        except Exception as exc:  # noqa: BLE001
            out.append((t, _failure(t, exc, g.sha256)))
    return out


def _copy_verified(src: BinaryIO, fd: int, t: Target, deadline: float | None) -> None:
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
        _write_all(fd, chunk)
    if n != t.size:
        raise IntegrityError(f"{t.root}/{t.path}: blob {t.sha256[:12]} has {n} bytes, "
                             f"expected {t.size} (truncated); not installed")
    digest = h.hexdigest()
    if digest != t.sha256:
        raise IntegrityError(f"{t.root}/{t.path}: blob sha256 is {digest[:12]}, expected "
                             f"{t.sha256[:12]} (corrupt); not installed")


def _verify_member(data: bytes, g: FetchGroup, pack: str) -> None:
    t = g.targets[0]
    if len(data) != g.size:
        raise IntegrityError(f"{t.root}/{t.path}: pack {pack[:12]} holds {len(data)} of its "
                             f"{g.size} bytes (truncated); not installed")
    digest = hashlib.sha256(data).hexdigest()
    if digest != g.sha256:
        raise IntegrityError(f"{t.root}/{t.path}: pack {pack[:12]} member sha256 is "
                             f"{digest[:12]}, expected {g.sha256[:12]} (corrupt); not installed")


class _Window:
    """Byte ranges of a stream, asked for in increasing order, served from large reads: a
    range inside one read is a zero-copy view; one across reads is joined (a copy of just that
    range). Holds one read (``CHUNK``) at a time."""

    def __init__(self, src: BinaryIO, pos: int) -> None:
        self._src = src
        self._pos = pos  # stream offset of _buf[0]
        self._buf: bytes = b""

    def take(self, offset: int, size: int) -> bytes | memoryview:
        """``size`` bytes from ``offset``, or fewer if the stream ends first."""
        start = offset - self._pos
        while start >= len(self._buf):  # skip what lies before the range
            start -= len(self._buf)
            self._pos += len(self._buf)
            self._buf = self._src.read(CHUNK)
            if not self._buf:
                return b""
        if start + size <= len(self._buf):
            return memoryview(self._buf)[start:start + size]
        parts = [self._buf[start:]]
        need = size - len(parts[0])
        while need > 0:
            self._pos += len(self._buf)
            self._buf = self._src.read(max(CHUNK, need))
            if not self._buf:
                break
            parts.append(self._buf[:need])
            need -= len(parts[-1])
        return b"".join(parts)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def _hash_range(fd: int, start: int, length: int, h: hashlib._Hash) -> None:
    """Hash ``length`` bytes of the file from ``start``: through a read-only mapping of just
    that range where possible (no copy out of the page cache; unmapped again at once, so peak
    memory stays at one part), else by ``pread``."""
    if length and start % mmap.ALLOCATIONGRANULARITY == 0:
        try:
            with mmap.mmap(fd, length, access=mmap.ACCESS_READ, offset=start) as mm:
                with memoryview(mm) as view:
                    h.update(view)
            return
        except (OSError, ValueError):
            pass  # e.g. a filesystem without mmap: read it instead
    end = start + length
    while start < end:
        chunk = os.pread(fd, min(CHUNK, end - start), start)
        if not chunk:
            raise OSError(f"temp file ends at {start} bytes, expected {end}")
        h.update(chunk)
        start += len(chunk)


# --- outcomes --------------------------------------------------------------------------------

def _bytes(out: Sequence[Outcome], groups: Iterable[FetchGroup]) -> int:
    """Bytes of the groups whose first target was installed by this call."""
    ok = {t.id for t, o in out if not isinstance(o, FileFailure)}
    return sum(g.size for g in groups if g.targets[0].id in ok)


def _fail_all(g: FetchGroup, exc: BaseException) -> list[Outcome]:
    return [(t, _failure(t, exc, g.sha256)) for t in g.targets]


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
        return FileFailure(t.root, t.path, "io", f"{where}: cannot write: {exc.strerror or exc}")
    return FileFailure(t.root, t.path, "io", f"{where}: {type(exc).__name__}: {exc}")
