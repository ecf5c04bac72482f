"""The claim queue of ``precompile --claim``: queue, claim, heartbeat, release, clean up."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, and_, case, delete, func, insert, or_, select, update
from sqlalchemy.orm import Session

from neffcache.fingerprint import Fingerprint
from neffcache.index import aggregates
from neffcache.index.coverage_engine.reads import live_lease
from neffcache.index.listing import EPOCH
from neffcache.index.queries import has_entry
from neffcache.index.record import insert_if_absent, save_fingerprints_and_cells
from neffcache.index.tables import cell_claims, cell_failures, cells
from neffcache.index.values import ClaimResult, Lease, LiveLease
from neffcache.matrix import Cell

if TYPE_CHECKING:
    from sqlalchemy import Connection

# ``now`` always comes from one clock (the database's, or a test's), never a worker's: hosts
# with skewed clocks cannot steal or keep leases.
C = cell_claims.c


def _free(now: datetime) -> ColumnElement[bool]:
    """No live lease: never claimed, released, or its holder stopped renewing it."""
    return or_(C.holder.is_(None), C.expires_at <= now)


def queue_cells(session: Session, matrix_name: str, cells: Sequence[Cell],
                fingerprint: Fingerprint, now: datetime) -> None:
    save_fingerprints_and_cells(session, [fingerprint], cells, now)
    insert_if_absent(session, cell_claims, [
        {"cell_key": c.key, "fingerprint_key": fingerprint.key, "matrix_name": matrix_name,
         "position": i, "attempts": 0, "queued_at": now} for i, c in enumerate(cells)])


def remove_undeclared(session: Session, matrix_name: str, declared_keys: Sequence[str],
                      now: datetime) -> int:
    """Delete the matrix's queue rows for cells it no longer declares, unless leased."""
    result = session.execute(delete(cell_claims).where(
        C.matrix_name == matrix_name, _free(now), C.cell_key.not_in(list(declared_keys))))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def fail_exhausted(session: Session, cell_keys: Sequence[str], fingerprint_key: str,
                   max_attempts: int, now: datetime) -> int:
    """Leases expired on a cell's last attempt (dead workers) become failures; how many."""
    rows = session.execute(select(C.cell_key, C.host, C.expires_at, C.attempts).where(
        C.fingerprint_key == fingerprint_key, C.cell_key.in_(list(cell_keys)),
        C.holder.is_not(None), C.expires_at <= now, C.attempts >= max_attempts)).all()
    for cell_key, host, expires, attempts in rows:
        aggregates.failure_adding(session, cell_key, fingerprint_key)
        session.execute(insert(cell_failures).values(
            run_id=None, cell_key=cell_key, fingerprint_key=fingerprint_key,
            exit_status=None, seconds=0.0, created_at=now,
            log_tail=(f"neffcache: the lease of {host} expired at {expires} without a result "
                      f"(worker died?); attempt {attempts} of {max_attempts}, not retried")))
        session.execute(update(cell_claims)
                        .where(C.cell_key == cell_key, C.fingerprint_key == fingerprint_key)
                        .values(holder=None, host=None, expires_at=None))
    return len(rows)


def claim_next(session: Session, cell_keys: Sequence[str], fingerprint_key: str, *,
               holder: str, host: str, lease_seconds: float, max_attempts: int,
               now: datetime) -> ClaimResult:
    """The first claimable cell (matrix order, fewest attempts first), in one statement."""
    keys = list(cell_keys)
    expires = now + timedelta(seconds=lease_seconds)
    pick = (select(C.cell_key)
            .where(C.fingerprint_key == fingerprint_key, C.cell_key.in_(keys), _free(now),
                   C.attempts < max_attempts, ~has_entry(C.cell_key, C.fingerprint_key))
            .order_by(C.attempts, C.position, C.cell_key).limit(1)
            .with_for_update(skip_locked=True).scalar_subquery())
    stmt = (update(cell_claims).where(C.fingerprint_key == fingerprint_key, C.cell_key == pick)
            .values(holder=holder, host=host, claimed_at=now, heartbeat_at=now,
                    expires_at=expires, attempts=C.attempts + 1)
            .returning(C.cell_key, C.attempts))
    row = session.execute(stmt).first()
    if row is not None:
        return ClaimResult(Lease(row[0], fingerprint_key, holder, host, int(row[1]), now,
                                 expires), 0)
    live = session.scalar(select(func.count()).select_from(cell_claims).where(
        C.fingerprint_key == fingerprint_key, C.cell_key.in_(keys), C.holder.is_not(None),
        C.expires_at > now)) or 0
    return ClaimResult(None, int(live))


def _mine(lease: Lease) -> ColumnElement[bool]:
    return and_(C.cell_key == lease.cell_key, C.fingerprint_key == lease.fingerprint_key,
                C.holder == lease.holder)


def renew(session: Session, lease: Lease, lease_seconds: float, now: datetime) -> bool:
    """Heartbeat; False if the lease is no longer ours."""
    result = session.execute(update(cell_claims).where(_mine(lease)).values(
        heartbeat_at=now, expires_at=now + timedelta(seconds=lease_seconds)))
    return bool(result.rowcount)  # type: ignore[attr-defined]


def release_done(session: Session, lease: Lease) -> None:
    session.execute(delete(cell_claims).where(C.cell_key == lease.cell_key,
                                              C.fingerprint_key == lease.fingerprint_key))


def release(session: Session, lease: Lease, *, give_back: bool = False) -> bool:
    """Drop the lease: the cell is claimable again while it has attempts left (``give_back``:
    the runner was stopped, the attempt is not spent). False if the lease was no longer ours."""
    values: dict[str, Any] = {"holder": None, "host": None, "expires_at": None}
    if give_back:
        values["attempts"] = case((C.attempts > 0, C.attempts - 1), else_=0)
    result = session.execute(update(cell_claims).where(_mine(lease)).values(**values))
    return bool(result.rowcount)  # type: ignore[attr-defined]


def held_leases(conn: Session | Connection, now: datetime, limit: int, *,
                expired: bool = False) -> list[tuple[str, LiveLease]]:
    """(matrix, lease) of live leases by claim, or with ``expired`` the expired ones by expiry."""
    held = and_(C.expires_at > EPOCH, C.expires_at <= now) if expired else C.expires_at > now
    rows = conn.execute(select(
        C.matrix_name, C.cell_key, C.fingerprint_key, C.host, C.claimed_at, C.heartbeat_at,
        C.expires_at, C.attempts, cells.c.id).join(cells, cells.c.key == C.cell_key)
        .where(C.holder.is_not(None), held)
        .order_by(C.expires_at if expired else C.claimed_at).limit(limit))
    return [(str(r[0]), replace(live_lease(r[1:8]), cell_id=str(r[8]))) for r in rows]
