"""Read queries for the ops surface (HTTP API, dashboard, metrics): a few set-based queries each."""

from __future__ import annotations

import fnmatch
from collections import Counter
from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime, timedelta, timezone
from itertools import accumulate, islice
from typing import Any

from sqlalchemy import Select, and_, func, or_, select
from sqlalchemy.orm import Session

from neffcache.errors import NotFoundError
from neffcache.index.api import Index
from neffcache.index.listing import (  # EPOCH: below every lease expiry, a range start
    EPOCH,
    ID_CURSOR_PATTERN,
    NAME_CURSOR_PATTERN,
    keyset_cursor,
    parse_cursor,
)
from neffcache.index.ops_values import (
    DURATION_BUCKETS,
    NO_ENTRY,
    OTHER_FINGERPRINT,
    OUTCOMES,
    FailureRecord,
    FingerprintInfo,
    FingerprintRunTime,
    FingerprintStats,
    IndexTotals,
    LeaseStats,
    MatrixRunTime,
    MatrixVersion,
    ReportedFingerprint,
    RestoreOutcomeStats,
    RestorePoint,
    RestoreRecord,
    RunSummary,
    build_timeline,
    miss_kind,
    restore_outcome,
    sdk_version,
)
from neffcache.index.queries import glob_clause, has_entry, key_prefix_clause
from neffcache.index.record import as_utc
from neffcache.index.tables import (
    cell_claims,
    cell_failures,
    cells,
    fingerprint_counts,
    fingerprints,
    matrices,
    matrix_cells,
    precompile_runs,
    report_fingerprints,
    restore_counts,
    restore_reports,
)


def fingerprint_stats(index: Index) -> list[FingerprintStats]:
    """Every fingerprint with its entry count and bytes: by first appearance, then backend,
    SDK version, key."""
    fp = fingerprints.c
    with index.read_session() as s:
        totals = {k: (int(n), int(b)) for k, n, b in s.execute(select(fingerprint_counts))}
        rows = s.execute(select(fp.key, fp.backend, fp.fields, fp.first_seen_at)).all()
    infos = [FingerprintInfo(key, backend, sdk_version(backend, fields),
                             tuple(sorted((str(k), str(v)) for k, v in fields.items())),
                             as_utc(first_seen)) for key, backend, fields, first_seen in rows]
    infos.sort(key=lambda f: (f.first_seen_at is None, f.first_seen_at, f.backend,
                              f.sdk_version, f.key))
    return [FingerprintStats(i, *totals.get(i.key, (0, 0))) for i in infos]


def index_totals(index: Index) -> IndexTotals:
    fc = fingerprint_counts.c
    totals = (func.sum(fc.entries), func.sum(fc.total_bytes), func.count(fingerprints.c.key),
              func.count(cells.c.key), func.count(matrices.c.name.distinct()),
              func.count(precompile_runs.c.id), func.sum(restore_counts.c.restores))
    with index.read_session() as s:  # one statement: a scalar subquery per total
        row = s.execute(select(*(select(t).scalar_subquery() for t in totals))).one()
    return IndexTotals(*(int(v or 0) for v in row))


def list_runs(index: Index, limit: int = 50, matrix: str | None = None,
              after: str | None = None) -> list[RunSummary]:
    """Precompile runs, newest first, with how many failures each recorded; ``after``: a
    ``run_cursor``."""
    r = precompile_runs.c
    stmt = select(precompile_runs).order_by(r.started_at.desc(), r.id).limit(limit)
    if matrix:
        stmt = stmt.where(r.matrix_name == matrix)
    if after:
        at, key = parse_cursor(after, NAME_CURSOR_PATTERN)
        stmt = stmt.where(or_(r.started_at < at, and_(r.started_at == at, r.id > key)))
    with index.read_session() as s:
        return _run_summaries(s, stmt)


def _run_summaries(s: Session, stmt: Select[Any]) -> list[RunSummary]:
    runs = s.execute(stmt).all()
    ids = [r.id for r in runs]
    f = cell_failures.c
    counted = select(f.run_id, func.count()).where(f.run_id.in_(ids)).group_by(f.run_id)
    failures: dict[str, int] = dict(s.execute(counted).all()) if ids else {}
    return [RunSummary(r.id, as_utc(r.started_at), as_utc(r.finished_at),  # type: ignore[arg-type]
                       r.host, r.fingerprint_key, r.matrix_name, r.cells_ok,
                       r.cells_failed, int(failures.get(r.id, 0)), r.cells_cancelled)
            for r in runs]


def run_cursor(run: RunSummary) -> str:
    """The ``after`` that continues ``list_runs`` after ``run``."""
    return keyset_cursor(run.started_at, run.id)


