"""Coverage: every requested cell x every relevant fingerprint, with a status.

``fetch_coverage_facts`` reads what the index knows about a set of cells in a few batched
queries (by cell key, never one query per cell); ``build_coverage`` is pure and turns those
facts into a report (``now``, from the database clock, decides which leases are live).
Relevant fingerprints are the given ones (this host's) plus every fingerprint with an entry,
a failure or a live lease for any of the cells.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select

from neffcache.fingerprint import Fingerprint
from neffcache.index.queries import get_fingerprints, key_batches, key_in
from neffcache.index.tables import cell_claims, cell_failures, entries
from neffcache.index.values import (
    FAILED,
    IN_PROGRESS,
    MISSING,
    READY,
    CoverageFingerprint,
    CoverageReport,
    CoverageRow,
    LiveLease,
    as_utc,
)
from neffcache.matrix import Cell


@dataclass(frozen=True, slots=True)
class FailureFact:
    exit_status: int | None
    log_tail: str
    failed_at: datetime | None


@dataclass(frozen=True, slots=True)
class CoverageFacts:
    """What the index holds for some cells, keyed by (cell key, fingerprint key)."""

    entries: dict[tuple[str, str], tuple[str, int]] = field(default_factory=dict)
    failures: dict[tuple[str, str], FailureFact] = field(default_factory=dict)
    leases: dict[tuple[str, str], LiveLease] = field(default_factory=dict)
    fingerprints: dict[str, Fingerprint] = field(default_factory=dict)


def fetch_coverage_facts(conn: Any, cell_keys: Sequence[str],
                         now: datetime) -> CoverageFacts:
    """What the index holds for these cells (``conn``: a Connection or a Session)."""
    facts = CoverageFacts()
    keys = sorted(set(cell_keys))
    e, f = entries, cell_failures
    for part in key_batches(conn, keys):
        rows = conn.execute(select(e.c.cell_key, e.c.fingerprint_key, e.c.entry_key,
                                   e.c.total_bytes).where(key_in(conn, e.c.cell_key, part)))
        facts.entries.update(((cell_key, fp_key), (entry_key, size))
                             for cell_key, fp_key, entry_key, size in rows.all())
        latest = (select(func.max(f.c.id)).where(key_in(conn, f.c.cell_key, part))
                  .group_by(f.c.cell_key, f.c.fingerprint_key))
        failures = conn.execute(
            select(f.c.cell_key, f.c.fingerprint_key, f.c.exit_status, f.c.log_tail,
                   f.c.created_at).where(f.c.id.in_(latest)))
        for cell_key, fp_key, status, tail, at in failures.all():
            facts.failures[(cell_key, fp_key)] = FailureFact(status, tail, as_utc(at))
    for lease in live_leases(conn, keys, now):
        facts.leases[(lease.cell_key, lease.fingerprint_key)] = lease
    seen = sorted({fp for _, fp in facts.entries} | {fp for _, fp in facts.failures}
                  | {fp for _, fp in facts.leases})
    facts.fingerprints.update(get_fingerprints(conn, seen))
    return facts


def live_leases(conn: Any, cell_keys: Sequence[str], now: datetime) -> list[LiveLease]:
    """Live leases on these cells (batched by cell key: the primary key's first column)."""
    c = cell_claims
    out: list[LiveLease] = []
    for part in key_batches(conn, sorted(set(cell_keys))):
        rows = conn.execute(select(
            c.c.cell_key, c.c.fingerprint_key, c.c.host, c.c.claimed_at, c.c.heartbeat_at,
            c.c.expires_at, c.c.attempts).where(key_in(conn, c.c.cell_key, part),
                                                c.c.holder.is_not(None), c.c.expires_at > now))
        out.extend(live_lease(r) for r in rows.all())
    return out


def live_lease(r: Sequence[object]) -> LiveLease:
    """A LiveLease from (cell key, fingerprint key, host, claimed, heartbeat, expires,
    attempts)."""
    return LiveLease(str(r[0]), str(r[1]), str(r[2] or "?"), as_utc(r[3]),  # type: ignore
                     as_utc(r[4]), as_utc(r[5]), int(r[6]))  # type: ignore[call-overload]


def build_coverage(cells: Sequence[Cell], given: Sequence[Fingerprint],
                   facts: CoverageFacts) -> CoverageReport:
    """Pure: the report for ``cells`` under the given fingerprints and those in ``facts``.
    Fingerprint order: the given ones first (in order), then the others by key."""
    cell_ids = _cell_ids_and_keys(cells)
    given_keys = list(dict.fromkeys(fp.key for fp in given))
    fps: dict[str, Fingerprint] = {fp.key: fp for fp in given}
    for key, fp in facts.fingerprints.items():
        fps.setdefault(key, fp)
    order = given_keys + sorted(k for k in fps if k not in set(given_keys))
    rows: list[CoverageRow] = []
    counts = {k: {READY: 0, IN_PROGRESS: 0, FAILED: 0, MISSING: 0} for k in order}
    for cell_id, cell_key in cell_ids:
        for fp_key in order:
            row = _row(cell_id, cell_key, fp_key, facts)
            counts[fp_key][row.status] += 1
            rows.append(row)
    columns = tuple(CoverageFingerprint(
        key=k, backend=fps[k].backend, fields=fps[k].fields, here=k in given_keys,
        ready=counts[k][READY], failed=counts[k][FAILED], missing=counts[k][MISSING],
        in_progress=counts[k][IN_PROGRESS])
        for k in order)
    return CoverageReport(cells=cell_ids, fingerprints=columns, rows=tuple(rows))


def _cell_ids_and_keys(cells: Sequence[Cell]) -> tuple[tuple[str, str], ...]:
    """(id, key) per distinct cell, in order; a key is a digest, so compute it once."""
    out: dict[str, str] = {}
    for c in cells:
        out.setdefault(c.key, c.id)
    return tuple((cell_id, key) for key, cell_id in out.items())


def _row(cell_id: str, cell_key: str, fp_key: str, facts: CoverageFacts) -> CoverageRow:
    pair = (cell_key, fp_key)
    entry = facts.entries.get(pair)
    if entry is not None:
        return CoverageRow(cell_id, cell_key, fp_key, READY, entry_key=entry[0],
                           total_bytes=entry[1])
    lease = facts.leases.get(pair)
    if lease is not None:
        return CoverageRow(cell_id, cell_key, fp_key, IN_PROGRESS, host=lease.host,
                           since=lease.claimed_at, lease_expires_at=lease.expires_at)
    failure = facts.failures.get(pair)
    if failure is not None:
        return CoverageRow(cell_id, cell_key, fp_key, FAILED, exit_status=failure.exit_status,
                           log_tail=failure.log_tail, failed_at=failure.failed_at)
    return CoverageRow(cell_id, cell_key, fp_key, MISSING)


def only_fingerprints(report: CoverageReport, keys: Sequence[str]) -> CoverageReport:
    """Pure: the report with only these fingerprint columns (in this order; keys the report
    lacks are left out)."""
    index = {fp.key: j for j, fp in enumerate(report.fingerprints)}
    chosen = [index[k] for k in dict.fromkeys(keys) if k in index]
    n = len(report.fingerprints)
    rows = tuple(report.rows[i * n + j] for i in range(len(report.cells)) for j in chosen)
    return CoverageReport(cells=report.cells,
                          fingerprints=tuple(report.fingerprints[j] for j in chosen), rows=rows)
