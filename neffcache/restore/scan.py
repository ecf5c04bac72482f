"""Scan what is in place at each wanted path; hash only what the state file does not vouch for."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import time
from collections.abc import Collection, Iterable, Mapping

from neffcache.hashing import CHUNK
from neffcache.restore.fs import DirCache, Roots
from neffcache.restore.plan import FileId, PresentFile
from neffcache.restore.seen import Present
from neffcache.restore.state import StateRecord, state_record
from neffcache.thread_pool import map_in_threads

Wanted = Mapping[FileId, Collection[int]] | Iterable[tuple[FileId, Collection[int]]]


def scan_present(roots: Roots, wanted: Wanted,
                 state: Mapping[FileId, StateRecord], *, workers: int = 8,
                 deadline: float | None = None, hash_unknown: bool = True,
                 hashed: Mapping[FileId, StateRecord] | None = None
                 ) -> tuple[Present, dict[FileId, StateRecord]]:
    """Size, mode and (when the size is wanted) sha256 at every wanted path: from ``state`` (a match
    is ``seen``) or ``hashed`` when size, times and inode match, else hashed (unless not
    ``hash_unknown``). Returns the records of files hashed now or matching ``hashed``."""
    present = Present(state)
    odd = present.odd
    records: dict[FileId, StateRecord] = {}
    to_hash: list[tuple[FileId, os.stat_result]] = []
    fds = roots.fds
    for fid, sizes in wanted.items() if isinstance(wanted, Mapping) else wanted:
        root, path = fid
        if root not in fds:
            continue  # a root not there yet (a look that creates nothing): nothing in place
        try:
            st = os.stat(path, dir_fd=fds[root], follow_symlinks=False)
        except OSError:
            continue  # absent, or a file in the way: fetched (or refused) later
        if not stat.S_ISREG(st.st_mode):
            continue
        mode = stat.S_IMODE(st.st_mode)
        if st.st_size not in sizes:
            odd[fid] = PresentFile(st.st_size, None, mode)
            continue
        rec = hashed.get(fid) if hashed else None
        if rec is not None and rec.matches(st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                                           st.st_ino):
            odd[fid] = PresentFile(st.st_size, rec.sha256, mode)
            records[fid] = rec
            continue
        rec = state.get(fid)
        if rec is not None and rec.matches(st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                                           st.st_ino):
            if rec.mode == mode:
                present.see(fid)  # as vouched for: the record says it all
            else:
                odd[fid] = PresentFile(st.st_size, rec.sha256, mode)
                records[fid] = rec
        elif hash_unknown:
            to_hash.append((fid, st))
    if to_hash:
        _hash_present(roots, to_hash, present, records, workers, deadline)
    return present, records


def _hash_present(roots: Roots, items: list[tuple[FileId, os.stat_result]],
                  present: Present, records: dict[FileId, StateRecord],
                  workers: int, deadline: float | None) -> None:
    def one(item: tuple[FileId, os.stat_result]) -> str | None:
        (root, path), _st = item
        if deadline is not None and time.monotonic() >= deadline:
            return None
        parent, _, name = path.rpartition("/")
        # from the file's directory, never through a symlink
        with contextlib.suppress(OSError), contextlib.closing(DirCache(roots)) as dirs:
            return _hash_at(dirs.get(root, parent, create=False), name, deadline)
        return None

    for sha, (fid, st) in zip(map_in_threads(one, items, workers), items, strict=True):
        if sha is not None:
            present.odd[fid] = PresentFile(st.st_size, sha, stat.S_IMODE(st.st_mode))
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