def failure_cursor(failure: FailureRecord) -> str:
    """The ``after`` that continues ``list_failures`` after ``failure``."""
    assert failure.id is not None
    return keyset_cursor(failure.failed_at, failure.id)


def restore_cursor(restore: RestoreRecord) -> str:
    """The ``after`` that continues ``list_restores`` after ``restore``."""
    return keyset_cursor(restore.created_at, restore.id)


def _older(created_at: Any, row_id: Any, after: str) -> Any:
    """Rows after the ``after`` cursor of a listing newest first, then by id descending."""
    at, key = parse_cursor(after, ID_CURSOR_PATTERN)
    return or_(created_at < at, and_(created_at == at, row_id < int(key)))


def get_run(index: Index, run_id: str) -> RunSummary:
    with index.read_session() as s:
        found = _run_summaries(s, select(precompile_runs)
                              .where(precompile_runs.c.id == run_id))
    if not found:
        raise NotFoundError(f"precompile run {run_id!r}: not in the index")
    return found[0]


def list_failures(index: Index, *, run_id: str | None = None, matrix: MatrixVersion | None = None,
                  fingerprint_key: str | None = None, cell_glob: str | None = None,
                  current_only: bool = True, limit: int = 100,
                  after: str | None = None) -> list[FailureRecord]:
    """Failed warm-ups, newest first. ``current_only``: each pair's latest failure without an
    entry (what coverage shows as failed); ``after``: a ``failure_cursor``."""
    f = cell_failures.c
    stmt = (select(cell_failures, cells.c.id.label("cell_id"))
            .join(cells, cells.c.key == f.cell_key)
            .order_by(f.created_at.desc(), f.id.desc()))
    if run_id:
        stmt = stmt.where(f.run_id == run_id)
    if matrix is not None:
        mc = matrix_cells.c
        stmt = stmt.where(f.cell_key.in_(select(mc.cell_key).where(mc.matrix_id == matrix.id)))
    if fingerprint_key:
        stmt = stmt.where(key_prefix_clause(f.fingerprint_key, fingerprint_key))
    if current_only:
        latest = select(func.max(f.id)).group_by(f.cell_key, f.fingerprint_key)
        stmt = stmt.where(f.id.in_(latest), ~has_entry(f.cell_key, f.fingerprint_key))
    if after:
        stmt = stmt.where(_older(f.created_at, f.id, after))
    with index.read_session() as s:
        exact = True
        if cell_glob:
            clause, exact = glob_clause(s.get_bind().dialect.name, cells.c.id, cell_glob)
            stmt = stmt.where(clause)
        rows = (row for row in s.execute(stmt.limit(limit if exact else None))
                if exact or fnmatch.fnmatchcase(row.cell_id, cell_glob or "*"))
        return [FailureRecord(row.cell_id, row.cell_key, row.fingerprint_key, row.run_id,
                              row.exit_status, row.seconds, row.log_tail,
                              as_utc(row.created_at), row.id)  # type: ignore[arg-type]
                for row in islice(rows, limit)]


def list_restores(index: Index, *, limit: int = 50, host: str | None = None,
                  matrix: str | None = None, after: str | None = None) -> list[RestoreRecord]:
    """Restore reports, newest first; ``after``: a ``restore_cursor``."""
    r = restore_reports.c
    stmt = (select(*(r[f.name] for f in fields(RestoreRecord) if f.init))  # its columns
            .order_by(r.created_at.desc(), r.id.desc()).limit(limit))
    if host:
        stmt = stmt.where(r.host == host)
    if matrix:
        stmt = stmt.where(r.matrix == matrix)
    if after:
        stmt = stmt.where(_older(r.created_at, r.id, after))
    with index.read_session() as s:
        return [RestoreRecord(**{**row._mapping, "created_at": as_utc(row.created_at),
                                 "missing": tuple(str(c) for c in (row.missing or ()))})
                for row in s.execute(stmt)]


def restore_outcomes(index: Index,
                     bounds: Sequence[float] = DURATION_BUCKETS) -> list[RestoreOutcomeStats]:
    """Every restore report summed per outcome, with cumulative duration buckets and misses
    split by kind."""
    if tuple(bounds) != DURATION_BUCKETS:
        raise ValueError("restore_outcomes: the aggregates are kept for DURATION_BUCKETS")
    c = restore_counts.c
    stmt = (select(c.exit_code, c.restored_any, c.bucket, func.sum(c.restores),
                   func.sum(c.seconds_sum), func.sum(c.bytes_sum))
            .group_by(c.exit_code, c.restored_any, c.bucket))
    seconds = dict.fromkeys(OUTCOMES, 0.0)
    sums: Counter[tuple[str, str | int | None]] = Counter()  # by (outcome, what)
    with index.read_session() as s:
        for code, any_restored, bucket, n, secs, size in s.execute(stmt):
            o, n = restore_outcome(int(code), int(any_restored), 0), int(n or 0)
            seconds[o] += float(secs or 0.0)
            sums.update({(o, "count"): n, (o, "bytes"): int(size or 0),
                         (o, min(int(bucket), len(bounds))): n, (o, miss_kind(int(code))): n})
    return [RestoreOutcomeStats(o, sums[o, "count"], seconds[o], sums[o, "bytes"],
                                tuple(accumulate(sums[o, b] for b in range(len(bounds)))),
                                sums[o, NO_ENTRY], sums[o, OTHER_FINGERPRINT])
            for o in OUTCOMES]


