"""Coverage as a stream, in flat memory: which columns a matrix's cells have (a few DISTINCT
queries a batch of cells), then each cell's rows with what explains them, a batch of cells
read at a time, the columns' counts tallied as the rows go by. Statuses by ``status_of``."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from json.encoder import encode_basestring_ascii as _quote  # type: ignore[attr-defined]
from typing import TYPE_CHECKING, Any

from neffcache.index.coverage_reads import (
    CoverageFacts,
    cell_ids_and_keys,
    coverage_row,
    fingerprints_with_rows,
    read_facts,
    read_fingerprints,
    scope_of_keys,
    status_of,
)
from neffcache.index.listing import Reader
from neffcache.index.shapes import Status
from neffcache.index.values import (
    FAILED,
    IN_PROGRESS,
    MISSING,
    READY,
    CoverageFingerprint,
    CoverageRow,
)

if TYPE_CHECKING:
    from neffcache.fingerprint import Fingerprint
    from neffcache.matrix import Cell

STREAM_BATCH = 500  # cells per batch: a batch's facts are what a stream holds at once
FIRST_BATCH = 100  # the first batch is small: its rows come at once
SINGLE = 500  # up to this many cells are read once, with details, before the first row


def batches(n: int) -> Iterator[tuple[int, int]]:
    """(start, stop) of the batches of ``n`` cells: FIRST_BATCH, then STREAM_BATCH each."""
    start, size = 0, FIRST_BATCH
    while start < n:
        yield start, min(n, start + size)
        start, size = start + size, STREAM_BATCH


@dataclass(frozen=True, slots=True)
class CoveragePlan:
    """What a coverage stream will list: its cells (id, key), its columns' keys in order,
    the fingerprints it knows (the given ones, those of the index), which keys were given,
    and the facts of the only batch when the cells fit in one (read once, with details)."""

    cells: tuple[tuple[str, str], ...]
    keys: tuple[str, ...]
    fingerprints: dict[str, Fingerprint] = field(default_factory=dict)
    given: frozenset[str] = frozenset()
    single: CoverageFacts | None = None


def plan_coverage(reader: Reader, cells: Sequence[Cell] | Sequence[tuple[str, str]],
                  given: Sequence[Fingerprint], now: datetime, *, named: Sequence[str] = (),
                  only: Sequence[str] | None = None) -> CoveragePlan:
    """The columns ``coverage_table`` gives ``cells`` (distinct, in order): ``given`` +
    every fingerprint with an entry, failure or live lease for them + ``named``, the given
    ones first, the others by key; ``only``: just these columns, in this order. Up to
    SINGLE cells are read once, with details (the statements of ``Index.coverage``); for
    more, each fingerprint is asked whether it has a row for them
    (``coverage_reads.fingerprints_with_rows``) and the rows are read later, a batch at a
    time."""
    cells = cell_ids_and_keys(cells)
    single = None
    if len(cells) <= SINGLE:
        single = read_facts(reader, scope_of_keys([k for _, k in cells]), now, named=named)
        seen = set(single.fingerprints) | set(single.named)
        known = single.fingerprints
    else:
        seen = set(named) | fingerprints_with_rows(reader, [k for _, k in cells], now)
        facts = CoverageFacts()
        read_fingerprints(reader, sorted(seen), facts)
        known = facts.fingerprints
    given_keys = list(dict.fromkeys(fp.key for fp in given))
    keys = given_keys + sorted(seen - set(given_keys))
    if only is not None:
        keys = [k for k in dict.fromkeys(only) if k in set(keys)]
    fps = {**known, **{fp.key: fp for fp in given}}
    return CoveragePlan(cells, tuple(keys), fps, frozenset(given_keys), single)


class ColumnCounts:
    """The columns of a plan with their counts, tallied as rows go by (``add``)."""

    def __init__(self, plan: CoveragePlan) -> None:
        self._plan = plan
        self._counts = {k: dict.fromkeys((READY, FAILED, MISSING, IN_PROGRESS), 0)
                        for k in plan.keys}

    def add(self, fp_key: str, status: str) -> None:
        self._counts[fp_key][status] += 1

    def columns(self) -> tuple[CoverageFingerprint, ...]:
        """``coverage_table``'s columns, counted over the rows added so far."""
        out = []
        for k in self._plan.keys:
            fp, n = self._plan.fingerprints.get(k), self._counts[k]
            out.append(CoverageFingerprint(
                key=k, backend=fp.backend if fp else "unknown", fields=fp.fields if fp else (),
                here=k in self._plan.given,
                ready=n[READY], failed=n[FAILED], missing=n[MISSING],
                in_progress=n[IN_PROGRESS]))
        return tuple(out)


Cell_ = tuple[str, str, str, Status, CoverageFacts]  # cell id, cell key, fp key, status, facts


def coverage_cells(reader: Reader, plan: CoveragePlan, now: datetime) -> Iterator[Cell_]:
    """Every cell x column of ``plan``, row-major by cell then column (``build_coverage``'s
    order), as (cell id, cell key, fingerprint key, status, the facts that explain it):
    each batch of cells read with details when its turn comes (the first batch small, so
    the first rows come at once). ``coverage_row(*item)`` is its CoverageRow."""
    keys = plan.keys
    for start, stop in batches(len(plan.cells)):
        part = plan.cells[start:stop]
        facts = plan.single if plan.single is not None else read_facts(
            reader, scope_of_keys([k for _, k in part]), now)
        entries_, leases, failures = facts.entries, facts.leases, facts.failures
        for cell_id, ck in part:
            for k in keys:
                pair = (ck, k)
                yield cell_id, ck, k, status_of(pair in entries_, pair in leases,
                                                pair in failures), facts


def coverage_rows(reader: Reader, plan: CoveragePlan, now: datetime) -> Iterator[CoverageRow]:
    """``coverage_cells`` as CoverageRows (``build_coverage``'s rows)."""
    for item in coverage_cells(reader, plan, now):
        yield coverage_row(*item)


class RowLines:
    """One line of JSON per CoverageRow, ``encode(row.to_json())``'s text: the common rows
    (ready, missing) are filled into templates made from that encoding of a row with
    placeholder values, without building a row or its document (a third of the time of
    20,000 rows); the others are encoded whole. Values filled in are str, int or None,
    encoded as ``json`` encodes them (ASCII: ``encode`` must have ``ensure_ascii``)."""

    def __init__(self, encode: Callable[[Any], str]) -> None:
        self._encode = encode
        ready = CoverageRow("\0a", "\0b", "\0c", READY, entry_key="\0d",
                            total_bytes="\0e")  # type: ignore[arg-type]  # a placeholder
        missing = CoverageRow("\0a", "\0b", "\0c", MISSING)
        self._ready = _template(encode(ready.to_json()), 5)
        self._missing = _template(encode(missing.to_json()), 3)
        self._last: tuple[tuple[str, str] | None, dict[str, str]] = (None, {})
        self._fps: dict[str, str] = {}

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
        """The cell's values, encoded once for its row of columns."""
        if self._last[0] != (cell_id, cell_key):
            self._last = ((cell_id, cell_key), {"a": _value(cell_id), "b": _value(cell_key)})
        return self._last[1]

    def _fp(self, fp_key: str) -> str:
        """A column's key, encoded once."""
        out = self._fps.get(fp_key)
        if out is None:
            out = self._fps[fp_key] = _value(fp_key)
        return out


def _template(text: str, n: int) -> str:
    """``text`` (the encoding of a row whose varying values were ``"\\0a"``, ``"\\0b"``,
    ...) as a %-template of those values by name (``%(a)s``, ...)."""
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
