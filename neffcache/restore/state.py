"""The state file of each cache root: what neffcache last verified, durable or pending."""

from __future__ import annotations

import codecs
import contextlib
import errno
import os
import stat
from collections import ChainMap
from collections.abc import Callable, Collection, Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, BinaryIO, TypeVar

from neffcache.restore import fs
from neffcache.restore.fs import Roots, datasync_at, replace_best_effort
from neffcache.restore.plan import FileId
from neffcache.restore.seen import Present, Vouched
from neffcache.restore.state_rows import (
    Rows,
    encode_rows,
    packed_as_json,
    parse_row_pieces,
    unpack_row,
)
from neffcache.thread_pool import map_in_threads

STATE_FILE = ".neffcache-state.json"
STATE_SCHEMA = 1
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class StateRecord:
    """A file as neffcache last verified it; a match means "no need to re-hash"."""

    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    sha256: str
    mode: int

    def matches(self, size: int, mtime_ns: int, ctime_ns: int, inode: int) -> bool:
        return (self.size, self.mtime_ns, self.ctime_ns, self.inode) == \
            (size, mtime_ns, ctime_ns, inode)

    def is_file(self, st: os.stat_result) -> bool:
        """Whether ``st`` is the very file (inode, size, times) this record describes."""
        return self.matches(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


# Installed, not known durable: (boot, record). The state file never vouches for bytes that may
# not be on disk: the next restore in that boot fdatasyncs a pending file, a later boot hashes it.
Pending = Mapping[FileId, tuple[str, StateRecord]]


def _row(r: StateRecord) -> list[Any]:
    return [r.size, r.mtime_ns, r.ctime_ns, r.inode, r.sha256, r.mode]


def _record(packed: bytes) -> StateRecord:
    size, mtime, ctime, inode, sha, mode = unpack_row(packed)
    return StateRecord(size, mtime, ctime, inode, sha, _MODES.get(mode, mode))


def encode_state_chunks(paths: list[str], record: Callable[[str], StateRecord],
                        pending: Mapping[str, tuple[str, StateRecord]] | None = None,
                        batch: int = 4096) -> Iterator[bytes]:
    """The state file for ``paths`` (sorted) in pieces of ``batch`` records, then the ``pending``
    ones not among them, by boot: a million files are never one string."""
    boots: dict[str, list[str]] = {}
    if pending:
        durable = set(paths)
        for p in sorted(p for p in pending if p not in durable):
            boots.setdefault(pending[p][0], []).append(p)
        del durable
    waiting = pending or {}
    groups = [(boot, mine, lambda p: _row(waiting[p][1])) for boot, mine in boots.items()]
    return encode_rows(paths, lambda p: _row(record(p)), groups, STATE_SCHEMA, batch)


_MODES = {m: m for m in range(0o10000)}  # one int object per mode, not one per file


def state_record(st: os.stat_result, sha256: str) -> StateRecord:
    return StateRecord(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, sha256,
                       _MODES[stat.S_IMODE(st.st_mode)])


class StateTable(Mapping[FileId, StateRecord]):
    """State records by root and path, held packed: ~240 bytes a file instead of ~780."""

    __slots__ = ("_roots",)

    def __init__(self, roots: Mapping[str, Rows]) -> None:
        self._roots = {root: rows for root, rows in roots.items() if rows}

    def __getitem__(self, key: FileId) -> StateRecord:
        return _record(self._roots[key[0]][key[1]])

    def get(self, key: FileId, default: Any = None) -> Any:
        packed = self._roots.get(key[0], {}).get(key[1])
        return default if packed is None else _record(packed)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, tuple) and len(key) == 2 and \
            key[1] in self._roots.get(key[0], {})

    def __iter__(self) -> Iterator[FileId]:
        for root, rows in self._roots.items():
            yield from ((root, p) for p in rows)

    def __len__(self) -> int:
        return sum(len(rows) for rows in self._roots.values())


