"""Run one fetch unit (a pack run, a blob GET, a part of a large blob): fetch, verify, install."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO, TypeVar

from neffcache.errors import IntegrityError, NotFoundError, UnavailableError
from neffcache.hashing import CHUNK
from neffcache.restore.fs import DirCache, Roots, tmp_name
from neffcache.restore.install import (
    NEW,
    Batch,
    FileFailure,
    Outcome,
    Stopped,
    copies,
    copy_verified,
    fail_all,
    place,
    read_piece,
    read_umask,
)
from neffcache.restore.plan import BlobGet, BlobPart, FetchGroup, PackRun, Slice, Unit, unit_groups
from neffcache.restore.state import StateRecord, state_record
from neffcache.store import Store, blob_key, pack_key

ATTEMPTS = 5  # fetches of one piece before its file fails (as S3Store max_attempts)
BODY_FAULTS = (IntegrityError, UnavailableError)  # a body broke off, or came short or corrupt
ABANDONED_BATCH = 4096  # deadline failures of units never started, handed on in lists
_T = TypeVar("_T")

# Parts are written one chunk a store body hands on (256 KiB and up) at a time: a quarter of the
# syscalls and GIL hand-offs of WRITE_BYTES with no more system time (measured).
PART_WRITE_BYTES = 256 << 10


class Fetcher:
    """Runs units for ``apply_restore`` (``run`` never raises)."""

    def __init__(self, store: Store, roots: Roots, deadline: float | None,
                 batch_files: int) -> None:
        self.store, self.roots, self.deadline = store, roots, deadline
        self.batch_files = batch_files
        read_umask()
        self._lock = threading.Lock()
        self._assemblies: dict[str, _Assembly] = {}
        self._local = threading.local()

    def _buffer(self) -> memoryview:
        """This thread's receive buffer (fresh memory per read costs a page fault per 4 KiB)."""
        buf = getattr(self._local, "buf", None)
        if buf is None:
            buf = self._local.buf = memoryview(bytearray(CHUNK))
        return buf

    def run(self, unit: Unit) -> tuple[list[Outcome], int]:
        """(outcome per target finished by this call, bytes fetched for them)."""
        with contextlib.closing(DirCache(self.roots)) as dirs:
            if isinstance(unit, PackRun):
                out = self._pack(unit, dirs)
            elif isinstance(unit, BlobGet):
                out = self._blob(unit.group, dirs)
            else:
                out = self._part(unit, dirs)
        if self.deadline is not None and time.monotonic() >= self.deadline:
            out = [(t, _stopped(o)) for t, o in out]
        ok = {t.id for t, o in out if not isinstance(o, FileFailure)}
        return out, sum(g.size for g in unit_groups(unit) if g.targets[0].id in ok)

    def abandon(self, units: Sequence[Unit], running: Sequence[Unit] = ()
                ) -> Iterator[list[Outcome]]:
        """Deadline failures for units not started or hung, in batches; unfinished large files are
        removed, except those a running unit still writes to."""
        busy = {g.sha256 for unit in running for g in unit_groups(unit)}
        groups = {g.sha256: g for unit in (*units, *running) for g in unit_groups(unit)}
        out: list[Outcome] = []
        for sha, g in groups.items():
            asm = None if sha in busy else self._assemblies.pop(sha, None)
            if asm is not None:
                asm.discard()
            out.extend(fail_all(g, Stopped()))
            if len(out) >= ABANDONED_BATCH:
                yield out
                out = []
        if out:
            yield out

    def _check(self) -> None:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise Stopped

    def _pack(self, run: PackRun, dirs: DirCache) -> list[Outcome]:
        """The run's members from one ranged read, again from the first not delivered when the
        stream breaks (at most ``ATTEMPTS`` reads); a corrupt member is read alone."""
        key, slices = pack_key(run.pack), run.slices
        out: list[Outcome] = []
        i = reads = 0  # the first member not yet handled; ranged reads opened so far
        with Batch(dirs) as batch:
            while i < len(slices):
                start = run.start if i == 0 else slices[i].offset
                try:
                    self._check()
                    body = self.store.open(key, start, run.start + run.length - start)
                except NotFoundError:  # packs are an extra: the members are blobs too
                    out.extend(o for s in slices[i:] for o in self._blob(s.group, dirs))
                    break
                except Exception as exc:  # noqa: BLE001 - every failure becomes a FileFailure
                    out.extend(o for s in slices[i:] for o in fail_all(s.group, exc))
                    break
                reads += 1
                with body:
                    i, broken = self._members(run, i, Window(body, start), batch, out)
                if broken is not None and (reads >= ATTEMPTS or isinstance(broken, Stopped)):
                    out.extend(o for s in slices[i:] for o in fail_all(s.group, broken))
                    break
            out.extend(batch.commit())
        return out

    def _members(self, run: PackRun, i: int, window: Window, batch: Batch,
                 out: list[Outcome]) -> tuple[int, BaseException | None]:
        """Members from ``i`` on into the batch; (the first not handled, why the stream stopped)."""
        while i < len(run.slices):
            s = run.slices[i]
            g = s.group
            try:
                self._check()
                data = window.take(s.offset, g.size)
            except Exception as exc:  # noqa: BLE001 - the stream broke (or the deadline)
                return i, exc
            if len(data) < g.size:  # the stream ended early: read again from this member
                return i, IntegrityError(f"pack {run.pack[:12]} ends before offset "
                                         f"{s.offset + len(data)} (truncated)")
            try:
                try:
                    verify_member(data, g, run.pack)
                except IntegrityError as exc:
                    data = self._member(run.pack, s, exc)
            except Exception as exc:  # noqa: BLE001
                out.extend(fail_all(g, exc))
            else:
                out.extend(batch.add(g, data))
                if len(batch) >= self.batch_files:
                    out.extend(batch.commit())
                    batch.dirs.trim()
            i += 1
        return i, None

    def _member(self, pack: str, s: Slice, failed: IntegrityError) -> bytes:
        """A member that arrived corrupt: from its own blob, else its own range of the pack; raises
        ``failed`` if nothing verifies."""
        for key, start, length in ((blob_key(s.group.sha256), 0, None),
                                   (pack_key(pack), s.offset, s.group.size)):
            for _ in range(ATTEMPTS - 1):
                self._check()
                try:
                    data = self.store.read(key, start, length)
                    verify_member(data, s.group, pack)
                    return data
                except NotFoundError:
                    break
                except BODY_FAULTS:
                    continue
        raise failed

    def _blob(self, g: FetchGroup, dirs: DirCache) -> list[Outcome]:
        """One GET streamed into a temp file, again when it breaks or does not verify."""
        first = g.targets[0]
        try:
            rec = self._read(blob_key(g.sha256), 0, None, lambda src: place(
                dirs, first, lambda fd: copy_verified(src, fd, first, self.deadline)))
        except Exception as exc:  # noqa: BLE001 - the store retried the request already
            return fail_all(g, exc)
        return [(first, rec), *copies(dirs, g)]

    def _read(self, key: str, start: int, length: int | None,
              take: Callable[[BinaryIO], _T]) -> _T:
        """``take(body)`` of a read of ``key``, read again when the body breaks or does not verify
        (``ATTEMPTS`` reads at most); a failed open is not retried (the store retried it)."""
        for attempt in range(1, ATTEMPTS + 1):
            self._check()
            body = self.store.open(key, start, length)
            try:
                with body:
                    self._check()  # a call that returns after the deadline writes nothing
                    return take(body)
            except BODY_FAULTS:
                if attempt == ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    def _part(self, part: BlobPart, dirs: DirCache) -> list[Outcome]:
        g = part.group
        with self._lock:
            asm = self._assemblies.setdefault(g.sha256, _Assembly(g, part.count))
        error: BaseException | None = None
        try:
            self._check()
            asm.open(dirs)
            if asm.error is None:
                self._fetch_part(part, asm)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a FileFailure
            error = exc
        if not asm.part_done(error):
            return []
        with self._lock:
            self._assemblies.pop(g.sha256, None)
        return asm.finish(dirs)

    def _fetch_part(self, part: BlobPart, asm: _Assembly) -> None:
        self._read(blob_key(part.group.sha256), part.start, part.length,
                   functools.partial(self._receive_part, part, asm))

    def _receive_part(self, part: BlobPart, asm: _Assembly, body: BinaryIO) -> None:
        g, done = part.group, 0
        buf = self._buffer()
        own = hashlib.sha256()
        while done < part.length:
            self._check()
            data = read_piece(body, buf[:min(CHUNK, part.length - done)])
            if not data:
                break
            # Writes to one file serialize on its inode lock anyway; waiting here (asleep)
            # instead of in the kernel (spinning) saves the CPU the other parts need.
            with asm.write_lock:
                view, at = memoryview(data), part.start + done
                while view:
                    n = os.pwrite(asm.fd, view[:PART_WRITE_BYTES], at)
                    view, at = view[n:], at + n
            own.update(data)
            done += len(data)
        t = g.targets[0]
        if done < part.length:
            raise IntegrityError(f"{t.root}/{t.path}: blob {g.sha256[:12]} ends at "
                                 f"{part.start + done} bytes, expected {g.size} (truncated); "
                                 f"not installed")
        if own.hexdigest() != part.digest:
            raise IntegrityError(f"{t.root}/{t.path}: part {part.index + 1} of {part.count} "
                                 f"(bytes {part.start}-{part.start + part.length - 1}) has "
                                 f"sha256 {own.hexdigest()[:12]}, expected {part.digest[:12]} "
                                 f"(corrupt); not installed")


