"""Ops queries on SQLite: registered matrices and their history, coverage grids (the same
statuses as Index.coverage), failures, runs, restore reports and outcome aggregates."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import event

from neffcache.errors import MatrixError, NotFoundError, UsageError
from neffcache.index import Index, open_index
from neffcache.index import ops_queries as q
from neffcache.index.matrices import (
    get_matrix,
    list_matrices,
    matrix_digest,
    matrix_name_of,
    matrix_versions,
    register_matrix,
    registered_cells,
)
from neffcache.matrix import parse_matrix
from tests.support.coverage import coverage_of
from tests.support.ops_seed import FAILED, MISSING, READY, matrix_text, sdk_fingerprint, seed


@pytest.fixture
def ix(tmp_path: Path) -> Iterator[Index]:
    with open_index(f"sqlite:///{tmp_path / 'index.db'}", auto_upgrade=True) as index:
        yield index


def register(ix: Index, text: str, name: str | None = None,  # type: ignore[no-untyped-def]
             replace: bool = False):
    return register_matrix(ix, parse_matrix(text, "m.toml"), text, name, replace=replace)


def test_digest_ignores_comments_and_layout() -> None:
    a = 'name = "m"\nbackend = "neuron"\n'
    b = '# a comment\nbackend   =  "neuron"\nname="m"\n'
    assert matrix_digest(a) == matrix_digest(b) != matrix_digest('name = "n"\n')
    with pytest.raises(MatrixError, match="x.toml: not valid TOML"):
        matrix_digest("name = ", "x.toml")


def test_name_comes_from_the_file_then_its_stem() -> None:
    text = matrix_text("prod", shapes=1)
    assert matrix_name_of(parse_matrix(text, "/a/b.toml")) == "prod"
    unnamed = "\n".join(text.splitlines()[1:])
    assert matrix_name_of(parse_matrix(unnamed, "/etc/neff/flux.toml")) == "flux"


def test_register_keeps_history_and_the_latest_is_current(ix: Index) -> None:
    v1_text, v2_text = matrix_text("m", shapes=2), matrix_text("m", shapes=3)
    v1 = register(ix, v1_text)
    assert (v1.version, v1.cell_count, v1.current, v1.changed) == (1, 2, True, True)
    again = register(ix, "# same content\n" + v1_text)
    assert (again.version, again.changed) == (1, False)
    with pytest.raises(UsageError, match=r"matrix 'm' is registered with other content "
                                         r"\(version 1, digest [0-9a-f]{12}\) than m.toml"):
        register(ix, v2_text)  # an edited copy under the same name: refused
    assert [v.version for v in matrix_versions(ix, "m")] == [1]
    v2 = register(ix, v2_text, replace=True)
    assert (v2.version, v2.cell_count, v2.changed) == (2, 3, True)
    assert [(v.version, v.current) for v in matrix_versions(ix, "m")] == [(1, False), (2, True)]
    with pytest.raises(UsageError, match="version 2"):
        register(ix, v1_text)  # rolling back is a replacement too
    back = register(ix, v1_text, replace=True)  # makes version 1 current again
    assert (back.version, back.current, back.changed) == (1, True, True)
    assert get_matrix(ix, "m").version == 1
    assert get_matrix(ix, "m", 2, with_toml=True).toml == v2_text
    assert [c.id for c in registered_cells(ix, "m", 2)] == \
        [c.id for c in parse_matrix(v2_text).cells]
    assert [(m.name, m.version) for m in list_matrices(ix)] == [("m", 1)]


def test_register_under_another_name_and_unknown_names(ix: Index) -> None:
    text = matrix_text("m", shapes=1)
    register(ix, text)
    other = register(ix, text, "m-copy")
    assert (other.name, other.version) == ("m-copy", 1)
    assert [m.name for m in list_matrices(ix)] == ["m", "m-copy"]
    with pytest.raises(NotFoundError, match="matrix 'nope': not registered"):
        get_matrix(ix, "nope")
    with pytest.raises(NotFoundError, match="no version 3"):
        get_matrix(ix, "m", 3)


def rule(n: int, i: int) -> str:
    return [[READY, FAILED], [MISSING, READY], [FAILED, MISSING], [READY, READY]][n % 4][i]


def test_grid_statuses_match_index_coverage(ix: Index) -> None:
    fps = [sdk_fingerprint(1), sdk_fingerprint(2)]
    seeded = seed(ix, matrix_text("m", shapes=6), fps, rule)
    grid = ix.matrix_coverage("m")
    assert grid.total_cells == 6
    assert {f.key for f in grid.fingerprints} == {fp.key for fp in fps}
    got = {(r.cell_id, f.key): s for r in grid.rows
           for f, s in zip(grid.fingerprints, r.statuses, strict=True)}
    assert got == seeded.statuses
    report = coverage_of(ix, registered_cells(ix, "m"))
    assert {(r.cell_id, r.fingerprint_key): r.status for r in report.rows} == got
    for f in grid.fingerprints:
        fp = next(x for x in fps if x.key == f.key)
        assert (f.ready, f.failed, f.missing) == tuple(
            seeded.count(fp, s) for s in (READY, FAILED, MISSING))
        assert f.sdk_version == fp.get("version.neuronx-cc")


def test_an_entry_after_a_failure_makes_the_cell_ready_and_drops_it_from_failures(
        ix: Index) -> None:
    fp = sdk_fingerprint(1)
    seeded = seed(ix, matrix_text("m", shapes=2), [fp], lambda n, i: FAILED)
    assert len(q.list_failures(ix)) == 2
    from tests.unit.test_index_factories import make_manifest

    ix.record_entry(make_manifest(seeded.matrix.cells[0], fp), "/store")
    assert [r.statuses for r in ix.matrix_coverage("m").rows] == [(READY,), (FAILED,)]
    current = q.list_failures(ix)
    assert [f.cell_id for f in current] == [seeded.matrix.cells[1].id]
    assert len(q.list_failures(ix, current_only=False)) == 2
    run = q.list_runs(ix)[0]
    assert run.failures_recorded == 2 and q.get_run(ix, run.id).failures_recorded == 2
    assert len(q.list_failures(ix, run_id=run.id, current_only=False)) == 2
    with pytest.raises(NotFoundError):
        q.get_run(ix, "nope")


def test_failure_filters(ix: Index) -> None:
    fps = [sdk_fingerprint(1), sdk_fingerprint(2)]
    seed(ix, matrix_text("m", modes=("compile", "eager"), shapes=2), fps, lambda n, i: FAILED,
         log=lambda c, fp: f"boom {c.id}")
    assert len(q.list_failures(ix)) == 8
    assert len(q.list_failures(ix, fingerprint_key=fps[0].key[:10])) == 4
    eager = q.list_failures(ix, cell_glob="p0/eager/*")
    assert {f.cell_id for f in eager} == {"p0/eager/512x512/b1/tp1", "p0/eager/512x520/b1/tp1"}
    assert eager[0].log_tail.startswith("boom p0/eager/")
    assert len(q.list_failures(ix, limit=3)) == 3
    assert q.list_failures(ix, matrix=get_matrix(ix, "m"), cell_glob="P0/*") == []


def test_restores_and_outcome_buckets(ix: Index) -> None:
    reports = [(0, 2, 0, 0.4), (0, 2, 0, 3.0), (3, 1, 1, 7.0), (3, 0, 2, 0.2), (6, 0, 0, 700.0)]
    for n, (code, restored, missing, secs) in enumerate(reports):
        ix.record_restore({"host": f"i-{n}", "matrix": "m", "fingerprint_key": "f" * 64,
                           "cells_restored": [f"c{k}" for k in range(restored)],
                           "cells_missing": [f"m{k}" for k in range(missing)],
                           "bytes_fetched": 100 * n, "seconds": secs, "exit_code": code})
    listed = q.list_restores(ix)
    assert [r.host for r in listed] == ["i-4", "i-3", "i-2", "i-1", "i-0"]
    assert [r.outcome for r in listed] == ["error", "miss", "partial", "hit", "hit"]
    assert listed[1].missing == ("m0", "m1")
    assert [r.host for r in q.list_restores(ix, host="i-2")] == ["i-2"]
    assert len(q.list_restores(ix, limit=2)) == 2
    stats = {o.outcome: o for o in q.restore_outcomes(ix)}
    assert (stats["hit"].count, stats["hit"].seconds_sum, stats["hit"].bytes_sum) == (2, 3.4, 100)
    assert stats["hit"].buckets[:5] == (1, 1, 1, 2, 2)  # <= 0.5, 1, 2.5, 5, 10
    assert stats["error"].buckets[-1] == 0  # 700 s is past the last bound (+Inf only)
    assert (stats["partial"].count, stats["miss"].count, stats["error"].count) == (1, 1, 1)


def test_fingerprint_stats_totals_and_sdk(ix: Index) -> None:
    fps = [sdk_fingerprint(1), sdk_fingerprint(2)]
    seeded = seed(ix, matrix_text("m", shapes=4), fps, rule, size=lambda n, i: 10 * (n + 1))
    stats = {s.info.key: s for s in q.fingerprint_stats(ix)}
    for fp in fps:
        assert stats[fp.key].entries == seeded.count(fp, READY)
        assert stats[fp.key].total_bytes == seeded.entry_bytes[fp.key]
    totals = q.index_totals(ix)
    assert totals.entries == sum(seeded.count(fp, READY) for fp in fps)
    assert totals.total_bytes == sum(seeded.entry_bytes.values())
    assert (totals.matrices, totals.fingerprints, totals.cells) == (1, 2, 4)


def test_grid_of_5000_cells_by_10_fingerprints_uses_few_queries(ix: Index) -> None:
    fps = [sdk_fingerprint(i) for i in range(10)]
    text = matrix_text("big", pipelines=5, modes=("compile", "eager"), shapes=25, batches=20)
    seed(ix, text, fps, lambda n, i: READY if n % 10 < i else FAILED if n % 10 == i else MISSING)
    statements: list[str] = []
    engine = ix.engine  # counting statements is the point
    listener = lambda *a: statements.append(a[2])  # noqa: E731
    event.listen(engine, "before_cursor_execute", listener)
    try:
        grid = ix.matrix_coverage("big", offset=4800, limit=500)
    finally:
        event.remove(engine, "before_cursor_execute", listener)
    assert grid.total_cells == 5000 and len(grid.rows) == 200
    assert [f.ready for f in sorted(grid.fingerprints, key=lambda f: f.sdk_version)] == \
        [500 * i for i in range(10)]
    assert all(f.failed == 500 for f in grid.fingerprints)
    assert len(statements) <= 10  # a fixed number, whatever the cell count (BEGINs included)


def test_summary_and_grid_put_the_worst_fingerprint_first(ix: Index) -> None:
    """Restored with nothing built first, then most failed, then most missing; the summary's
    matrices by their worst column."""
    fps = [sdk_fingerprint(1), sdk_fingerprint(2), sdk_fingerprint(3)]
    table = [[READY, FAILED, FAILED], [READY, FAILED, MISSING], [READY, READY, MISSING],
             [READY, READY, MISSING]]
    seed(ix, matrix_text("a", shapes=4), fps, lambda n, i: table[n][i])
    seed(ix, matrix_text("b", shapes=2, first=3), fps[:1], lambda n, i: READY)
    restored = sdk_fingerprint(9)
    ix.record_restore({"host": "h", "matrix": "b", "fingerprint_key": restored.key,
                       "cells_restored": 0, "cells_missing": 2, "exit_code": 3, "seconds": 1})
    worst_first = [fps[1].key, fps[2].key, fps[0].key]
    grids = ix.coverage_summaries()
    assert [g.matrix.name for g in grids] == ["b", "a"]
    assert [f.key for f in grids[0].fingerprints] == [restored.key, fps[0].key]
    assert (grids[0].fingerprints[0].restores, grids[0].fingerprints[0].ready) == (1, 0)
    assert [f.key for f in grids[1].fingerprints] == worst_first
    grid = ix.matrix_coverage("a")
    assert [f.key for f in grid.fingerprints] == worst_first
    assert [r.statuses for r in grid.rows][0] == (FAILED, FAILED, READY)
    assert [f.key for f in ix.matrix_coverage("b").fingerprints] == [restored.key, fps[0].key]
    assert grid.fingerprints[0].target == "trn2"
