"""/metrics parsed with prometheus_client's own parser and checked against the seeded index,
on SQLite and on the real PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from neffcache.index import open_index
from neffcache.index.ops_values import DURATION_BUCKETS
from tests.support.live_server import request, serve_in_thread
from tests.support.ops_seed import DEMO_RESTORES, OpsExtras, Seeded, seed_demo, seed_ops_extras

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres",
                                                               marks=pytest.mark.postgres)])
def scraped(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[dict[str, Any], Samples, Seeded]]:
    url = _index_url(request, tmp_path_factory)
    with open_index(url, auto_upgrade=True) as ix:
        data = seed_demo(ix)
        with serve_in_thread(ix) as base:
            reply = request_metrics(base)
    families, samples = parse(reply)
    yield families, samples, data


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres",
                                                               marks=pytest.mark.postgres)])
def scraped_ops(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[tuple[Samples, Seeded, OpsExtras, float]]:
    """The demo index plus leases, a precompile run and a report-only fingerprint."""
    url = _index_url(request, tmp_path_factory)
    with open_index(url, auto_upgrade=True) as ix:
        data = seed_demo(ix)
        before = time.time()
        extras = seed_ops_extras(ix, data)
        with serve_in_thread(ix) as base:
            _, samples = parse(request_metrics(base))
    yield samples, data, extras, before


def _index_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('metrics') / 'index.db'}"
    return str(request.getfixturevalue("pg_new_database")())


def parse(text: str) -> tuple[dict[str, Any], Samples]:
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples: Samples = {(s.name, frozenset(s.labels.items())): s.value
                        for f in families.values() for s in f.samples}
    return families, samples


def request_metrics(base: str) -> str:
    reply = request(base + "/metrics")
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("text/plain")
    return reply.text


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def test_types_of_the_families(scraped: tuple[dict[str, Any], Samples, Seeded]) -> None:
    families, _, _ = scraped
    kinds = {name: f.type for name, f in families.items()}
    assert kinds == {
        "neffcache_index_up": "gauge", "neffcache_entries": "gauge",
        "neffcache_entry_bytes": "gauge", "neffcache_matrix_cells": "gauge",
        "neffcache_coverage_ratio": "gauge", "neffcache_coverage_cells": "gauge",
        "neffcache_failed_cells": "gauge", "neffcache_cells_in_progress": "gauge",
        "neffcache_leases_active": "gauge", "neffcache_leases_expired": "gauge",
        "neffcache_last_precompile_run_timestamp_seconds": "gauge",
        "neffcache_precompile_fingerprint_last_run_timestamp_seconds": "gauge",
        "neffcache_restore_fingerprint_last_seen_timestamp_seconds": "gauge",
        "neffcache_restores": "counter",
        "neffcache_restore_bytes": "counter",
        "neffcache_restore_duration_seconds": "histogram",
    }


def test_entries_and_bytes_per_sdk_version(scraped: tuple[dict[str, Any], Samples, Seeded]
                                           ) -> None:
    _, samples, data = scraped
    assert value(samples, "neffcache_index_up") == 1
    for fp in data.fingerprints:
        sdk = fp.get("version.neuronx-cc")
        assert value(samples, "neffcache_entries", backend="neuron", sdk_version=sdk) == \
            data.count(fp, "ready")
        assert value(samples, "neffcache_entry_bytes", backend="neuron", sdk_version=sdk) == \
            data.entry_bytes[fp.key]


def test_coverage_ratio_and_failed_cells(scraped: tuple[dict[str, Any], Samples, Seeded]
                                         ) -> None:
    _, samples, data = scraped
    assert value(samples, "neffcache_matrix_cells", matrix="demo") == 6
    assert value(samples, "neffcache_matrix_cells", matrix="other") == 2
    for fp in data.fingerprints:
        labels = {"matrix": "demo", "fingerprint": fp.key, "backend": "neuron",
                  "sdk_version": fp.get("version.neuronx-cc")}
        assert value(samples, "neffcache_coverage_ratio", **labels) == \
            pytest.approx(data.count(fp, "ready") / 6)
        for status in ("ready", "failed", "missing"):
            assert value(samples, "neffcache_coverage_cells", status=status, **labels) == \
                data.count(fp, status)
        assert value(samples, "neffcache_failed_cells", matrix="demo", fingerprint=fp.key) == \
            data.count(fp, "failed")
    other = [v for k, v in samples.items() if k[0] == "neffcache_coverage_ratio"
             and ("matrix", "other") in k[1]]
    assert other == [0.0]  # nothing built: one series at 0, so a ratio alert fires for it


def test_restore_outcomes_and_duration_histogram(
        scraped: tuple[dict[str, Any], Samples, Seeded]) -> None:
    _, samples, _ = scraped
    expected = {"hit": [r for r in DEMO_RESTORES if r[6] == 0],
                "partial": [r for r in DEMO_RESTORES if r[6] == 3 and r[2] > 0],
                "miss": [], "error": [r for r in DEMO_RESTORES if r[6] not in (0, 3, 5)]}
    for outcome, rows in expected.items():
        assert value(samples, "neffcache_restores_total", outcome=outcome) == len(rows)
        assert value(samples, "neffcache_restore_bytes_total", outcome=outcome) == \
            sum(r[4] for r in rows)
        h = "neffcache_restore_duration_seconds"
        assert value(samples, f"{h}_count", outcome=outcome) == len(rows)
        assert value(samples, f"{h}_sum", outcome=outcome) == pytest.approx(
            sum(r[5] for r in rows))
        for bound in DURATION_BUCKETS:
            assert value(samples, f"{h}_bucket", outcome=outcome, le=repr(bound)) == \
                sum(1 for r in rows if r[5] <= bound), (outcome, bound)
        assert value(samples, f"{h}_bucket", outcome=outcome, le="+Inf") == len(rows)


def series(samples: Samples, name: str, **labels: str) -> dict[frozenset[tuple[str, str]], float]:
    """Every sample of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return {k[1]: v for k, v in samples.items() if k[0] == name and want <= k[1]}