class _Assembly:
    """A large file written by ``count`` parts into one temp file, each verified by its worker."""

    def __init__(self, g: FetchGroup, count: int) -> None:
        self.group, self.count = g, count
        self.dfd = self.fd = -1
        self.tmp = ""
        self.error: BaseException | None = None
        self.write_lock = threading.Lock()
        self._lock = threading.RLock()  # open's cleanup is discard's
        self._finished = 0

    def open(self, dirs: DirCache) -> None:
        """Create the temp file beside the first target (once; an error sticks)."""
        with self._lock:
            if self.fd >= 0 or self.error is not None:
                return
            t = self.group.targets[0]
            try:
                self.dfd = os.dup(dirs.get(t.root, t.path.rpartition("/")[0], create=True))
                self.tmp = tmp_name()
                self.fd = os.open(self.tmp, NEW, 0o600, dir_fd=self.dfd)
            except Exception as exc:
                self.error = exc
                self.discard()
                raise

    def part_done(self, error: BaseException | None) -> bool:
        """Record a finished part; True once, when every part has: the caller must ``finish``."""
        with self._lock:
            self._finished += 1
            self.error = self.error or error
            return self._finished == self.count

    def finish(self, dirs: DirCache) -> list[Outcome]:
        g, t = self.group, self.group.targets[0]
        try:
            if self.error is not None:
                raise self.error
            os.fchmod(self.fd, t.mode)
            os.replace(self.tmp, t.path.rpartition("/")[2], src_dir_fd=self.dfd,
                       dst_dir_fd=self.dfd)
            self.tmp = ""
            rec = state_record(os.fstat(self.fd), t.sha256)
        except Exception as exc:  # noqa: BLE001
            return fail_all(g, exc)
        finally:
            self.discard()
        return [(t, rec), *copies(dirs, g)]

    def discard(self) -> None:
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


