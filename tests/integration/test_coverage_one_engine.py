"""One coverage engine: on the same index (ready, failed, in_progress and missing cells for two
fingerprints), ``neffcache coverage NAME --json``, the face calls ``neffcache.coverage(...)``
and ``neffcache.stream_coverage(...)``, /api/coverage (FastAPI's TestClient), the dashboard's
data (the summary it opens on, then its grid requests), /api/summary and /metrics give the
same status for every cell x fingerprint and the same counts; on SQLite and on the real
PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from neffcache import CoverageRequest, coverage, stream_coverage
from neffcache.cli import group, run
from neffcache.cli._common import encode_line
from neffcache.fingerprint import Fingerprint
from neffcache.index import open_index
from neffcache.server.app import create_app
from tests.support.ops_seed import FAILED, MISSING, READY, matrix_text, sdk_fingerprint, seed

IN_PROGRESS = "in_progress"
# Cell n x (fingerprint 1, fingerprint 2); a status marked * also gets a live lease (a
# precompile --claim worker is warming it): in_progress, whatever it was before.
TABLE = [
    (READY, READY), (READY, FAILED), (FAILED, MISSING), (MISSING, READY),
    (FAILED + "*", MISSING + "*"), (MISSING + "*", FAILED + "*"), (MISSING, MISSING),
    (FAILED, READY),
]


@dataclass(frozen=True)
class Seed:
    url: str
    fingerprints: tuple[Fingerprint, ...]
    expected: dict[tuple[str, str], str]  # (cell id, fingerprint key) -> status


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def index(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Seed]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'index.db'}"
    else:
        url = request.getfixturevalue("pg_new_database")()
    fps = (sdk_fingerprint(1), sdk_fingerprint(2))
    with open_index(url, auto_upgrade=True) as ix:
        seeded = seed(ix, matrix_text("m", modes=("compile", "eager"), shapes=4), fps,
                      lambda n, i: TABLE[n][i].rstrip("*"))
        cells = seeded.matrix.cells
        expected = dict(seeded.statuses)
        for n, row in enumerate(TABLE):
            for i, status in enumerate(row):
                if status.endswith("*"):
                    cell, fp = cells[n], fps[i]
                    ix.queue_claims("m", [cell], fp, [c.key for c in cells])
                    lease = ix.claim_next([cell.key], fp.key, holder="w" * 32,
                                          host="worker-1 pid 7", lease_seconds=3600,
                                          max_attempts=3).lease
                    assert lease is not None, (n, i)
                    expected[(cell.id, fp.key)] = IN_PROGRESS
    assert {s for s in expected.values()} == {READY, FAILED, MISSING, IN_PROGRESS}
    yield Seed(url, fps, expected)


def cli_json(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(group, ["coverage", *args, "--json"])
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def statuses_of_rows(rows: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    return {(r["cell_id"], r["fingerprint_key"]): r["status"] for r in rows}


def counts_of(fingerprints: list[dict[str, Any]]) -> dict[str, tuple[int, int, int, int]]:
    return {f["key"]: (f["ready"], f["in_progress"], f["failed"], f["missing"])
            for f in fingerprints}


def test_cli_api_face_summary_and_metrics_agree(index: Seed) -> None:
    keys = [fp.key for fp in index.fingerprints]
    want_counts = {k: tuple(sum(1 for (_, fk), s in index.expected.items()
                                if fk == k and s == status)
                            for status in (READY, IN_PROGRESS, FAILED, MISSING)) for k in keys}

    # The CLI, with the two fingerprints as its columns, and with its default columns (this
    # host's fingerprint, nothing built for it, comes first).
    cli = cli_json("m", "--index", index.url, "--fingerprint", keys[0], "--fingerprint", keys[1])
    assert statuses_of_rows(cli["rows"]) == index.expected
    assert counts_of(cli["fingerprints"]) == want_counts
    default = cli_json("m", "--index", index.url)
    assert {k: v for k, v in statuses_of_rows(default["rows"]).items()
            if k[1] in keys} == index.expected
    assert [f["key"] for f in default["fingerprints"]][1:] == sorted(keys)

    # The face call.
    result = coverage(CoverageRequest(matrix="m", fingerprints=keys, index=index.url))
    assert {(r.cell_id, r.fingerprint_key): r.status for r in result.report.rows} == \
        index.expected
    assert result.to_json() == cli and result.exit_code == 0

    # The face's stream: the same document, its rows as they are read.
    with stream_coverage(CoverageRequest(matrix="m", fingerprints=keys,
                                         index=index.url)) as stream:
        head = stream.head_json()
        rows = [json.loads(line) for line in stream.lines(encode_line)]
        assert {**head, "rows": rows, **stream.tail_json()} == cli
        assert stream.fingerprints == result.report.fingerprints

    with open_index(index.url, auto_upgrade=False) as ix, \
            TestClient(create_app(ix)) as client:
        # The API's grid, one page and then two pages of 5 cells.
        grid = client.get("/api/coverage", params={"matrix": "m"}).json()
        columns = [f["key"] for f in grid["fingerprints"]]
        assert sorted(columns) == sorted(keys)
        got = {(r["cell_id"], k): s for r in grid["rows"]
               for k, s in zip(columns, r["statuses"], strict=True)}
        assert got == index.expected
        assert counts_of(grid["fingerprints"]) == want_counts
        paged = [client.get("/api/coverage", params={"matrix": "m", "offset": o, "limit": 5})
                 .json() for o in (0, 5)]
        assert [r for p in paged for r in p["rows"]] == grid["rows"]
        assert all(counts_of(p["fingerprints"]) == want_counts for p in paged)

        # The dashboard's summary and /metrics (the aggregates, leases moved by the rule).
        summary = client.get("/api/summary").json()
        (m,) = [c for c in summary["coverage"] if c["matrix"] == "m"]
        assert counts_of(m["fingerprints"]) == want_counts

        # The dashboard's data: it opens on the summary's matrix and asks for its grid a
        # page at a time, with a cell pattern when one is typed (app.js, loadGrid).
        assert [f["key"] for f in m["fingerprints"]] == columns
        shown: dict[tuple[str, str], str] = {}
        for offset in (0, 3, 6):
            page = client.get("/api/coverage", params={"matrix": m["matrix"],
                                                       "offset": offset, "limit": 3}).json()
            assert [f["key"] for f in page["fingerprints"]] == columns
            assert counts_of(page["fingerprints"]) == want_counts
            shown.update({(r["cell_id"], k): s for r in page["rows"]
                          for k, s in zip(columns, r["statuses"], strict=True)})
        assert shown == index.expected
        eager = client.get("/api/coverage", params={"matrix": "m", "cells": "*/eager/*"}).json()
        assert {(r["cell_id"], k): s for r in eager["rows"]
                for k, s in zip([f["key"] for f in eager["fingerprints"]], r["statuses"],
                                strict=True)} == {
            k: s for k, s in index.expected.items() if "/eager/" in k[0]}
        metrics = client.get("/metrics").text
    samples = {(s.name, frozenset(s.labels.items())): s.value
               for f in text_string_to_metric_families(metrics) for s in f.samples}
    for fp in index.fingerprints:
        labels = {"matrix": "m", "fingerprint": fp.key, "backend": "neuron",
                  "sdk_version": fp.get("version.neuronx-cc")}
        got_metrics = tuple(int(samples[("neffcache_coverage_cells",
                                         frozenset({**labels, "status": s}.items()))])
                            for s in (READY, IN_PROGRESS, FAILED, MISSING))
        assert got_metrics == want_counts[fp.key], fp.key


def test_the_check_is_judged_the_same_by_the_cli_and_the_face(
        index: Seed, capsys: pytest.CaptureFixture[str]) -> None:
    keys = [fp.key for fp in index.fingerprints]
    result = coverage(CoverageRequest(matrix="m", fingerprints=keys, check=True,
                                      index=index.url))
    not_ready = {(r.cell_id, r.fingerprint_key) for r in result.not_ready or ()}
    assert not_ready == {k for k, s in index.expected.items() if s != READY}
    assert result.exit_code == 3
    code = run(["coverage", "m", "--index", index.url, "--check", "--json",
                *[a for k in keys for a in ("--fingerprint", k)]])
    out, err = capsys.readouterr()
    assert code == 3 and json.loads(out) == result.to_json()
    assert str(result.error()) in err