def test_leases_and_cells_in_progress(scraped_ops: tuple[Samples, Seeded, OpsExtras, float]
                                      ) -> None:
    samples, data, extras, _ = scraped_ops
    fp = extras.leased.key
    assert value(samples, "neffcache_leases_active", matrix="demo", fingerprint=fp) == 1
    assert value(samples, "neffcache_leases_expired", matrix="demo", fingerprint=fp) == 1
    assert value(samples, "neffcache_cells_in_progress", matrix="demo", fingerprint=fp) == 1
    labels = {"matrix": "demo", "fingerprint": fp, "backend": "neuron", "sdk_version": "2.3.0"}
    assert value(samples, "neffcache_coverage_cells", status="in_progress", **labels) == 1
    assert value(samples, "neffcache_coverage_cells", status="missing", **labels) == 5
    assert value(samples, "neffcache_coverage_ratio", **labels) == 0
    for other in data.fingerprints:  # no lease: nothing in progress, no lease series
        assert value(samples, "neffcache_cells_in_progress", matrix="demo",
                     fingerprint=other.key) == 0
        assert not series(samples, "neffcache_leases_active", fingerprint=other.key)
    assert len(series(samples, "neffcache_leases_active")) == 1  # one series per pair held


def test_a_fingerprint_only_restores_named_has_a_ratio_of_zero(
        scraped_ops: tuple[Samples, Seeded, OpsExtras, float]) -> None:
    samples, _, extras, _ = scraped_ops
    ratios = series(samples, "neffcache_coverage_ratio", matrix="other")
    # the report's fingerprint replaces the empty-label series of a matrix with nothing built
    assert ratios == {frozenset({"matrix": "other", "fingerprint": extras.reported.key,
                                 "backend": "unknown", "sdk_version": "unknown"}.items()): 0.0}
    assert value(samples, "neffcache_coverage_cells", matrix="other", status="missing",
                 fingerprint=extras.reported.key, backend="unknown", sdk_version="unknown") == 2


def test_last_precompile_run_per_matrix(scraped_ops: tuple[Samples, Seeded, OpsExtras, float]
                                        ) -> None:
    samples, _, _, before = scraped_ops
    last = value(samples, "neffcache_last_precompile_run_timestamp_seconds", matrix="demo")
    assert before - 5 <= last <= time.time() + 5  # the database's clock, this host's here
    assert value(samples, "neffcache_last_precompile_run_timestamp_seconds", matrix="other") == 0


def test_last_precompile_run_per_matrix_and_fingerprint(
        scraped_ops: tuple[Samples, Seeded, OpsExtras, float]) -> None:
    samples, data, extras, before = scraped_ops
    runs = series(samples, "neffcache_precompile_fingerprint_last_run_timestamp_seconds")
    # seed_demo's failures come with a run per fingerprint (matrix "seed"); the extras start
    # one of "demo" under the leased fingerprint
    assert {(dict(k)["matrix"], dict(k)["fingerprint"]) for k in runs} == \
        {("seed", fp.key) for fp in data.fingerprints} | {("demo", extras.leased.key)}
    assert all(before - 60 <= v <= time.time() + 5 for v in runs.values())


def test_a_run_older_than_the_window_has_no_per_fingerprint_series(tmp_path: Path) -> None:
    from neffcache.index.models import PrecompileRunRow

    with open_index(f"sqlite:///{tmp_path / 'index.db'}", auto_upgrade=True) as ix:
        data = seed_demo(ix)
        old, recent = data.fingerprints
        with ix.write_session() as s:
            s.query(PrecompileRunRow).delete()
        for fp, days in ((old, 8), (recent, 1)):
            run = ix.start_run("ci", fp, "demo")
            with ix.write_session() as s:
                s.get(PrecompileRunRow, run).started_at = (  # type: ignore[union-attr]
                    datetime.now(timezone.utc) - timedelta(days=days))
        with serve_in_thread(ix) as base:
            _, samples = parse(request_metrics(base))
    runs = series(samples, "neffcache_precompile_fingerprint_last_run_timestamp_seconds")
    assert [(dict(k)["matrix"], dict(k)["fingerprint"]) for k in runs] == [("demo", recent.key)]
    assert time.time() - next(iter(runs.values())) == pytest.approx(86400, abs=120)
    # the per-matrix family still says when "demo" last ran (the 1-day-old run)
    assert time.time() - value(samples, "neffcache_last_precompile_run_timestamp_seconds",
                               matrix="demo") == pytest.approx(86400, abs=120)


def test_when_restores_last_named_each_fingerprint(
        scraped_ops: tuple[Samples, Seeded, OpsExtras, float]) -> None:
    samples, data, extras, before = scraped_ops
    seen = series(samples, "neffcache_restore_fingerprint_last_seen_timestamp_seconds")
    named = {("demo", fp.key) for fp in data.fingerprints} | {("other", extras.reported.key)}
    assert {(dict(k)["matrix"], dict(k)["fingerprint"]) for k in seen} == named
    assert all(before - 60 <= v <= time.time() + 5 for v in seen.values())
