"""The local state file of each cache root: what neffcache last verified, so reruns skip hashing.

``<root>/.neffcache-state.json`` maps each path to (size, mtime_ns, ctime_ns, inode, sha256,
mode) as neffcache last verified it; a file whose size, times and inode still match needs no
hashing. Only a ``Durable`` set can be saved, and one is made only by ``sync_records`` (each
file ``fdatasync``ed by this process) or from what a state file
already vouched for (``Durable.from_state``): the state file never vouches for bytes that may
not be on disk. Reading a damaged state file yields an empty state (files get re-hashed);
writing one is best effort (atomic, a failure only costs re-hashing).
"""

from __future__ import annotations

import errno
import functools
import json
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from neffcache.restore.fs import Roots, datasync_at, replace_best_effort
from neffcache.restore.plan import FileId
from neffcache.thread_pool import map_in_threads

STATE_FILE = ".neffcache-state.json"
STATE_SCHEMA = 1


@dataclass(frozen=True, slots=True)
class StateRecord:
    """A file as it was when neffcache last verified it; a match means "no need to re-hash"."""

    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    sha256: str
    mode: int

    def matches(self, size: int, mtime_ns: int, ctime_ns: int, inode: int) -> bool:
        return (self.size, self.mtime_ns, self.ctime_ns, self.inode) == \
            (size, mtime_ns, ctime_ns, inode)


def encode_state(records: Mapping[str, StateRecord]) -> bytes:
    return b"".join(encode_state_chunks(sorted(records), records.__getitem__))


def encode_state_chunks(paths: list[str], record: Callable[[str], StateRecord],
                        batch: int = 4096) -> Iterator[bytes]:
    """The bytes of ``encode_state`` for ``paths`` (sorted) in pieces of ``batch`` records,
    so a state file of a million files is never one string."""
    yield b'{"schema_version":%d,"files":{' % STATE_SCHEMA
    for i in range(0, len(paths), batch):
        files = {}
        for p in paths[i:i + batch]:
            r = record(p)
            files[p] = [r.size, r.mtime_ns, r.ctime_ns, r.inode, r.sha256, r.mode]
        yield (b"," if i else b"") + json.dumps(files, separators=(",", ":"))[1:-1].encode()
    yield b"}}"


def decode_state(data: bytes) -> dict[str, StateRecord]:
    """Parse a state file; anything unexpected yields an empty state (files get re-hashed)."""
    try:
        doc: Any = json.loads(data)
        if doc.get("schema_version") != STATE_SCHEMA:
            return {}
        out = {}
        for path, (size, mtime, ctime, inode, sha, mode) in doc["files"].items():
            out[str(path)] = StateRecord(int(size), int(mtime), int(ctime), int(inode),
                                         str(sha), int(mode))
        return out
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}


_MODES = {m: m for m in range(0o10000)}  # one int object per mode, not one per file


def state_record(st: os.stat_result, sha256: str) -> StateRecord:
    return StateRecord(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, sha256,
                       _MODES[stat.S_IMODE(st.st_mode)])


def load_state(target_dirs: Mapping[str, str]) -> dict[FileId, StateRecord]:
    out: dict[FileId, StateRecord] = {}
    for root, d in target_dirs.items():
        try:
            data = Path(d, STATE_FILE).read_bytes()
        except OSError:
            continue
        out.update(((root, p), r) for p, r in decode_state(data).items())
    return out


def save_state(target_dirs: Mapping[str, str], durable: Durable) -> None:
    """Write each root's state file atomically (best effort: a failure only costs re-hashing),
    vouching for exactly the ``durable`` records."""
    records = durable.records
    for root, d in target_dirs.items():
        mine = sorted(p for rt, p in records if rt == root)
        if not mine:
            continue
        replace_best_effort(Path(d, STATE_FILE),
                            encode_state_chunks(mine, functools.partial(_record_at, records, root)))


def _record_at(records: Mapping[FileId, StateRecord], root: str, path: str) -> StateRecord:
    return records[(root, path)]


_PROOF = object()  # only this module makes Durable sets


@dataclass(frozen=True, slots=True)
class Durable:
    """State records whose files are known to be on disk: the only thing ``save_state`` takes.
    Made by ``sync_records`` (fdatasynced here) and ``from_state`` (vouched for before)."""

    records: Mapping[FileId, StateRecord]
    proof: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.proof is not _PROOF:
            raise TypeError("Durable is made only by sync_records or Durable.from_state")

    @staticmethod
    def from_state(state: Mapping[FileId, StateRecord], keep: Iterable[FileId]) -> Durable:
        """The records of ``keep`` exactly as a loaded state file vouched for them."""
        return Durable(MappingProxyType({k: state[k] for k in keep if k in state}), _PROOF)

    def __or__(self, other: Durable) -> Durable:
        if not self.records or not other.records:  # no copy of a million records for nothing
            return other if not self.records else self
        return Durable(MappingProxyType({**self.records, **other.records}), _PROOF)


@dataclass(frozen=True, slots=True)
class SyncOutcome:
    durable: Durable
    failed: tuple[tuple[FileId, str], ...]  # a file whose fdatasync failed, and why
    skipped: int  # not made durable: changed or gone meanwhile, or past the deadline (unvouched)


def sync_records(roots: Roots, fresh: Mapping[FileId, StateRecord], *, workers: int = 8,
                 deadline: float | None = None) -> SyncOutcome:
    """Make the files of ``fresh`` durable: each opened from its root (never through a symlink
    at its name), checked to be the very inode and times of its record, and ``fdatasync``ed
    (writeback was started as it landed). The result vouches only for files that passed all
    of that; one that changed meanwhile or came after the deadline is left out (a later run
    hashes it again). Directories are not fsynced: a rename lost in a crash leaves the old
    file or none at the name, never this inode, so its record no longer matches and it is
    hashed again."""
    items = sorted(fresh)  # keys only: no (key, record) pair per file

    def one(fid: FileId) -> bool | str:
        root, path = fid
        rec = fresh[fid]
        if deadline is not None and time.monotonic() >= deadline:
            return False
        try:
            return datasync_at(roots.fds[root], path, _same_file(rec))
        except (FileNotFoundError, NotADirectoryError):
            return False  # gone or replaced meanwhile: not that file, so not vouched for
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # a symlink at the name now: not that file either
                return False
            return exc.strerror or str(exc)

    results = map_in_threads(one, items, workers, deadline=deadline, late=lambda _item: False)
    durable = {fid: fresh[fid] for fid, ok in zip(items, results, strict=True) if ok is True}
    failed = tuple((fid, why) for fid, why in zip(items, results, strict=True)
                   if isinstance(why, str))
    return SyncOutcome(Durable(MappingProxyType(durable), _PROOF), failed,
                       len(items) - len(durable) - len(failed))


def _same_file(rec: StateRecord) -> Callable[[os.stat_result], bool]:
    return lambda st: rec.matches(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
