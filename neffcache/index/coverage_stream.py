"""Coverage as a stream, in flat memory: the columns with their counts first (one pass over
the facts without details, a batch of cells at a time), then each cell's rows with what
explains them (a second pass, a batch at a time). Statuses and counts by ``coverage_grid``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from neffcache.fingerprint import Fingerprint
from neffcache.index.coverage_grid import (
    CoverageFacts,
    cell_ids_and_keys,
    coverage_row,
    coverage_table,
    fetch_coverage_facts,
    status_of,
)
from neffcache.index.values import CoverageFingerprint, CoverageRow
from neffcache.matrix import Cell

STREAM_BATCH = 2_000  # cells per batch: a batch's facts are what a stream holds at once


@dataclass(frozen=True, slots=True)
class CoveragePlan:
    """The header of a coverage stream: its cells (id, key), its columns with their counts,
    and the facts of the only batch when the cells fit in one (read once, with details)."""

    cells: tuple[tuple[str, str], ...]
    columns: tuple[CoverageFingerprint, ...]
    single: CoverageFacts | None = None


def plan_coverage(conn: Any, cells: Sequence[Cell] | Sequence[tuple[str, str]],
                  given: Sequence[Fingerprint],
                  now: datetime, *, named: Sequence[str] = (),
                  only: Sequence[str] | None = None) -> CoveragePlan:
    """The columns and counts ``coverage_table`` gives for ``cells`` (distinct, in order)
    under ``given`` + every fingerprint with an entry, failure or live lease for them +
    ``named``; ``only``: just these columns, in this order. Cells that fit in one batch are
    read once with details (the same queries as ``Index.coverage``); more are counted a
    batch at a time without details, and their rows read again by ``coverage_rows``."""
    cells = cell_ids_and_keys(cells)
    if len(cells) <= STREAM_BATCH:
        facts = fetch_coverage_facts(conn, [k for _, k in cells], now, named=named)
        columns = coverage_table(cells, given, facts).columns
        return CoveragePlan(tuple(cells), _choose(columns, only), facts)
    totals: dict[str, CoverageFingerprint] = {}
    for start in range(0, len(cells), STREAM_BATCH):
        part = cells[start:start + STREAM_BATCH]
        facts = fetch_coverage_facts(conn, [k for _, k in part], now, details=False,
                                     named=named if start == 0 else ())
        for col in coverage_table(part, given, facts).columns:
            before = totals.get(col.key)
            totals[col.key] = col if before is None else _add(before, col)
    n = len(cells)
    known = list(dict.fromkeys(fp.key for fp in given))
    order = known + sorted(k for k in totals if k not in set(known))
    # a column a batch lacked is missing for that batch's cells
    columns = tuple(replace(c, missing=n - c.ready - c.failed - c.in_progress)
                    for c in (totals[k] for k in order))
    return CoveragePlan(tuple(cells), _choose(columns, only))


def _add(a: CoverageFingerprint, b: CoverageFingerprint) -> CoverageFingerprint:
    backend, fields = (b.backend, b.fields) if a.backend == "unknown" else (a.backend, a.fields)
    return replace(a, backend=backend, fields=fields, ready=a.ready + b.ready,
                   failed=a.failed + b.failed, in_progress=a.in_progress + b.in_progress)


def _choose(columns: Sequence[CoverageFingerprint],
            only: Sequence[str] | None) -> tuple[CoverageFingerprint, ...]:
    if only is None:
        return tuple(columns)
    by_key = {c.key: c for c in columns}
    return tuple(by_key[k] for k in dict.fromkeys(only) if k in by_key)


def coverage_rows(conn: Any, plan: CoveragePlan, now: datetime) -> Iterator[CoverageRow]:
    """Every cell x column of ``plan``, row-major by cell then column (``build_coverage``'s
    rows), each batch of cells read with details when its turn comes."""
    keys = [c.key for c in plan.columns]
    for start in range(0, len(plan.cells), STREAM_BATCH):
        part = plan.cells[start:start + STREAM_BATCH]
        facts = plan.single if plan.single is not None else fetch_coverage_facts(
            conn, [k for _, k in part], now)
        entries, leases, failures = facts.entries, facts.leases, facts.failures
        for cell_id, ck in part:
            for k in keys:
                pair = (ck, k)
                status = status_of(pair in entries, pair in leases, pair in failures)
                yield coverage_row(cell_id, ck, k, status, facts)
