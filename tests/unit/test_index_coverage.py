"""Coverage on SQLite: statuses, which fingerprints appear, counts, and batching at scale."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import event

from neffcache.index import FAILED, MISSING, READY, Index, open_index
from neffcache.index.coverage_engine.rules import CoverageFacts, FailureFact, build_coverage
from tests.support.coverage import coverage_of
from tests.unit.test_index_factories import make_cell, make_fingerprint, make_manifest


@pytest.fixture
def ix(tmp_path: Path) -> Iterator[Index]:
    with open_index(f"sqlite:///{tmp_path / 'index.db'}", auto_upgrade=True) as index:
        yield index


def test_statuses_and_fingerprint_set(ix: Index) -> None:
    cells = [make_cell(n) for n in range(3)]
    here, other, unrelated = make_fingerprint(0), make_fingerprint(1), make_fingerprint(2)
    ix.record_entry(make_manifest(cells[0], here), "/store")
    ix.record_failure(None, cells[1], here, 137, 5.0, "first failure")
    ix.record_failure(None, cells[1], here, 1, 6.0, "latest failure")
    ix.record_failure(None, cells[0], other, 2, 1.0, "failed, not yet retried")
    ix.record_entry(make_manifest(make_cell(99), unrelated), "/store")  # not one of our cells

    report = coverage_of(ix, cells, [here])
    assert [fp.key for fp in report.fingerprints] == [here.key, other.key]
    assert [fp.here for fp in report.fingerprints] == [True, False]
    assert report.counts(here.key) == {"ready": 1, "failed": 1, "missing": 1, "in_progress": 0}
    assert report.counts(other.key) == {"ready": 0, "failed": 1, "missing": 2, "in_progress": 0}
    ready = report.row(cells[0].key, here.key)
    assert ready.status == READY and ready.entry_key == make_manifest(cells[0], here).entry_key
    failed = report.row(cells[1].key, here.key)
    assert (failed.status, failed.exit_status, failed.log_tail) == (FAILED, 1, "latest failure")
    assert failed.failed_at is not None
    assert report.row(cells[2].key, here.key).status == MISSING
    assert len(report.rows) == 6
    assert report.to_json()["fingerprints"][0]["fields"] == dict(here.fields)


def test_an_entry_wins_over_earlier_failures(ix: Index) -> None:
    cell, fp = make_cell(1), make_fingerprint()
    ix.record_failure(None, cell, fp, 1, 1.0, "flaky")
    ix.record_entry(make_manifest(cell, fp), "/store")
    assert coverage_of(ix, [cell], [fp]).rows[0].status == READY


def test_no_fingerprint_given_shows_only_known_ones(ix: Index) -> None:
    cells = [make_cell(n) for n in range(2)]
    assert coverage_of(ix, cells).fingerprints == ()
    ix.record_entry(make_manifest(cells[1], make_fingerprint(5)), "/store")
    report = coverage_of(ix, cells)
    assert [(r.cell_id, r.status) for r in report.rows] == [
        (cells[0].id, MISSING), (cells[1].id, READY)]


def test_build_coverage_is_pure_and_keeps_cell_order() -> None:
    cells = [make_cell(3), make_cell(1), make_cell(2), make_cell(1)]  # a duplicate
    fp, seen = make_fingerprint(0), make_fingerprint(1)
    facts = CoverageFacts(entries={(cells[1].key, seen.key): ("e" * 64, 5)},
                          failures={(cells[0].key, fp.key): FailureFact(9, "tail", None)},
                          fingerprints={seen.key: seen})
    report = build_coverage(cells, [fp, fp], facts)
    assert [i for i, _ in report.cells] == [cells[0].id, cells[1].id, cells[2].id]
    assert [f.key for f in report.fingerprints] == [fp.key, seen.key]
    assert [r.status for r in report.rows] == [FAILED, MISSING, MISSING, READY, MISSING, MISSING]


def test_coverage_of_5000_cells_by_10_fingerprints_in_batched_queries(ix: Index) -> None:
    """Fingerprint i has entries for cells n with n % 10 < i and a failure for n % 10 == i:
    ready = 500 i, failed = 500, missing = the rest."""
    n_cells, n_fps = 5000, 10
    cells = [make_cell(n) for n in range(n_cells)]
    fps = [make_fingerprint(i) for i in range(n_fps)]
    ix.record_entries([make_manifest(c, fps[i], files=[("inductor", "k.bin", 1, c.key)])
                       for n, c in enumerate(cells) for i in range(n_fps) if n % 10 < i],
                      "/store")
    for n, c in enumerate(cells[:20]):  # failures through the API for a few ...
        ix.record_failure(None, c, fps[n % 10], 1, 1.0, f"cell {n}")
    _bulk_failures(ix, [(c, fps[n % 10]) for n, c in enumerate(cells) if n >= 20])
    outsider = make_fingerprint(77)  # entries only for cells outside the set
    ix.record_entry(make_manifest(make_cell(n_cells + 1), outsider), "/store")
    here = make_fingerprint(99)  # this host: nothing anywhere

    statements: list[str] = []
    engine = ix.engine  # counting statements is the point of this test
    listener = lambda *a: statements.append(a[2])  # noqa: E731
    event.listen(engine, "before_cursor_execute", listener)
    try:
        report = coverage_of(ix, cells, [fps[0], fps[1], here])
    finally:
        event.remove(engine, "before_cursor_execute", listener)

    assert len(report.cells) == n_cells
    assert len(report.fingerprints) == n_fps + 1
    assert outsider.key not in {f.key for f in report.fingerprints}
    assert [f.key for f in report.fingerprints][:3] == [fps[0].key, fps[1].key, here.key]
    for i, fp in enumerate(fps):
        assert report.counts(fp.key) == {"ready": 500 * i, "failed": 500,
                                         "missing": n_cells - 500 * i - 500, "in_progress": 0}, i
    assert report.counts(here.key) == {"ready": 0, "failed": 0, "missing": n_cells,
                                       "in_progress": 0}
    assert len(report.rows) == n_cells * (n_fps + 1)
    # Three queries per batch of 500 cell keys (entries, failures, live leases), plus the
    # clock and the fingerprint lookup: never one per cell.
    assert len(statements) <= 3 * (n_cells // 500) + 3


def _bulk_failures(ix: Index, pairs: list) -> None:
    """Insert many failures in one transaction (the API records one at a time)."""
    from neffcache.index.models import CellFailureRow
    from neffcache.index.record import save_fingerprints_and_cells, utcnow

    with ix.write_session() as s:  # test set-up at scale
        save_fingerprints_and_cells(s, {fp for _, fp in pairs}, [c for c, _ in pairs], utcnow())
        s.add_all([CellFailureRow(run_id=None, cell_key=c.key, fingerprint_key=fp.key,
                                  exit_status=1, seconds=1.0, log_tail="boom",
                                  created_at=utcnow()) for c, fp in pairs])
