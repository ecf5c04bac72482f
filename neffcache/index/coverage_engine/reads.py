"""Coverage's reads: what the index holds for a scope of cells (their keys, or a registered
matrix version), in a fixed number of statements whatever the cell count, never one per cell
(``statements`` builds them; over a ``listing.Reader``: the bare driver for ``neffcache
coverage``, SQLAlchemy for the API; or a Connection for the API's grid and the summaries);
``now`` (the database clock, ``database_now``) decides which leases are live. The statuses
and counts come from ``rules`` alone.

- ``read_facts``: entries, failures (the latest per pair, with details), live leases and the
  fingerprints they name; ``plan_coverage``/``coverage_cells``: the same a batch of cells at
  a time, for a stream in flat memory.
- ``matrix_coverage``: a registered matrix's grid (the API, the dashboard), columns worst
  first, each with what tells it apart (``ops_values.distinguish``); ``coverage_summaries``:
  every registered matrix's counts from the aggregates, leased cells moved by the rule
  (/api/summary, /metrics): a few queries at any index size.

Relevant fingerprints are the given ones (this host's) plus every fingerprint with an entry,
a failure or a live lease for any of the cells, plus (for a registered matrix in the API) the
fingerprints restore reports of that matrix named. Core only: no ORM import.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from neffcache.index.coverage_engine.rules import (
    CoverageFacts,
    FailureFact,
    Pair,
    Tally,
    build_coverage,
    cell_ids_and_keys,
    column_of,
    column_order,
    grid_page,
)
from neffcache.index.listing import Reader, shape_of
from neffcache.index.matrix_reads import (  # noqa: F401  (re-exported: the face's reads)
    cell_refs_in,
    choose_version,
    current_matrix,
    current_versions_in,
    matrix_cell_refs,
    matrix_versions,
    versions_in,
)
from neffcache.index.shapes import Status
from neffcache.index.values import LiveLease, as_utc

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from neffcache.fingerprint import Fingerprint
    from neffcache.index.ops_values import CoverageGrid
    from neffcache.matrix import Cell

Scope = tuple[str, Any]  # ("keys", cell keys) or ("matrix", a registered version's id)
STREAM_BATCH = 500  # cells per batch: a batch's facts are what a stream holds at once
FIRST_BATCH = 100  # the first batch is small: its rows come at once
SINGLE = 500  # up to this many cells are read once, with details, before the first row


def keys_param(dialect: str, keys: Sequence[str]) -> str:
    """A set of keys as the one parameter ``statements.in_keys`` takes: a Postgres array
    literal (``{"k1","k2"}``, each element quoted), a JSON list on SQLite (``json_each``)."""
    if dialect == "postgresql":
        return "{" + ",".join(f'"{_array_escape(k)}"' for k in keys) + "}"
    return json.dumps(list(keys))


def _array_escape(key: str) -> str:
    """``key`` inside a double-quoted element of a Postgres array literal."""
    if "\\" in key or '"' in key:
        return key.replace("\\", "\\\\").replace('"', '\\"')
    return key


def scope_of_keys(keys: Sequence[str]) -> Scope:
    return ("keys", keys)


def scope_of_matrix(matrix_id: int) -> Scope:
    return ("matrix", matrix_id)


def database_now(reader: Reader) -> datetime:
    """The database server's current time (UTC). Postgres: ``now()`` (the transaction's
    start, so one transaction sees one time); SQLite: its own clock, in milliseconds."""
    row = reader.first("now", (), {})
    assert row is not None
    value = row[0]
    out = as_utc(value if isinstance(value, datetime) else datetime.fromisoformat(str(value)))
    assert out is not None
    return out


def read_facts(reader: Reader, scope: Scope, now: datetime, *, details: bool = True,
               named: Sequence[str] = ()) -> CoverageFacts:
    """What the index holds for the cells of ``scope``: one statement each for entries,
    failures (the latest per pair, with details) and live leases at ``now``, then the
    fingerprints they name (with ``named`` ones: columns even when nothing was built for
    them). A scope of no keys reads nothing but the named fingerprints."""
    facts = CoverageFacts(named=tuple(dict.fromkeys(named)))
    if scope[0] != "keys" or scope[1]:
        kind, value = scope
        params = ({"matrix_id": value} if kind == "matrix"
                  else {"keys": keys_param(reader.dialect, value)})
        shape = shape_of({"scope": kind, "details": details})
        for ck, fk, *entry in reader.all("cov_entries", shape, params):
            facts.entries[(ck, fk)] = (entry[0], entry[1]) if details else (None, None)
        for ck, fk, *failure in reader.all("cov_failures", shape, params):
            facts.failures[(ck, fk)] = (FailureFact(failure[0], failure[1], as_utc(failure[2]))
                                        if details else FailureFact(None, "", None))
        for r in reader.all("cov_leases", shape_of({"scope": kind}), {**params, "now": now}):
            lease = live_lease(r)
            facts.leases[(lease.cell_key, lease.fingerprint_key)] = lease
    seen = {fp for _, fp in facts.entries} | {fp for _, fp in facts.failures} | {
        fp for _, fp in facts.leases} | set(facts.named)
    read_fingerprints(reader, sorted(seen), facts)
    return facts


def read_fingerprints(reader: Reader, keys: Sequence[str], facts: CoverageFacts) -> None:
    """The fingerprints of ``keys`` the index knows, into ``facts``."""
    from neffcache.fingerprint import Fingerprint

    if not keys:
        return
    for key, backend, fields, first_seen in reader.all(
            "cov_fingerprints", (), {"keys": keys_param(reader.dialect, keys)}):
        facts.fingerprints[key] = Fingerprint(backend=backend, fields=tuple(
            sorted((str(k), str(v)) for k, v in fields.items())))
        facts.first_seen[key] = as_utc(first_seen)


def fingerprints_with_rows(reader: Reader, cell_keys: Sequence[str], now: datetime) -> set[str]:
    """Fingerprint keys with an entry, a failure or a live lease for one of these cells,
    without reading the cells' rows (``statements._fingerprints_with``)."""
    if not cell_keys:
        return set()
    return {r[0] for r in reader.all("cov_fingerprints_with", (), {
        "keys": keys_param(reader.dialect, cell_keys), "now": now})}


