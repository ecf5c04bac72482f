"""What the dashboard's first screen leads with across every registered matrix."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any, TypedDict

from sqlalchemy import Connection, Select, func, select

from neffcache.documents import Doc, Document
from neffcache.errors import NotFoundError
from neffcache.fingerprint import Fingerprint, diff_fingerprints
from neffcache.index.api import Index
from neffcache.index.claims import held_leases
from neffcache.index.coverage_engine import find_fingerprints
from neffcache.index.ops_queries import lease_stats, reported_fingerprints
from neffcache.index.ops_values import CoverageColumn, FingerprintDiff
from neffcache.index.queries import has_entry
from neffcache.index.tables import cell_failures, cells, matrices
from neffcache.index.tables import matrix_cells as MC
from neffcache.index.values import InProgressDoc, LiveLease, as_utc, iso

# How recent a restore report must be for its fingerprint to count as the fleet's (the alert
# rules in tools/deploy/prometheus use the same 7 days).
FLEET_WINDOW = timedelta(days=7)


@dataclass(frozen=True, slots=True)
class FailedCell(Document):
    """The latest failed warm-up of a cell of a matrix's current version (no entry since)."""

    matrix: Annotated[str, Doc("A registered matrix whose current version has the cell.")]
    cell_id: str
    cell_key: str
    fingerprint_key: str
    run_id: str | None
    exit_status: int | None
    failed_at: datetime


class StaleCellDoc(InProgressDoc):
    """A cell whose lease is held past its expiry: its worker stopped renewing (died?)."""

    matrix: str


class UnbuiltDoc(TypedDict):
    matrix: str
    fingerprint: CoverageColumn
    last_restore_at: Annotated[str | None, Doc("The newest restore report naming it.")]


class AttentionDoc(TypedDict):
    """What is wrong across every registered matrix (/api/attention): the dashboard's first
    screen."""

    ok: Annotated[bool, Doc("Nothing below: no failed or stale cell, no unbuilt fingerprint.")]
    fleet_window_days: Annotated[int, Doc("How recent a restore report makes a fingerprint "
                                          "the fleet's.")]
    failed_cells: Annotated[int, Doc("Failed cells over the current versions of every "
                                     "registered matrix (a cell in two matrices counts twice).")]
    failed: Annotated[list[FailedCell], Doc("The latest of them, newest first (the log "
                                            "tails: /api/failures).")]
    stale_cells: Annotated[int, Doc("Leases held past their expiry, every matrix.")]
    stale: Annotated[list[StaleCellDoc], Doc("The oldest expiries first.")]
    unbuilt: Annotated[list[UnbuiltDoc], Doc(
        "Fingerprints restore reports of a matrix named within fleet_window_days that have no "
        "entry for any of its cells, most restored first.")]


@dataclass(frozen=True, slots=True)
class Attention:
    """What is wrong across every registered matrix; lists at most ``limit`` long."""

    failed_cells: int
    failed: tuple[FailedCell, ...]
    stale_cells: int
    stale: tuple[tuple[str, LiveLease], ...]  # (matrix, the lease held past its expiry)
    unbuilt: tuple[tuple[str, CoverageColumn, datetime | None], ...]  # matrix, column, last

    @property
    def ok(self) -> bool:
        return not (self.failed_cells or self.stale_cells or self.unbuilt)

    def to_json(self) -> dict[str, Any]:  # AttentionDoc
        return {
            "ok": self.ok, "fleet_window_days": FLEET_WINDOW.days,
            "failed_cells": self.failed_cells,
            "failed": [f.to_json() for f in self.failed],
            "stale_cells": self.stale_cells,
            "stale": [{**lease.to_json(), "matrix": m} for m, lease in self.stale],
            "unbuilt": [{"matrix": m, "fingerprint": f.to_json(), "last_restore_at": iso(t)}
                        for m, f, t in self.unbuilt]}


