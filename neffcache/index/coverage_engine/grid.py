"""Coverage of registered matrices for the API: a matrix's grid and every matrix's summary."""

from __future__ import annotations

import fnmatch
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from itertools import groupby
from operator import itemgetter
from typing import Any

from sqlalchemy import Connection, func, select, text

from neffcache.index.coverage_engine.reads import (
    choose_version,
    keys_param,
    matrix_cell_refs,
    matrix_versions,
    read_facts,
    read_fingerprints,
    versions_of,
)
from neffcache.index.coverage_engine.rules import (
    Pair,
    Tally,
    build_coverage,
    column_of,
    grid_page,
    status_of,
)
from neffcache.index.coverage_engine.statements import in_keys
from neffcache.index.ops_values import (
    CoverageGrid,
    MatrixVersion,
    distinguish,
    severity,
)
from neffcache.index.queries import has_entry
from neffcache.index.sqla_reader import SqlaReader
from neffcache.index.tables import matrices as M
from neffcache.index.tables import matrix_cells as MC
from neffcache.index.values import FAILED, READY


def verified_pairs(conn: Any, cell_keys: Sequence[str]) -> dict[Pair, str]:
    """How the first call after a restore went (the partial index of migration 0007)."""
    from neffcache.index.tables import entries as e

    dialect = conn.dialect.name
    stmt = (select(e.c.cell_key, e.c.fingerprint_key, e.c.verified_status)
            .where(in_keys(dialect, e.c.cell_key), e.c.verified_status.is_not(None)))
    return {(ck, fk): str(v) for ck, fk, v in conn.execute(
        stmt, {"keys": keys_param(dialect, sorted(set(cell_keys)))})}


def _restores_of(conn: Connection, names: Sequence[str]) -> dict[str, dict[str, int]]:
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
    """A registered matrix's grid: matching cells x every fingerprint with a row for them or
    named by its restore reports, worst first; counts over every matching cell."""
    reader = SqlaReader(conn)
    chosen = choose_version(matrix_versions(reader, name), name, version)
    refs = matrix_cell_refs(reader, chosen.id)
    restores = _restores_of(conn, [name]).get(name, {})
    if conn.dialect.name == "postgresql":
        # Without statistics the planner's cost estimate JIT-compiles the probe: ~0.1 s.
        conn.execute(text("SET LOCAL jit = off"))
    facts = read_facts(reader, ("matrix", chosen.id), now, details=False,
                       named=list(restores))
    chosen = replace(chosen, cell_count=len(refs))
    cells = [c for c in refs if not pattern or fnmatch.fnmatchcase(c[0], pattern)]
    report = build_coverage(cells, (), facts, details=False)
    columns = sorted((replace(c, restores=restores.get(c.key, 0)) for c in report.fingerprints),
                     key=severity)
    report = replace(report.only([c.key for c in columns]),
                     fingerprints=distinguish(columns, facts.fingerprints))
    stop = len(report.cells) if limit is None else offset + limit
    verified = verified_pairs(conn, [key for _, key in report.cells[offset:stop]])
    return grid_page(chosen, report, pattern=pattern, offset=offset, limit=limit,
                     verified=verified)


def coverage_summaries(conn: Connection, now: datetime) -> list[CoverageGrid]:
    """Every current version's counts: the aggregates, with leased cells moved by the rule."""
    from neffcache.index.tables import cell_claims as c
    from neffcache.index.tables import cell_failures as f
    from neffcache.index.tables import coverage_counts as cc

    versions = current_versions_in(conn)
    ids = [v.id for v in versions]
    tallies: defaultdict[int, Tally] = defaultdict(Tally)
    for matrix_id, fp, ready, failed in conn.execute(
            select(cc.c.matrix_id, cc.c.fingerprint_key, cc.c.ready, cc.c.failed)
            .where(cc.c.matrix_id.in_(ids))):
        if ready or failed:
            tallies[matrix_id].add(fp, READY, int(ready))
            tallies[matrix_id].add(fp, FAILED, int(failed))
    has_failure = (select(f.c.id).where(f.c.cell_key == c.c.cell_key,
                                        f.c.fingerprint_key == c.c.fingerprint_key).exists())
    for matrix_id, fp, failure in conn.execute(  # each live lease on a cell with no entry
            select(MC.c.matrix_id, c.c.fingerprint_key, has_failure)
            .select_from(c.join(MC, MC.c.cell_key == c.c.cell_key))
            .where(MC.c.matrix_id.in_(ids), c.c.holder.is_not(None), c.c.expires_at > now,
                   ~has_entry(c.c.cell_key, c.c.fingerprint_key))):
        # counted by the aggregates as without its lease: moved by the rule
        tallies[matrix_id].add(fp, status_of(False, False, failure), -1)
        tallies[matrix_id].add(fp, status_of(False, True, failure))
    named = _restores_of(conn, sorted({v.name for v in versions}))
    keys = sorted(set().union(*tallies.values(), *named.values()))
    prints = read_fingerprints(SqlaReader(conn), keys)
    grids = []
    for v in versions:
        tally, restores = tallies.get(v.id, Tally()), named.get(v.name, {})
        fps = sorted((column_of(k, prints.get(k), tally.counts(k, v.cell_count),
                                restores=restores.get(k, 0)) for k in {*tally, *restores}),
                     key=severity)
        grids.append(CoverageGrid(v, None, v.cell_count, 0, 0, tuple(fps), ()))
    return sorted(grids, key=lambda g: (not g.fingerprints, severity(g.fingerprints[0])
                                        if g.fingerprints else (), g.matrix.name))


def versions_in(conn: Connection, name: str, *, counts: bool = True) -> list[MatrixVersion]:
    """Oldest first; without ``counts`` every ``cell_count`` is 0 (one query fewer)."""
    versions = matrix_versions(SqlaReader(conn), name)
    return _counted(conn, versions) if counts else versions


def current_versions_in(conn: Connection) -> list[MatrixVersion]:
    rows = sorted(conn.execute(select(M.c.name, M.c.id, M.c.digest, M.c.backend,
                                      M.c.registered_at)), key=itemgetter(0, 1))
    return _counted(conn, [v for name, group in groupby(rows, itemgetter(0))
                           for v in versions_of(name, [r[1:] for r in group]) if v.current])


def _counted(conn: Connection, versions: list[MatrixVersion]) -> list[MatrixVersion]:
    """``versions``, each with its ``cell_count``."""
    n_cells = {int(k): int(n) for k, n in conn.execute(
        select(MC.c.matrix_id, func.count()).where(MC.c.matrix_id.in_([v.id for v in versions]))
        .group_by(MC.c.matrix_id)).all()}
    return [replace(v, cell_count=n_cells.get(v.id, 0)) for v in versions]