def _stopped(o: StateRecord | FileFailure) -> StateRecord | FileFailure:
    """A store failure that ends after the deadline was cut short by it: a deadline stop."""
    if isinstance(o, FileFailure) and o.kind == "unavailable":
        return FileFailure(o.root, o.path, "deadline",
                           f"{o.root}/{o.path}: stopped at the deadline ({o.message})")
    return o


def verify_member(data: bytes | memoryview, g: FetchGroup, pack: str) -> None:
    t = g.targets[0]
    if len(data) != g.size:
        raise IntegrityError(f"{t.root}/{t.path}: pack {pack[:12]} holds {len(data)} of its "
                             f"{g.size} bytes (truncated); not installed")
    digest = hashlib.sha256(data).hexdigest()
    if digest != g.sha256:
        raise IntegrityError(f"{t.root}/{t.path}: pack {pack[:12]} member sha256 is "
                             f"{digest[:12]}, expected {g.sha256[:12]} (corrupt); not installed")


class Window:
    """Byte ranges of a stream, asked for in increasing order, served from large reads."""

    def __init__(self, src: BinaryIO, pos: int) -> None:
        self._src = src
        self._pos = pos  # stream offset of _buf[0]
        self._buf: bytes = b""

    def take(self, offset: int, size: int) -> bytes | memoryview:
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
