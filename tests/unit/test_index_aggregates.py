"""The ops aggregates on SQLite: every write path keeps them equal to a full recount, and
the summaries read from them give the same counts as a matrix's full coverage grid."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from neffcache.index import Index, open_index
from neffcache.index import ops_queries as q
from neffcache.index.aggregates import bucket_of, hour_of, rebuild_aggregates
from neffcache.index.matrices import register_matrix
from neffcache.matrix import parse_matrix
from tests.support.ops_seed import matrix_text, sdk_fingerprint
from tests.support.rows import (
    CoverageCountRow,
    FingerprintCountRow,
    ReportFingerprintRow,
    RestoreCountRow,
)
from tests.unit.test_index_factories import make_manifest

MODELS = (CoverageCountRow, FingerprintCountRow, RestoreCountRow, ReportFingerprintRow)


@pytest.fixture
def ix(tmp_path: Path) -> Iterator[Index]:
    with open_index(f"sqlite:///{tmp_path / 'index.db'}", auto_upgrade=True) as index:
        yield index


def snapshot(ix: Index) -> dict[str, set[tuple[Any, ...]]]:
    """Every aggregate row (zero counts dropped: a recount does not write them)."""
    out = {}
    with ix.read_session() as s:
        for model in MODELS:
            cols = list(model.__table__.columns)  # type: ignore[attr-defined]
            rows = {tuple(r) for r in s.execute(select(*cols))}
            out[model.__tablename__] = {r for r in rows if any(
                v for c, v in zip(cols, r, strict=True) if not c.primary_key)}
    return out


def recounted(ix: Index) -> dict[str, set[tuple[Any, ...]]]:
    with ix.write_session() as s:
        rebuild_aggregates(s)
    return snapshot(ix)


def test_every_write_keeps_the_aggregates_equal_to_a_recount(ix: Index) -> None:
    text = matrix_text("m", shapes=6)
    matrix = parse_matrix(text, "m.toml")
    cells = matrix.cells
    fp1, fp2, fp3 = (sdk_fingerprint(n) for n in (1, 2, 3))
    ix.record_failure(None, cells[0], fp1, 1, 2.0, "boom")  # before the matrix is known
    register_matrix(ix, matrix, text)
    ix.record_entries([make_manifest(c, fp1) for c in cells[:3]], "file:///s")
    ix.record_failure(None, cells[3], fp1, 1, 2.0, "boom")
    ix.record_failure(None, cells[3], fp1, 1, 2.0, "boom again")  # still one failed cell
    ix.record_failure(None, cells[1], fp2, 1, 2.0, "boom")
    ix.record_entry(make_manifest(cells[1], fp2), "file:///s")  # failed, then built
    ix.record_restore({"host": "h", "matrix": "m", "fingerprint_key": fp3.key,
                       "cells_restored": 0, "cells_missing": 6, "exit_code": 5,
                       "seconds": 0.7})
    ix.remove_entries([make_manifest(cells[0], fp1).entry_key])  # failed again
    register_matrix(ix, parse_matrix(matrix_text("m", shapes=4), "m.toml"),
                    matrix_text("m", shapes=4), replace=True)  # a new version: counted then
    live = snapshot(ix)
    assert live == recounted(ix)
    grid = ix.matrix_coverage("m", version=1)
    summary = {f.key: (f.ready, f.failed, f.missing)
               for f in ix.coverage_summaries()[0].fingerprints}
    assert (grid.total_cells, ix.matrix_coverage("m").total_cells) == (6, 4)
    assert {f.key: (f.ready, f.failed, f.missing) for f in grid.fingerprints} == {
        fp1.key: (2, 2, 2), fp2.key: (1, 0, 5), fp3.key: (0, 0, 6)}
    assert summary == {fp1.key: (2, 2, 0), fp2.key: (1, 0, 3), fp3.key: (0, 0, 4)}


def test_restore_outcomes_split_misses_and_the_timeline_counts_per_day(ix: Index) -> None:
    fp = sdk_fingerprint(1)
    for code, restored in ((0, 2), (3, 0), (3, 0), (5, 0), (3, 1), (1, 0)):
        ix.record_restore({"host": "h", "matrix": "m", "fingerprint_key": fp.key,
                           "cells_restored": restored, "cells_missing": 1,
                           "exit_code": code, "seconds": 3.0})
    by = {o.outcome: o for o in q.restore_outcomes(ix)}
    assert (by["miss"].count, by["miss"].no_entry, by["miss"].other_fingerprint) == (3, 2, 1)
    assert (by["hit"].count, by["partial"].count, by["error"].count) == (1, 1, 1)
    points = q.restore_timeline(ix, days=3)
    assert len(points) == 3
    last = points[-1].to_json()
    assert (last["hit"], last["partial"], last["miss_no_entry"], last["miss_other_fingerprint"],
            last["error"]) == (1, 1, 2, 1, 1)
    assert sum(p.hit for p in points[:-1]) == 0


def test_hour_and_bucket_rules() -> None:
    assert hour_of(datetime(2026, 1, 2, 3, 4, 5)) == datetime(2026, 1, 2, 3, tzinfo=timezone.utc)
    assert [bucket_of(s) for s in (0.1, 0.5, 0.6, 600.0, 601.0)] == [0, 0, 1, 9, 10]


def test_batched_recording_keeps_the_aggregates_and_commits_a_batch_at_a_time(
        ix: Index, monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlalchemy import event

    from neffcache.index import api

    text = matrix_text("m", shapes=7)
    matrix = parse_matrix(text, "m.toml")
    register_matrix(ix, matrix, text)
    fp = sdk_fingerprint(1)
    ix.record_failure(None, matrix.cells[4], fp, 1, 2.0, "boom")  # failed, then built
    commits: list[int] = []
    event.listen(ix.engine, "commit", lambda conn: commits.append(1))
    monkeypatch.setattr(api, "ENTRY_BATCH", 3)
    ms = [make_manifest(c, fp) for c in matrix.cells]
    assert ix.record_entries(ms + ms[:2], "file:///s") == 7  # duplicates count once
    assert len(commits) == 3  # 9 manifests, 3 per transaction
    assert snapshot(ix) == recounted(ix)
    grid = ix.matrix_coverage("m")
    assert {f.key: (f.ready, f.failed, f.missing) for f in grid.fingerprints} == {
        fp.key: (7, 0, 0)}
