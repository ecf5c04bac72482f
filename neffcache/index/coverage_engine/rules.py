"""Coverage's rule ``status_of`` and its counter ``Tally`` (pure: no I/O, no SQLAlchemy)."""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from json.encoder import encode_basestring_ascii as _quote  # type: ignore[attr-defined]
from typing import TYPE_CHECKING, Any, cast

from neffcache.index.ops_values import (
    CoverageGrid,
    GridRow,
    MatrixVersion,
    fingerprint_target,
    known_versions,
    sdk_version,
)
from neffcache.index.values import (
    FAILED,
    IN_PROGRESS,
    MISSING,
    READY,
    STATUSES,
    CoverageColumn,
    CoverageReport,
    CoverageRow,
    LiveLease,
    Status,
)

if TYPE_CHECKING:
    from neffcache.fingerprint import Fingerprint
    from neffcache.matrix import Cell

Pair = tuple[str, str]  # (cell key, fingerprint key)


def status_of(entry: bool, lease: bool, failure: bool) -> Status:
    """The coverage rule: an entry wins, then a live lease, then a recorded failure."""
    if entry:
        return READY
    if lease:
        return IN_PROGRESS
    return FAILED if failure else MISSING


@dataclass(frozen=True, slots=True)
class FailureFact:
    exit_status: int | None
    log_tail: str
    failed_at: datetime | None


@dataclass(frozen=True, slots=True)
class CoverageFacts:
    """By (cell key, fingerprint key); without details, no entry key, size or log tail."""

    entries: dict[Pair, tuple[str | None, int | None]] = field(default_factory=dict)
    failures: dict[Pair, FailureFact] = field(default_factory=dict)
    leases: dict[Pair, LiveLease] = field(default_factory=dict)
    fingerprints: dict[str, Fingerprint] = field(default_factory=dict)
    named: tuple[str, ...] = ()  # columns even with nothing for these cells (restore reports)

    def status(self, pair: Pair) -> Status:
        return status_of(pair in self.entries, pair in self.leases, pair in self.failures)


def _zeros() -> dict[str, int]:
    return dict.fromkeys(STATUSES, 0)


class Tally(defaultdict[str, dict[str, int]]):
    """Statuses counted per column key: the one counter of coverage."""

    def __init__(self, keys: Iterable[str] = ()) -> None:
        super().__init__(_zeros, {k: _zeros() for k in keys})

    def add(self, key: str, status: str, n: int = 1) -> None:
        self[key][status] += n

    def counts(self, key: str, cells: int | None = None) -> dict[str, int]:
        """The counts of column ``key``; with ``cells``, missing is what the others leave."""
        n = dict(self.get(key) or _zeros())
        if cells is not None:
            n[MISSING] = cells - n[READY] - n[FAILED] - n[IN_PROGRESS]
        return n


def column_of(key: str, fp: Fingerprint | None, counts: Mapping[str, int], *,
              here: bool = False, restores: int = 0) -> CoverageColumn:
    """A key the index has no fingerprint for is of backend ``unknown``."""
    backend = fp.backend if fp else "unknown"
    fields = dict(fp.fields) if fp else {}
    return CoverageColumn(key, backend, sdk_version(backend, fields), counts[READY],
                          counts[FAILED], counts[MISSING], counts[IN_PROGRESS],
                          target=fingerprint_target(backend, fields),
                          known=known_versions(backend, fields), restores=restores,
                          fields=fp.fields if fp else (), here=here)


def cell_ids_and_keys(cells: Sequence[Cell] | Sequence[tuple[str, str]]
                      ) -> tuple[tuple[str, str], ...]:
    """(id, key) per distinct cell, in order (a Cell's key is a digest: computed once)."""
    from neffcache.matrix import Cell, cell_keys

    pairs: Iterable[tuple[str, str]] = cast("Sequence[tuple[str, str]]", cells)
    if cells and isinstance(cells[0], Cell):
        cell_objs = cast("Sequence[Cell]", cells)
        pairs = zip([c.id for c in cell_objs], cell_keys(cell_objs), strict=True)
    out: dict[str, str] = {}
    for cell_id, key in pairs:
        out.setdefault(key, cell_id)
    return tuple((cell_id, key) for key, cell_id in out.items())


def coverage_row(cell_id: str, cell_key: str, fp_key: str, status: Status,
                 facts: CoverageFacts) -> CoverageRow:
    pair = (cell_key, fp_key)
    if status == READY:  # an entry's (key, size)
        return CoverageRow(cell_id, cell_key, fp_key, READY, *facts.entries[pair])
    if status == IN_PROGRESS:
        lease = facts.leases[pair]
        return CoverageRow(cell_id, cell_key, fp_key, IN_PROGRESS, host=lease.host,
                           since=lease.claimed_at, lease_expires_at=lease.expires_at)
    if status == FAILED:
        failure = facts.failures[pair]
        return CoverageRow(cell_id, cell_key, fp_key, FAILED, exit_status=failure.exit_status,
                           log_tail=failure.log_tail, failed_at=failure.failed_at)
    return CoverageRow(cell_id, cell_key, fp_key, MISSING)


