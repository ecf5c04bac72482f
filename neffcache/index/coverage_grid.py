"""Coverage, the one engine: every cell x every relevant fingerprint with its status, and the
counts per fingerprint. ``neffcache coverage``, /api/coverage (and the dashboard's grid), the
dashboard's summary and /metrics all get their statuses and counts from here, and from the
modules it builds on (their names re-exported here):

- ``coverage_reads``: the rule ``status_of`` (ready: an entry; in_progress: no entry, a live
  lease; failed: no entry, no lease, a recorded failure; missing: none of these), and the
  reads over a Reader: ``read_facts`` (cells by key, or a registered matrix version) in a
  fixed number of statements, never one per cell; ``now`` (the database clock) decides
  which leases are live. ``fetch_coverage_facts``/``fetch_matrix_facts`` run them through
  SQLAlchemy (``coverage_statements`` builds each statement once, for SQLAlchemy and for
  the bare driver ``neffcache coverage --json`` uses).
- ``coverage_table`` (pure) applies the rule to every cell x fingerprint and counts: the
  one place statuses and counts come from. ``build_coverage`` adds each row's details (the
  CLI's report); ``grid_page`` pages it (the API's grid).
- ``matrix_coverage`` is a registered matrix's report, columns worst first (restored with
  nothing built, then most failed, most missing), each with what tells it apart from its
  neighbours (``ops_values.distinguish``), with a page of rows (and how their entries were
  verified): the API's grid. ``coverage_summaries`` counts every registered
  matrix from the aggregates (which count by the same rule) and moves leased cells to
  in_progress by ``status_of``: the dashboard's summary and /metrics, a few queries at any
  index size, columns in the same order.

Relevant fingerprints are the given ones (this host's) plus every fingerprint with an entry,
a failure or a live lease for any of the cells, plus (for a registered matrix in the API) the
fingerprints restore reports of that matrix named. Core only: no ORM import.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, text

from neffcache.fingerprint import Fingerprint
from neffcache.index import coverage_statements
from neffcache.index.coverage_reads import (  # noqa: F401  (re-exported: the rule, the facts)
    CoverageFacts,
    FailureFact,
    Pair,
    cell_ids_and_keys,
    choose_version,
    coverage_row,
    live_lease,
    read_facts,
    scope_of_keys,
    scope_of_matrix,
    status_of,
)
from neffcache.index.coverage_reads import read_fingerprints as _read_fingerprints
from neffcache.index.coverage_table import (  # noqa: F401  (re-exported)
    CoverageTable,
    build_coverage,
    coverage_table,
    only_fingerprints,
)
from neffcache.index.matrix_reads import (
    cell_refs_in,
    current_versions_in,
    versions_in,
)
from neffcache.index.ops_values import (
    CoverageGrid,
    FingerprintCounts,
    GridRow,
    MatrixVersion,
    by_severity,
    distinguish,
    fingerprint_target,
    known_versions,
    sdk_version,
    severity,
)
from neffcache.index.queries import dialect_name, key_batches, key_in
from neffcache.index.sqla_reader import SqlaReader
from neffcache.index.tables import (
    cell_claims,
    cell_failures,
    coverage_counts,
    entries,
    matrix_cells,
    report_fingerprints,
)
from neffcache.index.values import (
    FAILED,
    IN_PROGRESS,
    MISSING,
    READY,
)

if TYPE_CHECKING:
    from sqlalchemy import Connection

def fetch_coverage_facts(conn: Connection, cell_keys: Sequence[str], now: datetime, *,
                         details: bool = True, named: Sequence[str] = ()) -> CoverageFacts:
    """What the index holds for these cells (``coverage_reads.read_facts`` through
    SQLAlchemy): one statement each for entries, failures and live leases, then the
    fingerprints (with ``named`` ones: columns even when nothing was built for them)."""
    return read_facts(SqlaReader(conn), scope_of_keys(sorted(set(cell_keys))), now,
                      details=details, named=named)


def fetch_matrix_facts(conn: Connection, matrix_id: int, now: datetime, *,
                       details: bool = False, named: Sequence[str] = ()) -> CoverageFacts:
    """What the index holds for the cells of a registered matrix version: one query each for
    entries, failures and live leases, whatever the cell count, then the fingerprints (with
    ``named`` ones)."""
    if dialect_name(conn) == "postgresql":
        # Without statistics the planner guesses thousands of entries per cell, and at that
        # cost it JIT-compiles the probe: ~0.1 s spent before a 20,000-row read (this read
        # transaction only).
        conn.execute(text("SET LOCAL jit = off"))
    return read_facts(SqlaReader(conn), scope_of_matrix(matrix_id), now, details=details,
                      named=named)


def matrix_entry_pairs(conn: Connection, matrix_id: int) -> Any:
    """(cell key, fingerprint key) of every entry for a cell of a matrix version (on
    Postgres a LATERAL probe per cell: ``coverage_statements._entries``)."""
    stmt = coverage_statements.build("cov_entries", dialect_name(conn),
                                     (("details", False), ("scope", "matrix")))
    return stmt.params(matrix_id=matrix_id)


def verified_pairs(conn: Any, cell_keys: Sequence[str]) -> dict[Pair, str]:
    """How each entry of these cells (a page of a grid) was verified, where it was: the
    first call after a restore (``neffcache warm``, ``precompile --verify``) was a hit (warm),
    compiled, or failed. Served by the partial index on verified entries (migration 0007)."""
    e = entries
    out: dict[Pair, str] = {}
    for part in key_batches(conn, sorted(set(cell_keys))):
        out.update(((ck, fk), str(v)) for ck, fk, v in conn.execute(
            select(e.c.cell_key, e.c.fingerprint_key, e.c.verified_status)
            .where(key_in(conn, e.c.cell_key, part), e.c.verified_status.is_not(None))))
    return out


def read_fingerprints(conn: Connection, keys: Sequence[str], facts: CoverageFacts) -> None:
    """The fingerprints of ``keys`` the index knows, into ``facts``."""
    _read_fingerprints(SqlaReader(conn), keys, facts)


def grid_page(matrix: MatrixVersion, table: CoverageTable, *, pattern: str | None = None,
              offset: int = 0, limit: int | None = None,
              restores: Mapping[str, int] | None = None,
              verified: Mapping[Pair, str] | None = None) -> CoverageGrid:
    """Pure: a coverage table (of the cells matching ``pattern``) as the API's grid: its
    columns' counts over every cell (with the restore reports that named each, from
    ``restores``), and the statuses of cells ``offset``..``offset + limit`` (with how their
    ready entries were verified, from ``verified``)."""
    total = len(table.cells)
    stop = total if limit is None else offset + limit
    keys = [c.key for c in table.columns]
    verified = verified or {}
    rows = tuple(GridRow(cell_id, cell_key, statuses, tuple(
        (j, verified[(cell_key, k)]) for j, k in enumerate(keys) if (cell_key, k) in verified))
        for (cell_id, cell_key), statuses
        in zip(table.cells[offset:stop], table.statuses[offset:stop], strict=True))
    fps = tuple(counts_of(c.key, c.backend, dict(c.fields), (c.ready, c.failed, c.missing,
                                                              c.in_progress),
                          (restores or {}).get(c.key, 0)) for c in table.columns)
    return CoverageGrid(matrix, pattern, total, offset, total if limit is None else limit,
                        fps, rows)


def counts_of(key: str, backend: str, fields: Mapping[str, Any],
              counts: tuple[int, int, int, int], restores: int) -> FingerprintCounts:
    """Pure: a column's counts (ready, failed, missing, in progress) with what its card
    names: SDK version, target, the versions it knows, the restores that named it."""
    ready, failed, missing, in_progress = counts
    return FingerprintCounts(key, backend, sdk_version(backend, fields), ready, failed,
                             missing, in_progress, target=fingerprint_target(backend, fields),
                             known=known_versions(backend, fields), restores=restores)


# --- registered matrices: the API's grid, the summaries ------------------------------------

def matrix_coverage(conn: Connection, now: datetime, name: str, *,
                    version: int | None = None, pattern: str | None = None, offset: int = 0,
                    limit: int | None = None) -> CoverageGrid:
    """A registered matrix's coverage (current version, or ``version``): its cells matching
    the glob ``pattern`` x every fingerprint with an entry, a failure or a live lease for any
    of its cells, or that a restore report of this matrix named (the fleet's fingerprints,
    even at 0 %), worst first (``ops_values.severity``); counts over every matching cell, rows for
    ``offset``..``offset + limit``. A fixed number of queries (``Index.matrix_coverage``)."""
    chosen = choose_version(versions_in(conn, name, counts=False), name, version)
    refs = cell_refs_in(conn, chosen.id)
    rf = report_fingerprints
    restores = {str(k): int(n) for k, n in conn.execute(
        select(rf.c.fingerprint_key, rf.c.reports).where(rf.c.matrix == name))}
    facts = fetch_matrix_facts(conn, chosen.id, now, named=list(restores))
    chosen = replace(chosen, cell_count=len(refs))
    cells = [c for c in refs if not pattern or fnmatch.fnmatchcase(c[0], pattern)]
    table = coverage_table(cells, (), facts)
    unordered = grid_page(chosen, table, restores=restores)
    table = table.only([f.key for f in by_severity(unordered.fingerprints)])
    stop = len(table.cells) if limit is None else offset + limit
    verified = verified_pairs(conn, [key for _, key in table.cells[offset:stop]])
    grid = grid_page(chosen, table, pattern=pattern, offset=offset, limit=limit,
                     restores=restores, verified=verified)
    return replace(grid, fingerprints=distinguish(grid.fingerprints, facts.fingerprints))


def coverage_summaries(conn: Connection, now: datetime) -> list[CoverageGrid]:
    """Counts (no rows) for the current version of every registered matrix: ready and failed
    from the aggregates (kept by the rule without leases), cells with a live lease moved to
    their status by ``status_of``, missing the rest; columns as ``matrix_coverage`` chooses
    them, worst first; the matrices by their worst column. A few small queries whatever the
    size of the index (``Index.coverage_summaries``)."""
    versions = current_versions_in(conn)
    ids = [v.id for v in versions]
    counts: dict[int, dict[str, dict[str, int]]] = {}
    named: dict[str, dict[str, int]] = {}
    if ids:
        cc, rf = coverage_counts, report_fingerprints
        for matrix_id, fp, ready, failed in conn.execute(
                select(cc.c.matrix_id, cc.c.fingerprint_key, cc.c.ready, cc.c.failed)
                .where(cc.c.matrix_id.in_(ids))):
            if ready or failed:
                counts.setdefault(matrix_id, {})[fp] = {READY: int(ready), FAILED: int(failed),
                                                        IN_PROGRESS: 0}
        for matrix_id, fp, failure in _leased_cells(conn, ids, now):
            _move_leased(counts.setdefault(matrix_id, {}).setdefault(fp, dict(_ZERO)), failure)
        for matrix, fp, reports in conn.execute(
                select(rf.c.matrix, rf.c.fingerprint_key, rf.c.reports)
                .where(rf.c.matrix.in_(sorted({v.name for v in versions})))):
            named.setdefault(matrix, {})[fp] = int(reports)
    keys = sorted({fp for c in counts.values() for fp in c}
                  | {fp for fps in named.values() for fp in fps})
    facts = CoverageFacts()
    read_fingerprints(conn, keys, facts)
    grids = []
    for v in versions:
        mine, restores = counts.get(v.id, {}), named.get(v.name, {})
        fps = by_severity(_column_counts(k, facts.fingerprints.get(k), v, mine.get(k, _ZERO),
                                         restores.get(k, 0)) for k in {*mine, *restores})
        grids.append(CoverageGrid(v, None, v.cell_count, 0, 0, tuple(fps), ()))
    return sorted(grids, key=lambda g: (not g.fingerprints, severity(g.fingerprints[0])
                                        if g.fingerprints else (), g.matrix.name))


def _move_leased(acc: dict[str, int], failure: bool) -> None:
    """The aggregates count a leased cell (no entry) as the rule does without its lease:
    move it to the status the rule gives it with the lease (missing is what the others
    leave, so it is never counted)."""
    before, after = status_of(False, False, failure), status_of(False, True, failure)
    if before != MISSING:
        acc[before] -= 1
    if after != MISSING:
        acc[after] += 1


_ZERO = {READY: 0, FAILED: 0, IN_PROGRESS: 0}


def _leased_cells(conn: Connection, matrix_ids: Sequence[int],
                  now: datetime) -> list[tuple[int, str, bool]]:
    """(matrix id, fingerprint key, has a failure) per live lease on a cell of these matrix
    versions that has no entry (few: one per busy worker)."""
    c, mc, e, f = cell_claims, matrix_cells, entries, cell_failures
    has_entry = (select(e.c.entry_key).where(e.c.cell_key == c.c.cell_key,
                                             e.c.fingerprint_key == c.c.fingerprint_key)
                 .exists())
    has_failure = (select(f.c.id).where(f.c.cell_key == c.c.cell_key,
                                        f.c.fingerprint_key == c.c.fingerprint_key).exists())
    rows = conn.execute(
        select(mc.c.matrix_id, c.c.fingerprint_key, has_failure)
        .select_from(c.join(mc, mc.c.cell_key == c.c.cell_key))
        .where(mc.c.matrix_id.in_(matrix_ids), c.c.holder.is_not(None), c.c.expires_at > now,
               ~has_entry))
    return [(int(m), str(fp), bool(failure)) for m, fp, failure in rows]


def _column_counts(key: str, fp: Fingerprint | None, v: MatrixVersion,
                   acc: Mapping[str, int], restores: int) -> FingerprintCounts:
    ready, failed, in_progress = acc[READY], acc[FAILED], acc[IN_PROGRESS]
    return counts_of(key, fp.backend if fp else "unknown", dict(fp.fields) if fp else {},
                     (ready, failed, v.cell_count - ready - failed - in_progress, in_progress),
                     restores)