def attention(index: Index, limit: int = 20) -> Attention:
    """Failed and stale cells, and fingerprints the fleet restores with nothing built."""
    grids = index.coverage_summaries()
    failed_cells = sum(f.failed for g in grids for f in g.fingerprints)
    with index.connection() as conn:
        now = index.now(conn)
        failed = _failed(conn, [g.matrix.id for g in grids], limit) if failed_cells else []
        stale = held_leases(conn, now, limit, expired=True)
    recent = {(r.matrix, r.fingerprint_key): r.last_seen_at
              for r in reported_fingerprints(index)
              if r.last_seen_at is not None and r.last_seen_at >= now - FLEET_WINDOW}
    unbuilt = sorted(((g.matrix.name, f, recent[(g.matrix.name, f.key)])
                      for g in grids for f in g.fingerprints
                      if f.ready == 0 and (g.matrix.name, f.key) in recent),
                     key=lambda u: (-u[1].restores, u[0], u[1].key))
    return Attention(failed_cells, tuple(failed), sum(s.expired for s in lease_stats(index)),
                     tuple(stale), tuple(unbuilt[:limit]))


def _failed(conn: Connection, matrix_ids: list[int], limit: int) -> list[FailedCell]:
    """Each pair's latest failure without an entry, newest first: a top-N window first."""
    for window in (WINDOW * limit, None):
        found = [FailedCell(str(m), str(cid), str(ck), str(fk), run, status, as_utc(at))  # type: ignore[arg-type]
                 for m, cid, ck, fk, run, status, at
                 in conn.execute(_failed_statement(matrix_ids, limit, window))]
        if len(found) >= limit:
            break
    return found


WINDOW = 20  # _failed looks among the newest WINDOW x limit failures first


def _failed_statement(matrix_ids: list[int], limit: int, window: int | None) -> Select[Any]:
    """Without a window, one grouped pass; within one, an index probe per row."""
    f = cell_failures
    newer = cell_failures.alias("newer")
    latest = (f.c.id.in_(select(func.max(f.c.id)).group_by(f.c.cell_key, f.c.fingerprint_key))
              if window is None else
              ~select(newer.c.id).where(newer.c.cell_key == f.c.cell_key,
                                        newer.c.fingerprint_key == f.c.fingerprint_key,
                                        newer.c.id > f.c.id).exists())
    stmt = (select(matrices.c.name, cells.c.id, f.c.cell_key, f.c.fingerprint_key, f.c.run_id,
                   f.c.exit_status, f.c.created_at)
            .select_from(f.join(MC, MC.c.cell_key == f.c.cell_key)
                         .join(matrices, matrices.c.id == MC.c.matrix_id)
                         .join(cells, cells.c.key == f.c.cell_key))
            .where(MC.c.matrix_id.in_(matrix_ids), latest,
                   ~has_entry(f.c.cell_key, f.c.fingerprint_key))
            .order_by(f.c.created_at.desc(), f.c.id.desc(), matrices.c.name).limit(limit))
    if window is not None:
        recent = cell_failures.alias("recent")
        stmt = stmt.where(f.c.id.in_(select(recent.c.id).order_by(
            recent.c.created_at.desc(), recent.c.id.desc()).limit(window)))
    return stmt


def fingerprint_diff(index: Index, key: str, against: str) -> FingerprintDiff:
    """NotFoundError when ``key`` or ``against`` matches no fingerprint or several."""
    a, b = _one_fingerprint(index, key), _one_fingerprint(index, against)
    return FingerprintDiff(a.key, b.key, diff_fingerprints(a, b))


def _one_fingerprint(index: Index, prefix: str) -> Fingerprint:
    found = find_fingerprints(index, prefix.strip().lower())
    if len(found) != 1:
        raise NotFoundError(f"fingerprint {prefix}: {'no' if not found else len(found)} "
                            f"fingerprints in the index match that key")
    return next(iter(found.values()))