class PendingTable(Mapping[FileId, tuple[str, StateRecord]]):
    """Pending records by root, boot and path, packed like ``StateTable``'s."""

    __slots__ = ("_roots",)

    def __init__(self, roots: Mapping[str, Mapping[str, Rows]]) -> None:
        self._roots = {root: {b: rows for b, rows in boots.items() if rows}
                       for root, boots in roots.items()}

    def __getitem__(self, key: FileId) -> tuple[str, StateRecord]:
        for boot, rows in self._roots.get(key[0], {}).items():
            packed = rows.get(key[1])
            if packed is not None:
                return boot, _record(packed)
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, tuple) and len(key) == 2 and any(
            key[1] in rows for rows in self._roots.get(key[0], {}).values())

    def __iter__(self) -> Iterator[FileId]:
        for root, boots in self._roots.items():
            for rows in boots.values():
                yield from ((root, p) for p in rows)

    def __len__(self) -> int:
        return sum(len(rows) for boots in self._roots.values() for rows in boots.values())


def load_states(target_dirs: Mapping[str, str]) -> tuple[StateTable, PendingTable]:
    """Each root's state file, read once: its durable and its pending records."""
    states = {root: read_root_state(d) for root, d in target_dirs.items()}
    return StateTable({root: s.files for root, s in states.items()}), \
        PendingTable({root: s.pending for root, s in states.items()})


def load_state(target_dirs: Mapping[str, str]) -> StateTable:
    """The durable records of each root's state file."""
    return load_states(target_dirs)[0]


def load_pending(target_dirs: Mapping[str, str]) -> PendingTable:
    """The pending records of each root's state file."""
    return load_states(target_dirs)[1]


@dataclass(slots=True)
class RootState:
    """One root's state file as read, and which file it was (``stamp``: None when none), so
    ``save_settled`` writes back only over that very file."""

    files: Rows
    pending: dict[str, Rows]
    stamp: tuple[int, int, int] | None
    settled: int = 0  # pending rows this process made durable (``settle``)

    def this_boot(self) -> Rows:
        now = fs.boot_id()
        return self.pending.get(now, {}) if now else {}

    def sync_row(self, dfd: int, path: str) -> bool:
        """True once the very file (inode, size, times) of ``path``'s row pending in this boot is
        ``fdatasync``ed; moves nothing (it may run on another thread than ``settle``)."""
        packed = self.this_boot().get(path)
        return packed is not None and datasync_at(dfd, path, _record(packed).is_file)

    def settle(self, path: str) -> None:
        """``path``'s row pending in this boot is durable now (synced)."""
        self.files[path] = self.this_boot().pop(path)
        self.settled += 1


def _stamp(st: os.stat_result) -> tuple[int, int, int]:
    return st.st_ino, st.st_size, st.st_mtime_ns


def read_root_state(d: str) -> RootState:
    """The state file of the root at ``d`` (none there, or unreadable: empty)."""
    try:
        with open(Path(d, STATE_FILE), "rb") as fh:
            stamp = _stamp(os.fstat(fh.fileno()))
            files, pending = parse_row_pieces(_text_pieces(fh), STATE_SCHEMA)
    except OSError:
        return RootState({}, {}, None)
    return RootState(files, pending, stamp)


def _text_pieces(fh: BinaryIO, size: int = 1 << 20) -> Iterator[str]:
    """The file's text in pieces, never whole beside its bytes (issue 22)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    while chunk := fh.read(size):
        yield decoder.decode(chunk)
    yield decoder.decode(b"", final=True)


def save_settled(target_dirs: Mapping[str, str], states: Mapping[str, RootState]) -> None:
    """Write back each root's state file whose pending rows were settled, if the file there is still
    the one read (a restore in between wrote its own). Call it holding DIR's lock."""
    for root, state in states.items():
        final = Path(target_dirs[root], STATE_FILE)
        with contextlib.suppress(OSError):  # gone or unreadable there: not the file read
            if state.settled and _stamp(os.stat(final, follow_symlinks=False)) == state.stamp:
                _rewrite(final, state.files, state.pending)


def _rewrite(final: Path, files: Rows, pending: Mapping[str, Rows]) -> None:
    waiting = [(boot, sorted(rows), packed_as_json(rows)) for boot, rows in pending.items() if rows]
    replace_best_effort(final, encode_rows(sorted(files), packed_as_json(files), waiting,
                                           STATE_SCHEMA))