def restore_timeline(index: Index, *, days: int = 14, step: str = "day",
                     now: datetime | None = None) -> tuple[RestorePoint, ...]:
    """Restores per ``step`` (hour or day, UTC) over the last ``days`` days, by outcome."""
    hourly = step == "hour"
    width, n = (timedelta(hours=1), 24 * days) if hourly else (timedelta(days=1), days)

    def step_of(h: datetime) -> datetime:
        return h if hourly else h.replace(hour=0)

    now = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    first = step_of(now.replace(minute=0, second=0, microsecond=0)) - width * (n - 1)
    starts = [first + width * i for i in range(n)]
    c = restore_counts.c
    with index.read_session() as s:
        rows = [(as_utc(p), code, any_restored, n) for p, code, any_restored, n in s.execute(
            select(c.period_start, c.exit_code, c.restored_any, func.sum(c.restores))
            .where(c.period_start >= first)
            .group_by(c.period_start, c.exit_code, c.restored_any))]
    return build_timeline(rows, starts, step_of)  # type: ignore[arg-type]


RUN_WINDOW = timedelta(days=7)  # how far back the last precompile run of a matrix is looked for


def lease_stats(index: Index) -> list[LeaseStats]:
    """Held leases per (matrix, fingerprint), live and expired: by a range of the expires_at
    index, so the cost follows the busy and dead workers, not the queue's length."""
    c = cell_claims.c
    with index.read_session() as s:
        now = index.now(s)
        counts = Counter((str(m), str(fp), as_utc(expires) <= now)  # type: ignore[operator]
                         for m, fp, expires in s.execute(
                             select(c.matrix_name, c.fingerprint_key, c.expires_at)
                             .where(c.expires_at > EPOCH, c.holder.is_not(None))))
    return [LeaseStats(m, fp, counts[m, fp, False], counts[m, fp, True])
            for m, fp in sorted({(m, fp) for m, fp, _ in counts})]


def last_precompile_runs(index: Index, window: timedelta = RUN_WINDOW) -> list[MatrixRunTime]:
    """When a run of each registered matrix last started within ``window`` (None: not
    that recently)."""
    r = precompile_runs.c
    with index.read_session() as s:
        since = index.now(s) - window
        latest = {str(m): as_utc(t) for m, t in s.execute(
            select(r.matrix_name, func.max(r.started_at)).where(r.started_at >= since)
            .group_by(r.matrix_name))}
        names = set(s.scalars(select(matrices.c.name).distinct())) | set(latest)
    return [MatrixRunTime(m, latest.get(m)) for m in sorted(names)]


def last_fingerprint_runs(index: Index,
                          window: timedelta = RUN_WINDOW) -> list[FingerprintRunTime]:
    """When a run of each (matrix, fingerprint) last started within ``window``."""
    r = precompile_runs.c
    with index.read_session() as s:
        since = index.now(s) - window
        rows = s.execute(select(r.matrix_name, r.fingerprint_key, func.max(r.started_at))
                         .where(r.started_at >= since)
                         .group_by(r.matrix_name, r.fingerprint_key)
                         .order_by(r.matrix_name, r.fingerprint_key)).all()
    return [FingerprintRunTime(str(m), str(fp), as_utc(t)) for m, fp, t in rows]  # type: ignore[arg-type]


def reported_fingerprints(index: Index) -> list[ReportedFingerprint]:
    """The fingerprints restore reports of each registered matrix named (the aggregate)."""
    rf = report_fingerprints
    with index.connection() as conn:
        rows = conn.execute(select(rf.c.matrix, rf.c.fingerprint_key, rf.c.reports,
                                   rf.c.last_seen_at)
                            .where(rf.c.matrix.in_(select(matrices.c.name).distinct()))
                            .order_by(rf.c.matrix, rf.c.fingerprint_key)).all()
    return [ReportedFingerprint(str(m), str(fp), int(n), as_utc(t)) for m, fp, n, t in rows]
