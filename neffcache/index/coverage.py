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

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from neffcache.fingerprint import Fingerprint
from neffcache.index.claims import live_leases
from neffcache.index.models import CellFailureRow, EntryRow
from neffcache.index.queries import get_fingerprints
from neffcache.index.record import as_utc, chunks
from neffcache.index.values import (
    FAILED,
    IN_PROGRESS,
    MISSING,
    READY,
    CoverageFingerprint,
    CoverageReport,
    CoverageRow,
    LiveLease,
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


def fetch_coverage_facts(session: Session, cell_keys: Sequence[str],
                         now: datetime) -> CoverageFacts:
    facts = CoverageFacts()
    keys = sorted(set(cell_keys))
    for part in chunks(keys):
        entries = session.execute(
            select(EntryRow.cell_key, EntryRow.fingerprint_key, EntryRow.entry_key,
                   EntryRow.total_bytes).where(EntryRow.cell_key.in_(part)))
        for cell_key, fp_key, entry_key, size in entries:
            facts.entries[(cell_key, fp_key)] = (entry_key, size)
        latest = (select(func.max(CellFailureRow.id))
                  .where(CellFailureRow.cell_key.in_(part))
                  .group_by(CellFailureRow.cell_key, CellFailureRow.fingerprint_key))
        failures = session.execute(
            select(CellFailureRow.cell_key, CellFailureRow.fingerprint_key,
                   CellFailureRow.exit_status, CellFailureRow.log_tail,
                   CellFailureRow.created_at).where(CellFailureRow.id.in_(latest)))
        for cell_key, fp_key, status, tail, at in failures:
            facts.failures[(cell_key, fp_key)] = FailureFact(status, tail, as_utc(at))
    for lease in live_leases(session, keys, now):
        facts.leases[(lease.cell_key, lease.fingerprint_key)] = lease
    seen = sorted({fp for _, fp in facts.entries} | {fp for _, fp in facts.failures}
                  | {fp for _, fp in facts.leases})
    facts.fingerprints.update(get_fingerprints(session, seen))
    return facts


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