def find_fingerprint_keys(reader: Reader, prefix: str) -> list[str]:
    """Up to 10 fingerprint keys starting with the hex ``prefix``, in order (a range an
    index serves; a non-hex prefix matches nothing)."""
    p = prefix.lower()
    if not p or any(ch not in "0123456789abcdef" for ch in p) or len(p) > 64:
        return []
    return [r[0] for r in reader.all("fingerprint_prefix", (),
                                      {"lo": p, "hi": p + "g", "limit": 10})]


def find_fingerprints(reader: Reader, prefix: str) -> dict[str, Fingerprint]:
    """Fingerprints whose key starts with ``prefix`` (hex), at most 10."""
    keys = find_fingerprint_keys(reader, prefix)
    facts = CoverageFacts()
    read_fingerprints(reader, keys, facts)
    return {k: facts.fingerprints[k] for k in keys if k in facts.fingerprints}


def live_lease(r: Sequence[Any]) -> LiveLease:
    """A LiveLease from (cell key, fingerprint key, host, claimed, heartbeat, expires,
    attempts); a live lease has all three times."""
    claimed, heartbeat, expires = (_utc(t) for t in r[3:6])
    return LiveLease(str(r[0]), str(r[1]), str(r[2] or "?"), claimed, heartbeat, expires,
                     int(r[6]))


def _utc(ts: datetime | None) -> datetime:
    out = as_utc(ts)
    assert out is not None
    return out


# --- a stream: a batch of cells at a time ---------------------------------------------------

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

    def columns(self, tally: Tally) -> tuple[Any, ...]:
        """The columns (``build_coverage``'s), counted by ``tally``."""
        return tuple(column_of(k, self.fingerprints.get(k), tally.counts(k),
                               here=k in self.given) for k in self.keys)


def plan_coverage(reader: Reader, cells: Sequence[Cell] | Sequence[tuple[str, str]],
                  given: Sequence[Fingerprint], now: datetime, *, named: Sequence[str] = (),
                  only: Sequence[str] | None = None) -> CoveragePlan:
    """The columns ``build_coverage`` gives ``cells`` (distinct, in order); ``only``: just
    these columns, in this order. Up to SINGLE cells are read once, with details; for more,
    each fingerprint is asked whether it has a row for them (``fingerprints_with_rows``)
    and the rows are read later, a batch at a time."""
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
    keys = column_order(given, seen)
    if only is not None:
        keys = [k for k in dict.fromkeys(only) if k in set(keys)]
    fps = {**known, **{fp.key: fp for fp in given}}
    return CoveragePlan(cells, tuple(keys), fps, frozenset(fp.key for fp in given), single)