@dataclass(frozen=True, slots=True)
class CoveragePlan:
    """Cells and their columns' keys; ``single``: a stream's facts of its only batch, if one."""

    cells: tuple[tuple[str, str], ...]
    keys: tuple[str, ...]
    fingerprints: dict[str, Fingerprint] = field(default_factory=dict)
    given: frozenset[str] = frozenset()
    single: CoverageFacts | None = None

    @staticmethod
    def of(cells: tuple[tuple[str, str], ...], given: Sequence[Fingerprint],
           known: Mapping[str, Fingerprint], seen: Iterable[str], *,
           only: Sequence[str] | None = None, single: CoverageFacts | None = None
           ) -> CoveragePlan:
        """The columns: the given fingerprints first (in order), then the others seen, by key
        (``only``: these keys, in this order)."""
        given_keys = list(dict.fromkeys(fp.key for fp in given))
        keys = given_keys + sorted(set(seen) - set(given_keys))
        if only is not None:
            keys = [k for k in dict.fromkeys(only) if k in set(keys)]
        return CoveragePlan(cells, tuple(keys), {**known, **{fp.key: fp for fp in given}},
                            frozenset(given_keys), single)

    def columns(self, tally: Tally) -> tuple[CoverageColumn, ...]:
        return tuple(column_of(k, self.fingerprints.get(k), tally.counts(k),
                               here=k in self.given) for k in self.keys)


def build_coverage(cells: Sequence[Cell] | Sequence[tuple[str, str]],
                   given: Sequence[Fingerprint], facts: CoverageFacts, *,
                   details: bool = True, only: Sequence[str] | None = None) -> CoverageReport:
    """Each cell's statuses, each column's counts and, with ``details``, each CoverageRow
    (``only``: these columns, as ``CoveragePlan.of``)."""
    plan = CoveragePlan.of(cell_ids_and_keys(cells), given, facts.fingerprints,
                           {*facts.fingerprints, *facts.named}, only=only)
    statuses = tuple(tuple(facts.status((ck, k)) for k in plan.keys) for _, ck in plan.cells)
    tally = Tally(plan.keys)
    for row in statuses:
        for k, status in zip(plan.keys, row, strict=True):
            tally.add(k, status)
    rows = tuple(coverage_row(cell_id, cell_key, k, status, facts)
                 for (cell_id, cell_key), row in zip(plan.cells, statuses, strict=True)
                 for k, status in zip(plan.keys, row, strict=True)) if details else ()
    return CoverageReport(cells=plan.cells, fingerprints=plan.columns(tally), rows=rows,
                          statuses=statuses)


def grid_page(matrix: MatrixVersion, report: CoverageReport, *, pattern: str | None = None,
              offset: int = 0, limit: int | None = None,
              verified: Mapping[Pair, str] | None = None) -> CoverageGrid:
    """A coverage report as a page of the API's grid (counts over every cell)."""
    total = len(report.cells)
    stop = total if limit is None else offset + limit
    keys = [c.key for c in report.fingerprints]
    verified = verified or {}
    rows = tuple(GridRow(cell_id, cell_key, statuses, tuple(
        (j, verified[(cell_key, k)]) for j, k in enumerate(keys) if (cell_key, k) in verified))
        for (cell_id, cell_key), statuses
        in zip(report.cells[offset:stop], report.statuses[offset:stop], strict=True))
    return CoverageGrid(matrix, pattern, total, offset, total if limit is None else limit,
                        report.fingerprints, rows)


class RowLines:
    """CoverageRows as ``encode(row.to_json())`` lines: ready and missing ones fill templates (a
    third of the time of 20,000 rows); ``encode`` must have ``ensure_ascii``."""

    def __init__(self, encode: Callable[[Any], str]) -> None:
        self._encode = encode
        ready = CoverageRow("\0a", "\0b", "\0c", READY, entry_key="\0d",
                            total_bytes="\0e")  # type: ignore[arg-type]  # a placeholder
        missing = CoverageRow("\0a", "\0b", "\0c", MISSING)
        self._ready = _template(encode(ready.to_json()), 5)
        self._missing = _template(encode(missing.to_json()), 3)
        self._last: tuple[tuple[str, str] | None, dict[str, str]] = (None, {})
        self._fp = functools.cache(_value)  # a fingerprint key's JSON, once per key

    def line(self, cell_id: str, cell_key: str, fp_key: str, status: Status,
             facts: CoverageFacts) -> str:
        if status == READY:
            entry_key, size = facts.entries[(cell_key, fp_key)]
            return self._ready % {**self._cell(cell_id, cell_key), "c": self._fp(fp_key),
                                  "d": _value(entry_key), "e": _value(size)}
        if status == MISSING:
            return self._missing % {**self._cell(cell_id, cell_key), "c": self._fp(fp_key)}
        return self._encode(coverage_row(cell_id, cell_key, fp_key, status, facts).to_json())

    def _cell(self, cell_id: str, cell_key: str) -> dict[str, str]:
        if self._last[0] != (cell_id, cell_key):
            self._last = ((cell_id, cell_key), {"a": _value(cell_id), "b": _value(cell_key)})
        return self._last[1]


def _template(text: str, n: int) -> str:
    """``text``, a row encoded with placeholders ``"\\0a"``..., as a %-template."""
    out = text.replace("%", "%%")
    for name in "abcde"[:n]:
        placeholder = json.dumps("\0" + name)
        assert out.count(placeholder) == 1, text
        out = out.replace(placeholder, f"%({name})s")
    return out


def _value(v: Any) -> str:
    if v is None:
        return "null"
    if type(v) is str:
        return _quote(v)
    if type(v) is int:
        return int.__repr__(v)
    return json.dumps(v)
