"""Run one fetch unit: bring its bytes from the store, verify them, install them.

- ``PackRun``: one ranged read of a pack, read in large windows; each member (small by
  construction) is checked against its sha256 and written in a batch; a corrupt member fails
  alone, a short read fails the rest. A pack missing from the store falls back to the members'
  own blobs.
- ``BlobGet``: one GET, streamed into the temp file and hashed on the way.
- ``BlobPart``: ranged GETs of one large blob run in parallel and ``pwrite`` into one shared
  temp file; each worker hashes its part as it arrives and checks it against the part's digest
  from the manifest: hashing runs on every fetching thread and ends with the last byte. The
  worker that finishes the last part (or sees the last part fail) finishes the file.
A file wanted at several paths is fetched once and copied locally (and verified again). How a
file is written, verified and renamed is in ``neffcache.restore.install``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Iterable, Sequence

from neffcache.errors import IntegrityError, NotFoundError
from neffcache.hashing import CHUNK
from neffcache.restore.fs import DirCache, Roots, start_writeback, tmp_name
from neffcache.restore.install import (
    BATCH_FILES,
    NEW,
    Batch,
    FileFailure,
    Outcome,
    Stopped,
    Window,
    copies,
    copy_verified,
    fail_all,
    place,
    pwrite_all,
    read_into,
    read_umask,
    verify_member,
)
from neffcache.restore.plan import BlobGet, BlobPart, FetchGroup, PackRun, Unit, unit_groups
from neffcache.restore.state import state_record
from neffcache.store import Store, blob_key
from neffcache.store.base import pack_key


class Fetcher:
    """Runs units for ``apply_restore``; ``run`` never raises. Holds the large files being
    assembled from parts across units."""

    def __init__(self, store: Store, roots: Roots, deadline: float | None,
                 batch_files: int = BATCH_FILES) -> None:
        self.store, self.roots, self.deadline = store, roots, deadline
        self.batch_files = batch_files
        read_umask()
        self._lock = threading.Lock()
        self._assemblies: dict[str, _Assembly] = {}
        self._local = threading.local()

    def _buffer(self) -> memoryview:
        """This thread's receive buffer: parts are read into it, not into a new 1 MiB object
        per read (fresh memory costs a page fault per 4 KiB)."""
        buf = getattr(self._local, "buf", None)
        if buf is None:
            buf = self._local.buf = memoryview(bytearray(CHUNK))
        return buf

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
                out.extend(fail_all(g, Stopped()))
        return out

    # -- units --------------------------------------------------------------------------------

    def _check(self) -> None:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise Stopped

    def _pack(self, run: PackRun, dirs: DirCache) -> list[Outcome]:
        try:
            self._check()
            body = self.store.open(pack_key(run.pack), run.start, run.length)
        except NotFoundError:  # packs are an extra: the members are blobs too
            return [o for s in run.slices for o in self._blob(s.group, dirs)]
        except Exception as exc:  # noqa: BLE001 - every failure becomes a FileFailure
            return [o for s in run.slices for o in fail_all(s.group, exc)]
        out: list[Outcome] = []
        with body, Batch(dirs) as batch:
            window = Window(body, run.start)
            for i, s in enumerate(run.slices):
                g = s.group
                data: bytes | memoryview = b""
                try:
                    self._check()
                    data = window.take(s.offset, g.size)
                    verify_member(data, g, run.pack)
                except IntegrityError as exc:
                    out.extend(fail_all(g, exc))
                    if len(data) < g.size:  # the stream ended: the rest is missing too
                        for rest in run.slices[i + 1:]:
                            out.extend(fail_all(rest.group, IntegrityError(
                                f"pack {run.pack[:12]} ends before offset {rest.offset} "
                                f"(truncated)")))
                        break
                    continue
                except Exception as exc:  # noqa: BLE001
                    for rest in run.slices[i:]:
                        out.extend(fail_all(rest.group, exc))
                    break
                out.extend(batch.add(g, data))
                if len(batch) >= self.batch_files:
                    out.extend(batch.commit())
                    dirs.trim()
            out.extend(batch.commit())
        return out

    def _blob(self, g: FetchGroup, dirs: DirCache) -> list[Outcome]:
        first = g.targets[0]
        try:
            self._check()
            with self.store.open(blob_key(g.sha256)) as src:
                rec = place(dirs, first, lambda fd: copy_verified(src, fd, first,
                                                                    self.deadline))
        except Exception as exc:  # noqa: BLE001
            return fail_all(g, exc)
        return [(first, rec), *copies(dirs, g)]

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
        if not asm.part_done(error):
            return []
        with self._lock:
            self._assemblies.pop(g.sha256, None)
        return asm.finish(dirs)

    def _fetch_part(self, part: BlobPart, asm: _Assembly) -> None:
        """Write the part's bytes at their offsets and hash them as they arrive (from the
        receive buffer, not re-read from the file) into the part's own digest."""
        g, done = part.group, 0
        buf = self._buffer()
        own = hashlib.sha256()
        with self.store.open(blob_key(g.sha256), part.start, part.length) as body:
            while done < part.length:
                self._check()
                n = read_into(body, buf[:min(CHUNK, part.length - done)])
                if not n:
                    break
                # Writes to one file serialize on its inode lock anyway; waiting here (asleep)
                # instead of in the kernel (spinning) saves the CPU the other parts need.
                with asm.write_lock:
                    pwrite_all(asm.fd, buf[:n], part.start + done)
                own.update(buf[:n])
                done += n
        start_writeback(asm.fd, part.start, done)  # overlap the disk writes with the rest
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
    """A large file written by ``count`` parts into one temp file; each part's worker verifies
    its part against the part's own digest, so once every part has finished without error the
    file holds the bytes its manifest names."""

    def __init__(self, g: FetchGroup, count: int) -> None:
        self.group, self.count = g, count
        self.dfd = self.fd = -1
        self.tmp = ""
        self.error: BaseException | None = None
        self.write_lock = threading.Lock()
        self._lock = threading.Lock()
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
                if self.dfd >= 0:
                    os.close(self.dfd)
                    self.dfd = -1
                raise

    def part_done(self, error: BaseException | None) -> bool:
        """Record a finished part (and its error, if any). True once, when every part has
        finished: the caller must then ``finish`` the file."""
        with self._lock:
            self._finished += 1
            if error is not None:
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
            self.discard()
            return fail_all(g, exc)
        self.discard()
        return [(t, rec), *copies(dirs, g)]

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


# --- outcomes ---------------------------------------------------------------------------------

def _bytes(out: Sequence[Outcome], groups: Iterable[FetchGroup]) -> int:
    """Bytes of the groups whose first target was installed by this call."""
    ok = {t.id for t, o in out if not isinstance(o, FileFailure)}
    return sum(g.size for g in groups if g.targets[0].id in ok)