Cell_ = tuple[str, str, str, Status, CoverageFacts]  # cell id, cell key, fp key, status, facts


def coverage_cells(reader: Reader, plan: CoveragePlan, now: datetime) -> Iterator[Cell_]:
    """Every cell x column of ``plan``, row-major by cell then column (``build_coverage``'s
    order), as (cell id, cell key, fingerprint key, status, the facts that explain it):
    each batch of cells read with details when its turn comes (the first batch small, so
    the first rows come at once). ``rules.coverage_row(*item)`` is its CoverageRow."""
    for start, stop in batches(len(plan.cells)):
        part = plan.cells[start:stop]
        facts = plan.single if plan.single is not None else read_facts(
            reader, scope_of_keys([k for _, k in part]), now)
        for cell_id, ck in part:
            for k in plan.keys:
                yield cell_id, ck, k, facts.status((ck, k)), facts


# --- registered matrices: the API's grid, the summaries ------------------------------------

def fetch_matrix_facts(conn: Connection, matrix_id: int, now: datetime, *,
                       named: Sequence[str] = ()) -> CoverageFacts:
    """What the index holds for the cells of a registered matrix version (no details)."""
    from sqlalchemy import text

    from neffcache.index.sqla_reader import SqlaReader

    if conn.dialect.name == "postgresql":
        # Without statistics the planner guesses thousands of entries per cell, and at that
        # cost it JIT-compiles the probe: ~0.1 s spent before a 20,000-row read (this read
        # transaction only).
        conn.execute(text("SET LOCAL jit = off"))
    return read_facts(SqlaReader(conn), scope_of_matrix(matrix_id), now, details=False,
                      named=named)


def matrix_entry_pairs(conn: Connection, matrix_id: int) -> Any:
    """(cell key, fingerprint key) of every entry for a cell of a matrix version (on
    Postgres a LATERAL probe per cell: ``statements._entries``)."""
    from neffcache.index.coverage_engine import statements

    stmt = statements.build("cov_entries", conn.dialect.name,
                            (("details", False), ("scope", "matrix")))
    return stmt.params(matrix_id=matrix_id)


def verified_pairs(conn: Any, cell_keys: Sequence[str]) -> dict[Pair, str]:
    """How each entry of these cells (a page of a grid) was verified, where it was: the
    first call after a restore (``neffcache warm``, ``precompile --verify``) was a hit (warm),
    compiled, or failed. Served by the partial index on verified entries (migration 0007)."""
    from sqlalchemy import select

    from neffcache.index.queries import key_batches, key_in
    from neffcache.index.tables import entries as e

    out: dict[Pair, str] = {}
    for part in key_batches(conn, sorted(set(cell_keys))):
        out.update(((ck, fk), str(v)) for ck, fk, v in conn.execute(
            select(e.c.cell_key, e.c.fingerprint_key, e.c.verified_status)
            .where(key_in(conn, e.c.cell_key, part), e.c.verified_status.is_not(None))))
    return out


def _restores_of(conn: Connection, names: Sequence[str]) -> dict[str, dict[str, int]]:
    """Per matrix name, the fingerprints its restore reports named and how many times."""
    from sqlalchemy import select

    from neffcache.index.tables import report_fingerprints as rf

    out: dict[str, dict[str, int]] = {}
    for matrix, fp, reports in conn.execute(
            select(rf.c.matrix, rf.c.fingerprint_key, rf.c.reports)
            .where(rf.c.matrix.in_(names))):
        out.setdefault(str(matrix), {})[str(fp)] = int(reports)
    return out


