"""The coverage table (pure): ``coverage_table`` applies ``status_of`` to every cell x
fingerprint and counts, the one place statuses and counts come from; ``build_coverage``
adds each row's details (``coverage``'s report). No I/O, no SQLAlchemy."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from neffcache.fingerprint import Fingerprint
from neffcache.index.coverage_reads import (
    CoverageFacts,
    cell_ids_and_keys,
    coverage_row,
    status_of,
)
from neffcache.index.shapes import Status
from neffcache.index.values import (
    FAILED,
    IN_PROGRESS,
    MISSING,
    READY,
    CoverageFingerprint,
    CoverageReport,
)

if TYPE_CHECKING:
    from neffcache.matrix import Cell


@dataclass(frozen=True, slots=True)
class CoverageTable:
    """Cells x fingerprint columns: each cell's status per column (by ``status_of``) and each
    column's counts (in its CoverageFingerprint); pure, without the rows' details."""

    cells: tuple[tuple[str, str], ...]  # (cell id, cell key)
    columns: tuple[CoverageFingerprint, ...]
    statuses: tuple[tuple[Status, ...], ...]  # per cell, one per column

    def only(self, keys: Sequence[str]) -> CoverageTable:
        """These columns only, in this order (keys the table lacks are left out)."""
        index = {c.key: j for j, c in enumerate(self.columns)}
        chosen = [index[k] for k in dict.fromkeys(keys) if k in index]
        return CoverageTable(self.cells, tuple(self.columns[j] for j in chosen),
                             tuple(tuple(row[j] for j in chosen) for row in self.statuses))


def coverage_table(cells: Sequence[Cell] | Sequence[tuple[str, str]],
                   given: Sequence[Fingerprint], facts: CoverageFacts) -> CoverageTable:
    """Pure, and the one place statuses and counts come from: ``cells`` (Cells, or (id, key)
    pairs) under the given fingerprints, those in ``facts`` and those it names. Column
    order: the given ones first (in order), then the others by key; a named key the index
    does not know is a column of backend ``unknown``."""
    cell_ids = cell_ids_and_keys(cells)
    given_keys = list(dict.fromkeys(fp.key for fp in given))
    fps: dict[str, Fingerprint] = {fp.key: fp for fp in given}
    for key, fp in facts.fingerprints.items():
        fps.setdefault(key, fp)
    known = set(given_keys)
    order = given_keys + sorted(k for k in {*fps, *facts.named} if k not in known)
    entries, leases, failures = facts.entries, facts.leases, facts.failures
    statuses = tuple(tuple(status_of((ck, k) in entries, (ck, k) in leases, (ck, k) in failures)
                           for k in order) for _, ck in cell_ids)
    unknown = Fingerprint(backend="unknown", fields=())
    columns = []
    for j, k in enumerate(order):
        column = [row[j] for row in statuses]
        fp = fps.get(k, unknown)
        columns.append(CoverageFingerprint(
            key=k, backend=fp.backend, fields=fp.fields, here=k in known,
            ready=column.count(READY), failed=column.count(FAILED),
            missing=column.count(MISSING), in_progress=column.count(IN_PROGRESS)))
    return CoverageTable(cell_ids, tuple(columns), statuses)


def build_coverage(cells: Sequence[Cell] | Sequence[tuple[str, str]],
                   given: Sequence[Fingerprint], facts: CoverageFacts) -> CoverageReport:
    """Pure: ``coverage_table`` with each cell x fingerprint as a CoverageRow carrying what
    explains its status (entry, lease holder, failure and its log tail)."""
    table = coverage_table(cells, given, facts)
    keys = [c.key for c in table.columns]
    rows = tuple(coverage_row(cell_id, cell_key, k, status, facts)
                 for (cell_id, cell_key), statuses in zip(table.cells, table.statuses,
                                                          strict=True)
                 for k, status in zip(keys, statuses, strict=True))
    return CoverageReport(cells=table.cells, fingerprints=table.columns, rows=rows)


def only_fingerprints(report: CoverageReport, keys: Sequence[str]) -> CoverageReport:
    """Pure: the report with only these fingerprint columns (in this order; keys the report
    lacks are left out)."""
    index = {fp.key: j for j, fp in enumerate(report.fingerprints)}
    chosen = [index[k] for k in dict.fromkeys(keys) if k in index]
    n = len(report.fingerprints)
    rows = tuple(report.rows[i * n + j] for i in range(len(report.cells)) for j in chosen)
    return CoverageReport(cells=report.cells,
                          fingerprints=tuple(report.fingerprints[j] for j in chosen), rows=rows)
