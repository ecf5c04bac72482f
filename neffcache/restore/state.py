"""The local state file of each cache root: what neffcache last verified, so reruns skip hashing.

``<root>/.neffcache-state.json`` maps each path to (size, mtime_ns, ctime_ns, inode, sha256,
mode) as neffcache last verified it; a file whose size, times and inode still match needs no
hashing. Its ``files`` are a ``Durable`` set, made only by ``sync_records`` (each file
``fdatasync``ed by this process), ``Durable.reread`` (hashed again in a later boot, so read
from the disk) or from what a state file already vouched for (``Durable.from_state``): the
state file never vouches for bytes that may not be on disk. A file a restore installed but did
not sync is only ``pending``, under the boot it was verified in (``boot_id``): the next restore
in that boot ``fdatasync``s it before trusting it (``settle_pending``), one in a later boot
hashes it. Reading a damaged state file yields an empty state (files get re-hashed); writing
one is best effort (atomic, a failure only costs re-hashing).
"""

from __future__ import annotations

import errno
import functools
import json
import os
import stat
import time
from collections import ChainMap
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from neffcache.restore import fs
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


Pending = Mapping[FileId, tuple[str, StateRecord]]  # installed, not known durable: (boot, record)


def _row(r: StateRecord) -> list[Any]:
    return [r.size, r.mtime_ns, r.ctime_ns, r.inode, r.sha256, r.mode]


def _records(rows: Any) -> dict[str, StateRecord]:
    return {str(path): StateRecord(int(size), int(mtime), int(ctime), int(inode), str(sha),
                                   int(mode))
            for path, (size, mtime, ctime, inode, sha, mode) in rows.items()}


def encode_state(records: Mapping[str, StateRecord],
                 pending: Mapping[str, tuple[str, StateRecord]] | None = None) -> bytes:
    """The state file: ``files`` (durable) and, if any, ``pending`` ({boot: {path: row}}; a
    reader that predates it ignores it, and hashes those files)."""
    return b"".join(encode_state_chunks(sorted(records), records.__getitem__, pending))


def encode_state_chunks(paths: list[str], record: Callable[[str], StateRecord],
                        pending: Mapping[str, tuple[str, StateRecord]] | None = None,
                        batch: int = 4096) -> Iterator[bytes]:
    """The bytes of ``encode_state`` for ``paths`` (sorted) in pieces of ``batch`` records,
    so a state file of a million files is never one string; then the ``pending`` ones not
    among ``paths``, by boot."""
    yield b'{"schema_version":%d,"files":{' % STATE_SCHEMA
    for i in range(0, len(paths), batch):
        files = {p: _row(record(p)) for p in paths[i:i + batch]}
        yield (b"," if i else b"") + json.dumps(files, separators=(",", ":"))[1:-1].encode()
    yield b"}"
    if pending:
        yield from _pending_chunks(paths, pending, batch)
    yield b"}"


def _pending_chunks(paths: list[str], pending: Mapping[str, tuple[str, StateRecord]],
                    batch: int) -> Iterator[bytes]:
    """``,"pending":{boot: {path: row}}`` for the ``pending`` paths not among ``paths``: boots
    in the order of their first path, paths sorted, in pieces of ``batch`` rows (a first
    restore of a million files leaves them all pending)."""
    durable = set(paths)
    boots: dict[str, list[str]] = {}
    for p in sorted(p for p in pending if p not in durable):
        boots.setdefault(pending[p][0], []).append(p)
    del durable
    for n, (boot, mine) in enumerate(boots.items()):
        yield (b',"pending":{' if n == 0 else b",") + json.dumps(boot).encode() + b":{"
        for i in range(0, len(mine), batch):
            rows = {p: _row(pending[p][1]) for p in mine[i:i + batch]}
            yield (b"," if i else b"") + json.dumps(rows, separators=(",", ":"))[1:-1].encode()
        yield b"}"
    if boots:
        yield b"}"


def decode_state(data: bytes) -> dict[str, StateRecord]:
    """Parse a state file's durable records; anything unexpected yields an empty state (files
    get re-hashed)."""
    try:
        doc: Any = json.loads(data)
        if doc.get("schema_version") != STATE_SCHEMA:
            return {}
        return _records(doc["files"])
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}


def decode_pending(data: bytes) -> dict[str, tuple[str, StateRecord]]:
    """A state file's pending records with their boot; anything unexpected yields none."""
    try:
        doc: Any = json.loads(data)
        if doc.get("schema_version") != STATE_SCHEMA:
            return {}
        return {p: (str(boot), r) for boot, rows in doc.get("pending", {}).items()
                for p, r in _records(rows).items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}


_MODES = {m: m for m in range(0o10000)}  # one int object per mode, not one per file


def state_record(st: os.stat_result, sha256: str) -> StateRecord:
    return StateRecord(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, sha256,
                       _MODES[stat.S_IMODE(st.st_mode)])


def load_state(target_dirs: Mapping[str, str]) -> dict[FileId, StateRecord]:
    """The durable records of each root's state file (what may be trusted without hashing)."""
    out: dict[FileId, StateRecord] = {}
    for root, d in target_dirs.items():
        try:
            data = Path(d, STATE_FILE).read_bytes()
        except OSError:
            continue
        out.update(((root, p), r) for p, r in decode_state(data).items())
    return out


