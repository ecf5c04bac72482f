"""The shipped Prometheus alert rules and Grafana dashboard (tools/deploy/): `promtool check rules`
and `promtool test rules` (Debian's prometheus package; tools/install puts promtool in the
venv), the dashboard's structure, and every metric a rule or a panel names present in the
live /metrics of a seeded index."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from neffcache.index import open_index
from tests.support.live_server import request, serve_in_thread
from tests.support.ops_seed import seed_demo, seed_ops_extras

DEPLOY = Path(__file__).resolve().parents[2] / "tools" / "deploy"
RULES = DEPLOY / "prometheus" / "neffcache-rules.yml"
RULE_TESTS = DEPLOY / "prometheus" / "neffcache-rules.test.yml"
DASHBOARD = DEPLOY / "grafana" / "neffcache.json"
METRIC = re.compile(r"\bneffcache_[a-zA-Z0-9_]+")


@pytest.fixture(scope="module")
def promtool() -> str:
    beside = Path(sys.executable).parent / "promtool"
    found = str(beside) if beside.exists() else shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):  # tools/install installs it: in CI its absence is a failure
            pytest.fail("promtool is not installed (tools/install extracts it from Debian's "
                        "prometheus package into .venv/bin)")
        pytest.skip("promtool is not installed (bash tools/install puts it in .venv/bin)")
    return found


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=120)


def test_promtool_check_rules(promtool: str, tmp_path: Path) -> None:
    done = run(promtool, "check", "rules", str(RULES), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
    broken = tmp_path / "broken.yml"  # the check can fail: an expression that does not parse
    broken.write_text(RULES.read_text().replace("neffcache_leases_expired > 0",
                                                "neffcache_leases_expired >"))
    failed = run(promtool, "check", "rules", str(broken), cwd=tmp_path)
    assert failed.returncode != 0, failed.stdout


def test_promtool_unit_tests_of_the_alerts(promtool: str, tmp_path: Path) -> None:
    done = run(promtool, "test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    tested = {t["alertname"] for group in yaml.safe_load(RULE_TESTS.read_text())["tests"]
              for t in group.get("alert_rule_test", ())}
    assert tested == set(alert_names())  # every alert has a unit test
    # ... which can fail: the same tests against rules whose error threshold is off
    for name in (RULES.name, RULE_TESTS.name):
        shutil.copy(RULES.parent / name, tmp_path / name)
    rules = tmp_path / RULES.name
    rules.write_text(rules.read_text().replace("> 0.05", "> 0.5"))
    failed = run(promtool, "test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert failed.returncode != 0
    assert "NeffcacheRestoresFailing" in failed.stdout + failed.stderr


# The rules as they were before they were gated on what an operator must act on: each fires
# on the stable store of neffcache-rules.test.yml.
UNGATED = {
    "NeffcachePrecompileStale": "time() - neffcache_last_precompile_run_timestamp_seconds"
                                " > 24 * 3600",
    "NeffcacheCoverageLow": "neffcache_coverage_ratio > 0 and neffcache_coverage_ratio < 0.9",
    "NeffcacheFailedCells": "neffcache_failed_cells > 0",
    "NeffcacheCoverageZero": 'neffcache_coverage_ratio{fingerprint=""} == 0',
}


def test_a_stable_store_fires_no_rule_and_every_rule_fires_somewhere() -> None:
    groups = {g["name"]: g for g in yaml.safe_load(RULE_TESTS.read_text())["tests"]}
    stable = groups["stable store"]["alert_rule_test"]
    assert {t["alertname"] for t in stable} == set(alert_names())
    assert all(t["exp_alerts"] == [] for t in stable)
    assert {t["eval_time"] for t in stable} >= {"3h", "26h"}  # past PrecompileStale's day
    fires = {t["alertname"] for g in groups.values() for t in g["alert_rule_test"]
             if t["exp_alerts"]}
    assert fires == set(alert_names())  # ... and each rule is shown to fire


@pytest.mark.parametrize("name", sorted(UNGATED))
def test_the_stable_store_case_fails_an_ungated_rule(promtool: str, tmp_path: Path,
                                                     name: str) -> None:
    doc = yaml.safe_load(RULES.read_text())
    rule = next(r for g in doc["groups"] for r in g["rules"] if r["alert"] == name)
    rule["expr"] = UNGATED[name]
    (tmp_path / RULES.name).write_text(yaml.safe_dump(doc, sort_keys=False))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    failed = run(promtool, "test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert failed.returncode != 0
    out = failed.stdout + failed.stderr
    assert re.search(rf"name: stable store,\s+alertname: {name},", out), out


def alert_names() -> list[str]:
    return [r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def rule_exprs() -> list[str]:
    return [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def dashboard() -> dict[str, Any]:
    doc = json.loads(DASHBOARD.read_text())
    assert isinstance(doc, dict)
    return doc


def dashboard_exprs(doc: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in doc["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in doc["templating"]["list"] if v["type"] == "query"]
    return exprs


def test_dashboard_structure() -> None:
    doc = dashboard()
    for key in ("title", "uid", "schemaVersion", "panels", "templating", "time"):
        assert key in doc, key
    assert isinstance(doc["schemaVersion"], int)
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    variables = {v["name"] for v in doc["templating"]["list"]}
    assert {"datasource", "matrix"} <= variables
    cells: dict[tuple[int, int], str] = {}  # Grafana's grid: no two panels on one cell
    for p in doc["panels"]:
        assert {"type", "title", "gridPos", "targets", "datasource"} <= p.keys(), p.get("title")
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, (p["title"], cells.get((x, y)))
                cells[(x, y)] = p["title"]
        assert set(p["gridPos"]) == {"x", "y", "w", "h"}
        assert p["gridPos"]["x"] + p["gridPos"]["w"] <= 24, p["title"]  # Grafana's 24 columns
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert METRIC.search(t["expr"]), (p["title"], t["expr"])
            assert t["datasource"]["uid"] == "${datasource}"
            used = set(re.findall(r"\$(\w+)", t["expr"])) - {"__rate_interval"}
            assert used <= variables, (p["title"], used)


def live_sample_names(tmp_path: Path) -> set[str]:
    """Sample names of /metrics served from the demo index with leases, a run and a
    report-only fingerprint (so every family has samples)."""
    with open_index(f"sqlite:///{tmp_path / 'index.db'}", auto_upgrade=True) as ix:
        seed_ops_extras(ix, seed_demo(ix))
        with serve_in_thread(ix) as base:
            reply = request(base + "/metrics")
    assert reply.status == 200
    return {s.name for f in text_string_to_metric_families(reply.text) for s in f.samples}


def test_every_metric_a_rule_or_panel_names_is_served(tmp_path: Path) -> None:
    served = live_sample_names(tmp_path)
    named = {m for e in rule_exprs() + dashboard_exprs(dashboard()) for m in METRIC.findall(e)}
    assert named, "the rules and panels name metrics"
    assert named - served == set()
    # the check can fail: a name /metrics does not serve is caught
    assert {"neffcache_restores_failed_total"} - served == {"neffcache_restores_failed_total"}
