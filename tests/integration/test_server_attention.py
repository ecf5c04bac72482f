"""What the dashboard's first screen reads, through the live API on SQLite and on the real
PostgreSQL: /api/attention across every matrix (failed and stale cells, fleet fingerprints
with nothing built, only recent restores counting), /api/fingerprint-diff, the coverage
columns' distinct fields, runs that say "cancelled", and the OpenAPI document grown only by
additions."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from neffcache.index import open_index
from neffcache.index.tables import report_fingerprints
from tests.support.live_server import get_json, request, serve_in_thread
from tests.support.ops_seed import (
    FAILED,
    FLAGS,
    READY,
    Seeded,
    flag_fingerprints,
    matrix_text,
    seed,
    seed_problems,
)


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres",
                                                               marks=pytest.mark.postgres)])
def seeded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[str, Seeded, str, str]]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('attention') / 'index.db'}"
    else:
        url = request.getfixturevalue("pg_new_database")()
    with open_index(url, auto_upgrade=True) as ix:
        data, reported, cancelled = seed_problems(ix)
        with serve_in_thread(ix) as base:
            yield base, data, reported, cancelled


def api(base: str, path: str, **params: Any) -> Any:
    return get_json(f"{base}{path}?{urllib.parse.urlencode(params)}")


def test_attention_spans_every_matrix(seeded: tuple[str, Seeded, str, str]) -> None:
    base, data, reported, _ = seeded
    doc = api(base, "/api/attention")
    failed = {(c, k) for (c, k), s in data.statuses.items() if s == FAILED}
    assert doc["ok"] is False and doc["fleet_window_days"] == 7
    assert doc["failed_cells"] == len(failed) == 2
    assert {(f["matrix"], f["cell_id"], f["fingerprint_key"]) for f in doc["failed"]} == {
        ("demo", c, k) for c, k in failed}
    assert doc["stale_cells"] == 1
    assert [(s["matrix"], s["host"]) for s in doc["stale"]] == [("demo", "w-dead")]
    assert [(u["matrix"], u["fingerprint"]["key"], u["fingerprint"]["restores"])
            for u in doc["unbuilt"]] == [("other", reported, 1)]
    assert api(base, "/api/attention", limit=1)["failed_cells"] == 2
    assert len(api(base, "/api/attention", limit=1)["failed"]) == 1


def test_a_stable_index_needs_no_attention_and_old_restores_do_not_count(
        tmp_path: Path) -> None:
    with open_index(f"sqlite:///{tmp_path / 'index.db'}", auto_upgrade=True) as ix:
        data = seed(ix, matrix_text("stable", shapes=3), flag_fingerprints()[:1],
                    lambda n, i: READY)
        ix.record_restore({"host": "i-1", "matrix": "stable", "exit_code": 0,
                           "fingerprint_key": data.fingerprints[0].key,
                           "cells_restored": [c.id for c in data.matrix.cells]})
        ix.record_restore({"host": "i-2", "matrix": "stable", "exit_code": 3,
                           "fingerprint_key": "ab" * 32, "cells_missing": 3})
        with serve_in_thread(ix) as base:
            fresh = api(base, "/api/attention")
            with ix.write_session() as s:  # the unbuilt fingerprint's reports are 8 days old
                s.execute(update(report_fingerprints)
                          .where(report_fingerprints.c.fingerprint_key == "ab" * 32)
                          .values(last_seen_at=datetime.now(timezone.utc) - timedelta(days=8)))
            old = api(base, "/api/attention")
    assert [u["fingerprint"]["key"] for u in fresh["unbuilt"]] == ["ab" * 32]
    assert fresh["ok"] is False
    assert old == {"ok": True, "fleet_window_days": 7, "failed_cells": 0, "failed": [],
                   "stale_cells": 0, "stale": [], "unbuilt": []}


def test_columns_say_what_tells_them_apart_and_the_diff_explains_it(
        seeded: tuple[str, Seeded, str, str]) -> None:
    base, *_ = seeded
    one, two, other_sdk = flag_fingerprints()
    columns = {f["key"]: f for f in api(base, "/api/coverage", matrix="flags")["fingerprints"]}
    assert columns[one.key]["distinct"] == {"cc_flags": FLAGS[0]}
    assert columns[two.key]["distinct"] == {"cc_flags": FLAGS[1]}
    assert columns[other_sdk.key]["distinct"] == {}  # its SDK tells it apart
    assert (columns[one.key]["nearest"], columns[two.key]["nearest"]) == (two.key, one.key)
    assert columns[other_sdk.key]["nearest"] == one.key  # one field from it, two from two
    diff = api(base, "/api/fingerprint-diff", key=two.key[:10], against=other_sdk.key)
    assert diff["key"] == two.key and diff["against"] == other_sdk.key
    assert [(d["field"], d["value"], d["against"]) for d in diff["differences"]] == [
        ("cc_flags", FLAGS[1], FLAGS[0]), ("version.neuronx-cc", "2.5.0", "2.6.0")]
    assert "NEURON_CC_FLAGS" in diff["differences"][0]["note"]
    summary = api(base, "/api/summary")["coverage"]  # the summary does not compute them
    assert all(f["distinct"] == {} and f["nearest"] is None
               for m in summary for f in m["fingerprints"])


@pytest.mark.parametrize(("query", "status"), [
    ({"key": "0" * 64, "against": "1" * 64}, 404),
    ({"key": "xyz123", "against": "1" * 64}, 400),
    ({"key": "abc"}, 400),
])
def test_fingerprint_diff_errors(seeded: tuple[str, Seeded, str, str],
                                 query: dict[str, str], status: int) -> None:
    reply = request(f"{seeded[0]}/api/fingerprint-diff?{urllib.parse.urlencode(query)}")
    assert reply.status == status, reply.text


def test_runs_say_cancelled_running_or_finished(seeded: tuple[str, Seeded, str, str]) -> None:
    base, _, _, cancelled = seeded
    runs = {r["id"]: r for r in api(base, "/api/runs")}
    assert (runs[cancelled]["status"], runs[cancelled]["cells_cancelled"]) == ("cancelled", 2)
    assert api(base, "/api/run", id=cancelled)["run"]["status"] == "cancelled"
    others = [r for r in runs.values() if r["id"] != cancelled]
    assert {r["status"] for r in others} == {"running", "finished"}
    assert all(r["cells_cancelled"] is None for r in others)
    assert all((r["status"] == "running") == (r["finished_at"] is None) for r in others)


def test_openapi_grows_only_by_additions(seeded: tuple[str, Seeded, str, str]) -> None:
    spec = get_json(seeded[0] + "/openapi.json")
    schemas = spec["components"]["schemas"]
    assert {"/api/attention", "/api/fingerprint-diff"} <= set(spec["paths"])
    run = schemas["RunDoc"]
    assert {"id", "started_at", "finished_at", "host", "fingerprint_key", "matrix", "cells_ok",
            "cells_failed", "failures_recorded", "status", "cells_cancelled"} <= set(
        run["properties"])
    counts = schemas["FingerprintCountsDoc"]["properties"]
    assert {"key", "ratio", "target", "known", "restores", "distinct", "nearest"} <= set(counts)


def test_failed_cells_older_than_the_first_window_are_still_found(tmp_path: Path) -> None:
    """The newest failures are looked at first (``triage.WINDOW`` x limit of them); when too
    few of those still count (their cells were built since, or failed again), every failure
    is: the oldest one here is found behind 24 newer ones that have entries."""
    from neffcache.index import attention
    from neffcache.index.matrices import register_matrix
    from neffcache.index.triage import WINDOW
    from neffcache.matrix import parse_matrix
    from tests.unit.test_index_factories import make_manifest

    text = matrix_text("deep", shapes=25)
    matrix = parse_matrix(text, "deep.toml")
    fp = flag_fingerprints()[0]
    with open_index(f"sqlite:///{tmp_path / 'index.db'}", auto_upgrade=True) as ix:
        register_matrix(ix, matrix, text)
        for cell in matrix.cells:
            ix.record_failure(None, cell, fp, 1, 1.0, "error\n")
        ix.record_entries([make_manifest(c, fp) for c in matrix.cells[1:]], "s3://b/p")
        assert WINDOW < len(matrix.cells) - 1
        found = attention(ix, limit=1)
        two = attention(ix, limit=2)
    assert found.failed_cells == 1
    assert [(f.matrix, f.cell_id) for f in found.failed] == [("deep", matrix.cells[0].id)]
    assert [f.cell_id for f in two.failed] == [matrix.cells[0].id]