def load_pending(target_dirs: Mapping[str, str]) -> dict[FileId, tuple[str, StateRecord]]:
    """The pending records of each root's state file: installed, not yet known durable."""
    out: dict[FileId, tuple[str, StateRecord]] = {}
    for root, d in target_dirs.items():
        try:
            data = Path(d, STATE_FILE).read_bytes()
        except OSError:
            continue
        out.update(((root, p), v) for p, v in decode_pending(data).items())
    return out


def save_state(target_dirs: Mapping[str, str], durable: Durable,
               pending: Pending | None = None) -> None:
    """Write each root's state file atomically (best effort: a failure only costs re-hashing),
    vouching for exactly the ``durable`` records; ``pending`` ones are kept apart, under their
    boot, and trusted by no one before they are synced or re-read (``settle_pending``)."""
    records = durable.records
    for root, d in target_dirs.items():
        mine = sorted(p for rt, p in records if rt == root)
        waiting = _AtRoot(pending or {}, root)
        if not mine and next(iter(waiting), None) is None:
            continue
        replace_best_effort(Path(d, STATE_FILE), encode_state_chunks(
            mine, functools.partial(_record_at, records, root), waiting))


def _record_at(records: Mapping[FileId, StateRecord], root: str, path: str) -> StateRecord:
    return records[(root, path)]


def pending_now(records: Mapping[FileId, StateRecord], skip: Container[FileId] = (),
                also: Pending | None = None) -> Pending:
    """``records`` (but those in ``skip``) as pending in this boot (verified, not synced),
    and the pending records ``also`` (none of them among ``records``): a view, each
    ``(boot, record)`` made when looked at, not a million of them held at once."""
    return _Fresh(records, skip, fs.boot_id() or "", also or {})


class _Fresh(Mapping[FileId, tuple[str, StateRecord]]):
    __slots__ = ("_also", "_boot", "_len", "_records", "_skip")

    def __init__(self, records: Mapping[FileId, StateRecord], skip: Container[FileId],
                 boot: str, also: Pending) -> None:
        self._records, self._skip, self._boot, self._also = records, skip, boot, also
        self._len = -1

    def __getitem__(self, key: FileId) -> tuple[str, StateRecord]:
        if key in self._records and key not in self._skip:
            return self._boot, self._records[key]
        return self._also[key]

    def __iter__(self) -> Iterator[FileId]:
        skip = self._skip
        yield from (k for k in self._records if k not in skip)
        yield from self._also

    def __len__(self) -> int:
        if self._len < 0:
            self._len = sum(1 for _ in self)
        return self._len


class _AtRoot(Mapping[str, tuple[str, StateRecord]]):
    """The pending records of one root, by path: a view of ``pending``, not a copy."""

    __slots__ = ("_pending", "_root")

    def __init__(self, pending: Pending, root: str) -> None:
        self._pending, self._root = pending, root

    def __getitem__(self, path: str) -> tuple[str, StateRecord]:
        return self._pending[(self._root, path)]

    def __iter__(self) -> Iterator[str]:
        root = self._root
        return (p for rt, p in self._pending if rt == root)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def overlay(state: Mapping[FileId, StateRecord], over: Mapping[FileId, StateRecord]
            ) -> Mapping[FileId, StateRecord]:
    """``state`` with the records of ``over`` over it, as one mapping for lookups: no copy of
    a million records (``{**state, **over}``), none at all when one of them is empty."""
    if not over or not state:
        return over or state
    return ChainMap(over, state)  # type: ignore[arg-type]  # read only: never written to


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

    @staticmethod
    def reread(pending: Pending, records: Mapping[FileId, StateRecord]) -> Durable:
        """The ``records`` just hashed that equal a pending record from an earlier boot: the
        file is that inode with the same times (nothing wrote it in this boot), so its pages
        in this boot came from the disk, and the hash just taken is of the bytes on disk."""
        now = fs.boot_id()
        return Durable(MappingProxyType({
            k: r for k, r in records.items()
            if now and k in pending and pending[k][0] not in ("", now) and pending[k][1] == r}),
            _PROOF)

    def still(self, records: Mapping[FileId, StateRecord]) -> Durable:
        """Those of these records that ``records`` still hold (a file replaced since is not)."""
        return Durable(MappingProxyType({k: r for k, r in self.records.items()
                                         if records.get(k) == r}), _PROOF)

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


def settle_pending(roots: Roots, pending: Pending, wanted: Iterable[FileId], *,
                   workers: int = 8, deadline: float | None = None) -> SyncOutcome:
    """Make this boot's pending records of ``wanted`` files durable (``sync_records``: the very
    inode, ``fdatasync``ed; cheap when the kernel has written it back meanwhile), so they may
    be trusted unhashed. Records from an earlier boot are not synced: their files are hashed
    (``Durable.reread``)."""
    now = fs.boot_id()
    mine = {k: pending[k][1] for k in wanted if k in pending and now and pending[k][0] == now}
    return sync_records(roots, mine, workers=workers, deadline=deadline)


def _same_file(rec: StateRecord) -> Callable[[os.stat_result], bool]:
    return lambda st: rec.matches(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