def save_state(target_dirs: Mapping[str, str], durable: Durable,
               pending: Pending | None = None) -> None:
    """Write each root's state file atomically (best effort), vouching for exactly the ``durable``
    records; ``pending`` ones are kept apart, under their boot."""
    for root, d in target_dirs.items():
        mine = _AtRoot(durable.records, root)
        paths = sorted(mine)
        waiting = _AtRoot(pending or {}, root)
        if not paths and next(iter(waiting), None) is None:
            continue
        replace_best_effort(Path(d, STATE_FILE), encode_state_chunks(paths, mine.__getitem__,
                                                                     waiting))


def pending_now(records: Mapping[FileId, StateRecord], skip: Container[FileId] = (),
                also: Pending | None = None) -> Pending:
    """``records`` (but those in ``skip``) as pending in this boot, and ``also``: a view."""
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


class _AtRoot(Mapping[str, V]):
    """The records of one root, by path: a view of ``records``."""

    __slots__ = ("_records", "_root")

    def __init__(self, records: Mapping[FileId, V], root: str) -> None:
        self._records, self._root = records, root

    def __getitem__(self, path: str) -> V:
        return self._records[(self._root, path)]

    def __iter__(self) -> Iterator[str]:
        root = self._root
        return (p for rt, p in self._records if rt == root)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def overlay(state: Mapping[FileId, StateRecord], over: Mapping[FileId, StateRecord]
            ) -> Mapping[FileId, StateRecord]:
    """``state`` with ``over``'s records over it, without a copy."""
    if not over or not state:
        return over or state
    return ChainMap(over, state)  # type: ignore[arg-type]  # read only: never written to


_PROOF = object()  # only this module makes Durable sets


@dataclass(frozen=True, slots=True)
class Durable:
    """State records whose files are known to be on disk: the only thing ``save_state`` takes."""

    records: Mapping[FileId, StateRecord]
    proof: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.proof is not _PROOF:
            raise TypeError("Durable is made only by neffcache.restore.state")

    @staticmethod
    def vouched(state: Mapping[FileId, StateRecord], present: Present,
                records: Mapping[FileId, StateRecord], unwanted: Iterable[FileId],
                also: Durable) -> Durable:
        """What ``state`` vouched for and still holds: the ``seen`` files of ``present`` this run
        did not hash or write anew (a view), the ``records`` equal to ``state``'s, its records of
        the ``unwanted`` files, and ``also``."""
        extra = {k: r for k, r in records.items() if state.get(k) == r}
        extra.update((k, state[k]) for k in unwanted if k in state)
        extra.update(also.records)
        return Durable(Vouched(present, records, extra), _PROOF)

    @staticmethod
    def reread(pending: Pending, records: Mapping[FileId, StateRecord]) -> Durable:
        """The ``records`` just hashed that equal a pending record from an earlier boot (so read
        from the disk)."""
        now = fs.boot_id()
        out = {k: r for k, r in records.items()  # one look (a packed table unpacks it)
               if (held := pending.get(k)) is not None and held[0] not in ("", now)
               and held[1] == r} if now else {}
        return Durable(MappingProxyType(out), _PROOF)

    def still(self, records: Mapping[FileId, StateRecord]) -> Durable:
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
    """``fdatasync`` each file of ``fresh`` that is still the very inode and times of its record
    (one that changed or came after the deadline is left out). Directories are not fsynced: a
    rename lost in a crash leaves another inode at the name, which no record matches."""
    items = sorted(fresh)  # keys only: no (key, record) pair per file

    def one(fid: FileId) -> bool | str:
        try:
            return datasync_at(roots.fds[fid[0]], fid[1], fresh[fid].is_file)
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
    """``sync_records`` of this boot's pending records of ``wanted`` files (older: hashed)."""
    now = fs.boot_id()
    mine = {k: held[1] for k in wanted
            if (held := pending.get(k)) is not None and held[0] == now} if now else {}
    return sync_records(roots, mine, workers=workers, deadline=deadline)


def forget_paths(target_dirs: Mapping[str, str], gone: Mapping[str, Collection[str]]) -> None:
    """Each root's state file without the rows (durable and pending) of the paths ``gone``."""
    for root, paths in gone.items():
        if not paths:
            continue
        state = read_root_state(target_dirs[root])
        if state.stamp is not None:
            _rewrite(Path(target_dirs[root], STATE_FILE),
                     {p: r for p, r in state.files.items() if p not in paths},
                     {boot: {p: r for p, r in rows.items() if p not in paths}
                      for boot, rows in state.pending.items()})
