"""Read queries for the ops surface (HTTP API, dashboard, metrics): coverage grids of
registered matrices, fingerprint and SDK totals, precompile runs, failures, restore reports
and restore outcome aggregates. Each is a few set-based queries, never one per cell."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from neffcache.errors import NotFoundError
from neffcache.index.api import Index
from neffcache.index.matrices import get_matrix, list_matrices, matrix_cell_refs
from neffcache.index.models import (
    CellFailureRow,
    CellRow,
    EntryRow,
    FingerprintRow,
    MatrixCellRow,
    MatrixRow,
    PrecompileRunRow,
    RestoreReportRow,
)
from neffcache.index.ops_values import (
    DURATION_BUCKETS,
    OUTCOMES,
    CoverageGrid,
    FailureRecord,
    FingerprintInfo,
    FingerprintStats,
    IndexTotals,
    MatrixVersion,
    RestoreOutcomeStats,
    RestoreRecord,
    RunSummary,
    build_grid,
    restore_outcome,
    sdk_version,
)
from neffcache.index.queries import glob_to_like
from neffcache.index.record import as_utc


def _fingerprint_info(key: str, backend: str, fields: dict[str, Any],
                      first_seen: datetime | None) -> FingerprintInfo:
    return FingerprintInfo(key, backend, sdk_version(backend, fields),
                           tuple(sorted((str(k), str(v)) for k, v in fields.items())),
                           as_utc(first_seen))


def _matrix_pairs(s: Session, matrix_id: int) -> tuple[set[tuple[str, str]],
                                                        set[tuple[str, str]]]:
    """(cell key, fingerprint key) pairs with an entry, and pairs with a failure, for the
    cells of one matrix version."""
    in_matrix = select(MatrixCellRow.cell_key).where(MatrixCellRow.matrix_id == matrix_id)
    ready = {(c, f) for c, f in s.execute(
        select(EntryRow.cell_key, EntryRow.fingerprint_key)
        .where(EntryRow.cell_key.in_(in_matrix)))}
    failed = {(c, f) for c, f in s.execute(
        select(CellFailureRow.cell_key, CellFailureRow.fingerprint_key)
        .where(CellFailureRow.cell_key.in_(in_matrix)).distinct())}
    return ready, failed


def _columns(s: Session, keys: set[str]) -> list[FingerprintInfo]:
    """Fingerprints by first appearance (then backend, SDK version, key): the grid's
    column order."""
    rows = s.execute(select(FingerprintRow.key, FingerprintRow.backend, FingerprintRow.fields,
                            FingerprintRow.first_seen_at)
                     .where(FingerprintRow.key.in_(sorted(keys)))).all() if keys else []
    infos = [_fingerprint_info(*r) for r in rows]
    return sorted(infos, key=lambda f: (f.first_seen_at is None, f.first_seen_at, f.backend,
                                        f.sdk_version, f.key))


def coverage_grid(index: Index, name: str, *, version: int | None = None,
                  pattern: str | None = None, offset: int = 0,
                  limit: int | None = None) -> CoverageGrid:
    """A registered matrix's cells (matching the glob ``pattern``) x every fingerprint with
    an entry or a failure for any of its cells; counts over all matching cells, rows for
    ``offset``..``offset + limit``."""
    v = get_matrix(index, name, version)
    cells = matrix_cell_refs(index, v.id)
    with index._read() as s:  # noqa: SLF001 - neffcache.index-internal
        ready, failed = _matrix_pairs(s, v.id)
        columns = _columns(s, {fp for _, fp in ready} | {fp for _, fp in failed})
    return build_grid(v, cells, columns, ready, failed, pattern=pattern, offset=offset,
                      limit=limit)


def coverage_summaries(index: Index) -> list[CoverageGrid]:
    """Counts (no rows) for the current version of every registered matrix."""
    return [coverage_grid(index, m.name, version=m.version, limit=0)
            for m in list_matrices(index)]


def fingerprint_stats(index: Index) -> list[FingerprintStats]:
    """Every fingerprint with its entry count and bytes, oldest first."""
    with index._read() as s:  # noqa: SLF001
        totals = {k: (n, b or 0) for k, n, b in s.execute(
            select(EntryRow.fingerprint_key, func.count(), func.sum(EntryRow.total_bytes))
            .group_by(EntryRow.fingerprint_key))}
        infos = _columns(s, set(s.scalars(select(FingerprintRow.key))))
    return [FingerprintStats(i, *totals.get(i.key, (0, 0))) for i in infos]


def index_totals(index: Index) -> IndexTotals:
    with index._read() as s:  # noqa: SLF001
        n_entries, n_bytes = s.execute(select(func.count(),
                                              func.sum(EntryRow.total_bytes))).one()

        def count(model: type) -> int:
            return int(s.scalar(select(func.count()).select_from(model)) or 0)

        return IndexTotals(
            entries=int(n_entries or 0), total_bytes=int(n_bytes or 0),
            fingerprints=count(FingerprintRow), cells=count(CellRow),
            matrices=int(s.scalar(select(func.count(MatrixRow.name.distinct()))) or 0),
            runs=count(PrecompileRunRow), restores=count(RestoreReportRow))


def list_runs(index: Index, limit: int = 50, matrix: str | None = None) -> list[RunSummary]:
    """Precompile runs, newest first, with how many failures each recorded."""
    with index._read() as s:  # noqa: SLF001
        stmt = (select(PrecompileRunRow).order_by(PrecompileRunRow.started_at.desc(),
                                                  PrecompileRunRow.id).limit(limit))
        if matrix:
            stmt = stmt.where(PrecompileRunRow.matrix_name == matrix)
        runs = list(s.scalars(stmt))
        ids = [r.id for r in runs]
        failures = dict(s.execute(select(CellFailureRow.run_id, func.count())
                                  .where(CellFailureRow.run_id.in_(ids))
                                  .group_by(CellFailureRow.run_id)).all()) if ids else {}
        return [RunSummary(r.id, as_utc(r.started_at), as_utc(r.finished_at),  # type: ignore[arg-type]
                           r.host, r.fingerprint_key, r.matrix_name, r.cells_ok,
                           r.cells_failed, int(failures.get(r.id, 0))) for r in runs]


def get_run(index: Index, run_id: str) -> RunSummary:
    with index._read() as s:  # noqa: SLF001
        r = s.get(PrecompileRunRow, run_id)
        if r is None:
            raise NotFoundError(f"precompile run {run_id!r}: not in the index")
        n = s.scalar(select(func.count()).where(CellFailureRow.run_id == run_id)) or 0
        return RunSummary(r.id, as_utc(r.started_at), as_utc(r.finished_at),  # type: ignore[arg-type]
                          r.host, r.fingerprint_key, r.matrix_name, r.cells_ok,
                          r.cells_failed, int(n))


def list_failures(index: Index, *, run_id: str | None = None, matrix: MatrixVersion | None = None,
                  fingerprint_key: str | None = None, cell_glob: str | None = None,
                  current_only: bool = True, limit: int = 100) -> list[FailureRecord]:
    """Failed warm-ups, newest first. ``current_only``: only the latest failure of each cell x
    fingerprint that still has no entry (the cells coverage shows as failed)."""
    f = CellFailureRow
    stmt = (select(f, CellRow.id).join(CellRow, CellRow.key == f.cell_key)
            .order_by(f.created_at.desc(), f.id.desc()))
    if run_id:
        stmt = stmt.where(f.run_id == run_id)
    if matrix is not None:
        stmt = stmt.where(f.cell_key.in_(select(MatrixCellRow.cell_key)
                                         .where(MatrixCellRow.matrix_id == matrix.id)))
    if fingerprint_key:
        stmt = stmt.where(f.fingerprint_key.startswith(fingerprint_key, autoescape=True))
    if cell_glob:
        stmt = stmt.where(CellRow.id.like(glob_to_like(cell_glob), escape="\\"))
    if current_only:
        latest = select(func.max(f.id)).group_by(f.cell_key, f.fingerprint_key)
        has_entry = (select(EntryRow.entry_key).where(EntryRow.cell_key == f.cell_key,
                                                      EntryRow.fingerprint_key == f.fingerprint_key)
                     .exists())
        stmt = stmt.where(f.id.in_(latest), ~has_entry)
    out: list[FailureRecord] = []
    with index._read() as s:  # noqa: SLF001
        for row, cell_id in s.execute(stmt.limit(limit if not cell_glob else None)):
            if cell_glob and not fnmatch.fnmatchcase(cell_id, cell_glob):
                continue
            out.append(FailureRecord(cell_id, row.cell_key, row.fingerprint_key, row.run_id,
                                     row.exit_status, row.seconds, row.log_tail,
                                     as_utc(row.created_at)))  # type: ignore[arg-type]
            if len(out) >= limit:
                break
    return out


def list_restores(index: Index, *, limit: int = 50, host: str | None = None,
                  matrix: str | None = None) -> list[RestoreRecord]:
    """Restore reports, newest first."""
    r = RestoreReportRow
    stmt = select(r.id, r.created_at, r.host, r.fingerprint_key, r.matrix, r.cells_restored,
                  r.cells_missing, r.missing, r.files_fetched, r.files_skipped,
                  r.bytes_fetched, r.seconds, r.exit_code).order_by(r.id.desc()).limit(limit)
    if host:
        stmt = stmt.where(r.host == host)
    if matrix:
        stmt = stmt.where(r.matrix == matrix)
    with index._read() as s:  # noqa: SLF001
        return [RestoreRecord(row.id, as_utc(row.created_at), row.host,  # type: ignore[arg-type]
                              row.fingerprint_key, row.matrix, row.cells_restored,
                              row.cells_missing, tuple(str(c) for c in (row.missing or ())),
                              row.files_fetched, row.files_skipped, row.bytes_fetched,
                              row.seconds, row.exit_code) for row in s.execute(stmt)]


def restore_outcomes(index: Index,
                     bounds: Sequence[float] = DURATION_BUCKETS) -> list[RestoreOutcomeStats]:
    """Every restore report summed per outcome (hit, partial, miss, error), with cumulative
    duration buckets: one grouped query."""
    r = RestoreReportRow
    restored_any = case((r.cells_restored > 0, 1), else_=0)
    buckets = [func.sum(case((r.seconds <= b, 1), else_=0)) for b in bounds]
    stmt = (select(r.exit_code, restored_any, func.count(), func.sum(r.seconds),
                   func.sum(r.bytes_fetched), *buckets)
            .group_by(r.exit_code, restored_any))
    count = dict.fromkeys(OUTCOMES, 0)
    seconds = dict.fromkeys(OUTCOMES, 0.0)
    nbytes = dict.fromkeys(OUTCOMES, 0)
    under = {o: [0] * len(bounds) for o in OUTCOMES}
    with index._read() as s:  # noqa: SLF001
        for code, any_restored, n, secs, size, *counts in s.execute(stmt):
            o = restore_outcome(int(code), int(any_restored), 0)
            count[o] += int(n)
            seconds[o] += float(secs or 0.0)
            nbytes[o] += int(size or 0)
            under[o] = [x + int(c or 0) for x, c in zip(under[o], counts, strict=True)]
    return [RestoreOutcomeStats(o, count[o], seconds[o], nbytes[o], tuple(under[o]))
            for o in OUTCOMES]