def matrix_coverage(conn: Connection, now: datetime, name: str, *,
                    version: int | None = None, pattern: str | None = None, offset: int = 0,
                    limit: int | None = None) -> CoverageGrid:
    """A registered matrix's coverage (current version, or ``version``): its cells matching
    the glob ``pattern`` x every fingerprint with an entry, a failure or a live lease for any
    of its cells, or that a restore report of this matrix named (the fleet's fingerprints,
    even at 0 %), worst first (``ops_values.severity``); counts over every matching cell, rows for
    ``offset``..``offset + limit``. A fixed number of queries (``Index.matrix_coverage``)."""
    from neffcache.index.ops_values import by_severity, distinguish

    chosen = choose_version(versions_in(conn, name, counts=False), name, version)
    refs = cell_refs_in(conn, chosen.id)
    restores = _restores_of(conn, [name]).get(name, {})
    facts = fetch_matrix_facts(conn, chosen.id, now, named=list(restores))
    chosen = replace(chosen, cell_count=len(refs))
    cells = [c for c in refs if not pattern or fnmatch.fnmatchcase(c[0], pattern)]
    report = build_coverage(cells, (), facts, details=False)
    unordered = grid_page(chosen, report, restores=restores)
    report = report.only([f.key for f in by_severity(unordered.fingerprints)])
    stop = len(report.cells) if limit is None else offset + limit
    verified = verified_pairs(conn, [key for _, key in report.cells[offset:stop]])
    grid = grid_page(chosen, report, pattern=pattern, offset=offset, limit=limit,
                     restores=restores, verified=verified)
    return replace(grid, fingerprints=distinguish(grid.fingerprints, facts.fingerprints))


def coverage_summaries(conn: Connection, now: datetime) -> list[CoverageGrid]:
    """Counts (no rows) for the current version of every registered matrix: ready and failed
    from the aggregates (kept by the rule without leases), cells with a live lease moved to
    their status by the rule (``Tally.add_leased``), missing the rest; columns as
    ``matrix_coverage`` chooses them, worst first; the matrices by their worst column. A few
    small queries whatever the size of the index (``Index.coverage_summaries``)."""
    from sqlalchemy import select

    from neffcache.index.ops_values import CoverageGrid, by_severity, severity
    from neffcache.index.sqla_reader import SqlaReader
    from neffcache.index.tables import coverage_counts as cc
    from neffcache.index.values import FAILED, READY

    versions = current_versions_in(conn)
    ids = [v.id for v in versions]
    tallies: dict[int, Tally] = {}
    named: dict[str, dict[str, int]] = {}
    if ids:
        for matrix_id, fp, ready, failed in conn.execute(
                select(cc.c.matrix_id, cc.c.fingerprint_key, cc.c.ready, cc.c.failed)
                .where(cc.c.matrix_id.in_(ids))):
            if ready or failed:
                tally = tallies.setdefault(matrix_id, Tally())
                tally.add(fp, READY, int(ready))
                tally.add(fp, FAILED, int(failed))
        for matrix_id, fp, failure in _leased_cells(conn, ids, now):
            tallies.setdefault(matrix_id, Tally()).add_leased(fp, failure)
        named = _restores_of(conn, sorted({v.name for v in versions}))
    keys = sorted({fp for t in tallies.values() for fp in t.keys()}
                  | {fp for fps in named.values() for fp in fps})
    facts = CoverageFacts()
    read_fingerprints(SqlaReader(conn), keys, facts)
    grids = []
    for v in versions:
        tally, restores = tallies.get(v.id, Tally()), named.get(v.name, {})
        fps = by_severity(column_of(k, facts.fingerprints.get(k), tally.counts(k, v.cell_count),
                                    restores=restores.get(k, 0))
                          for k in {*tally.keys(), *restores})
        grids.append(CoverageGrid(v, None, v.cell_count, 0, 0, tuple(fps), ()))
    return sorted(grids, key=lambda g: (not g.fingerprints, severity(g.fingerprints[0])
                                        if g.fingerprints else (), g.matrix.name))


def _leased_cells(conn: Connection, matrix_ids: Sequence[int],
                  now: datetime) -> list[tuple[int, str, bool]]:
    """(matrix id, fingerprint key, has a failure) per live lease on a cell of these matrix
    versions that has no entry (few: one per busy worker)."""
    from sqlalchemy import select

    from neffcache.index.tables import cell_claims as c
    from neffcache.index.tables import cell_failures as f
    from neffcache.index.tables import entries as e
    from neffcache.index.tables import matrix_cells as mc

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
