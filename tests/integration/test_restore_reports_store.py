"""Restore reports through the store, on the moto S3 server: a restore with no index writes
exactly one report object and imports no SQLAlchemy; reindex, `reports ingest` and serve's
poller put it into the index once, however often they run; malformed objects are skipped; a
restore that cannot reach the store spools its report, and the next one that can sends it."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from neffcache.index import open_index
from neffcache.index.ops_queries import list_restores
from neffcache.index.reindex import ReportPoller
from neffcache.reports import decode_report
from neffcache.store import open_store
from neffcache.store.base import Store
from tests.support.live_server import get_json, serve_subprocess
from tests.support.servers import free_port
from tests.support.synthetic import make_neff_cache

pytestmark = pytest.mark.s3

MATRIX = """\
name = "fleet"
backend = "neuron"
[[pipelines]]
name = "tiny"
class = "diffusers:Flux2KleinPipeline"
model = "/models/tiny"
mode = "compile"
shapes = ["64x64", "128x128"]
"""
CELL_64, CELL_128 = "tiny/compile/64x64/b1/tp1", "tiny/compile/128x128/b1/tp1"

Run = Callable[..., subprocess.CompletedProcess[str]]


def imported(stderr: str) -> set[str]:
    """Top-level module names from `python -X importtime` output."""
    return {line.rsplit("|", 1)[1].strip().split(".")[0] for line in stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


@pytest.fixture
def env(s3_env: dict[str, str], s3_url: str, tmp_path: Path) -> dict[str, str]:
    """An instance's environment: the store on S3, a known target, a fresh empty home (no
    index, no config)."""
    return dict(os.environ, NEFFCACHE_STORE=s3_url, NEFFCACHE_INSTANCE_TYPE="trn2.48xlarge",
                NEFFCACHE_HOME=str(tmp_path / "instance-home"))


@pytest.fixture
def run(env: dict[str, str]) -> Run:
    def cli(*args: str, extra: dict[str, str] | None = None, importtime: bool = False,
            ) -> subprocess.CompletedProcess[str]:
        flags = ["-X", "importtime"] if importtime else []
        return subprocess.run([sys.executable, *flags, "-m", "neffcache.cli", *args],
                              env={**env, **(extra or {})}, text=True, capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=300)

    return cli


@pytest.fixture
def pushed(run: Run, tmp_path: Path) -> tuple[Path, str]:
    """The matrix with its 64x64 cell published (from a CI home); returns (matrix, entry key)."""
    matrix = tmp_path / "fleet.toml"
    matrix.write_text(MATRIX, encoding="utf-8")
    cache = make_neff_cache(tmp_path / "neff", seed=7, count=12, large=0)
    done = run("push", "--matrix", str(matrix), "--cell", CELL_64, "--root",
               f"neff={cache.root}", "--json", extra={"NEFFCACHE_HOME": str(tmp_path / "ci")})
    assert done.returncode == 0, done.stderr
    return matrix, json.loads(done.stdout)["entry_key"]


def report_keys(store: Store) -> list[str]:
    return sorted(store.list("reports/"))


def test_restore_without_an_index_writes_one_report_object_and_imports_no_sqlalchemy(
        run: Run, pushed: tuple[Path, str], s3_url: str, env: dict[str, str],
        tmp_path: Path) -> None:
    matrix, entry_key = pushed
    done = run("restore", str(matrix), "--to", str(tmp_path / "cache"), "--json",
               importtime=True)
    assert done.returncode == 3, done.stderr  # 128x128 has no entry
    assert "sqlalchemy" not in imported(done.stderr) and "alembic" not in imported(done.stderr)
    assert "warning:" not in done.stderr
    assert not (Path(env["NEFFCACHE_HOME"]) / "index.db").exists()

    store = open_store(s3_url)
    (key,) = report_keys(store)
    report = decode_report(store.read(key), source=key)
    sent = json.loads(done.stdout)
    assert key == report.key and key.startswith(f"reports/{report.time:%Y-%m-%d}/")
    assert (report.matrix, report.status, report.exit_code) == ("fleet", "partial", 3)
    assert report.cells_restored == (CELL_64,) and report.cells_missing == (CELL_128,)
    assert report.entries == (entry_key,) and report.files_fetched == sent["files_fetched"]
    assert report.fingerprint is not None and report.fingerprint.key == sent["fingerprint_key"]
    assert report.store == s3_url and "testing" not in store.read(key).decode()

    again = run("restore", str(matrix), "--to", str(tmp_path / "cache"), "--cells", CELL_64)
    assert again.returncode == 0, again.stderr  # nothing fetched: still one report per run
    assert len(report_keys(store)) == 2

    off = run("restore", str(matrix), "--to", str(tmp_path / "cache"), "--cells", CELL_64,
              "--report-to", "none")
    assert off.returncode == 0 and len(report_keys(store)) == 2


def test_reindex_and_reports_ingest_put_a_report_in_the_index_once(
        run: Run, pushed: tuple[Path, str], s3_url: str, tmp_path: Path) -> None:
    matrix, entry_key = pushed
    assert run("restore", str(matrix), "--to", str(tmp_path / "cache"), "--cells",
               CELL_64).returncode == 0
    index = {"NEFFCACHE_INDEX": f"sqlite:///{tmp_path / 'team.db'}"}
    assert run("db", "upgrade", extra=index).returncode == 0

    first = run("reindex", "--json", extra=index)
    second = run("reindex", "--json", extra=index)
    third = run("reports", "ingest", "--json", extra=index)
    assert first.returncode == second.returncode == third.returncode == 0, first.stderr
    assert json.loads(first.stdout)["reports"] == {
        "scanned": 1, "added": 1, "already_ingested": 0, "invalid": []}
    assert json.loads(second.stdout)["reports"]["added"] == 0
    assert json.loads(second.stdout)["reports"]["already_ingested"] == 1
    assert json.loads(third.stdout)["added"] == 0

    with open_index(index["NEFFCACHE_INDEX"], auto_upgrade=False) as ix:
        (row,) = list_restores(ix)
        (entry,) = ix.entries()
    key = report_keys(open_store(s3_url))[0]
    report = decode_report(open_store(s3_url).read(key), source=key)
    assert (row.host, row.matrix, row.exit_code, row.cells_restored) == (
        report.host, "fleet", 0, 1)
    assert entry.entry_key == entry_key and entry.last_used_at == report.time


def test_serves_poller_ingests_new_reports_once_and_skips_malformed_objects(
        run: Run, pushed: tuple[Path, str], s3_url: str, tmp_path: Path) -> None:
    matrix, _ = pushed
    assert run("restore", str(matrix), "--to", str(tmp_path / "cache"), "--cells",
               CELL_64).returncode == 0
    store = open_store(s3_url)
    (good,) = report_keys(store)
    day = good.split("/")[1]
    bad = {f"reports/{day}/evil-20000101T000000Z-00000000.json": b'{"kind": "neffcache.re',
           f"reports/{day}/notes.txt": b"hello",
           f"reports/{day}/x-{day.replace('-', '')}T000000Z-0000000f.json": json.dumps(
               {**json.loads(store.read(good)), "host": {"$ne": 1}}).encode()}
    for k, data in bad.items():
        assert store.put(k, io.BytesIO(data))
    warnings: list[str] = []
    with open_index(f"sqlite:///{tmp_path / 'serve.db'}", auto_upgrade=True) as ix:
        poller = ReportPoller(ix, store, warn=warnings.append)
        now = datetime.now(timezone.utc)
        first, second = poller.tick(now), poller.tick(now)
        assert (first.added, len(first.invalid)) == (1, 3)
        assert (second.scanned, second.added) == (0, 0)  # everything settled: nothing re-read
        rows = list_restores(ix)
    assert len(rows) == 1 and rows[0].matrix == "fleet"
    assert len(warnings) == 3 and all(w.startswith("warning: restore report skipped: reports/")
                                      for w in warnings)
    assert any("host: expected a string" in w for w in warnings)

    reindexed = run("reindex", "--json", extra={
        "NEFFCACHE_INDEX": f"sqlite:///{tmp_path / 'serve.db'}"})
    assert reindexed.returncode == 0, reindexed.stderr
    doc = json.loads(reindexed.stdout)["reports"]
    assert (doc["added"], doc["already_ingested"], len(doc["invalid"])) == (0, 1, 3)
    assert reindexed.stderr.count("warning: restore report skipped:") == 3


def test_neffcache_serve_ingests_in_the_background(run: Run, pushed: tuple[Path, str],
                                                   env: dict[str, str], tmp_path: Path) -> None:
    matrix, _ = pushed
    with serve_subprocess({**env, "NEFFCACHE_HOME": str(tmp_path / "ops")},
                          "--ingest-every", "0.5") as base:
        assert get_json(f"{base}/api/restores") == []
        assert run("restore", str(matrix), "--to", str(tmp_path / "cache"), "--cells",
                   CELL_64).returncode == 0
        restores: list[Any] = []
        deadline = time.monotonic() + 30
        while not restores and time.monotonic() < deadline:
            time.sleep(0.25)
            restores = get_json(f"{base}/api/restores")
        assert [(r["matrix"], r["exit_code"]) for r in restores] == [("fleet", 0)]
        time.sleep(1.2)  # more ticks: still one
        assert len(get_json(f"{base}/api/restores")) == 1


def test_a_report_that_cannot_be_written_is_one_warning(run: Run, pushed: tuple[Path, str],
                                                        tmp_path: Path) -> None:
    matrix, _ = pushed
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    done = run("restore", str(matrix), "--to", str(tmp_path / "cache"), "--cells", CELL_64,
               "--report-to", str(blocker))
    assert done.returncode == 0
    warnings = [line for line in done.stderr.splitlines() if "report" in line]
    assert len(warnings) == 1 and warnings[0].startswith(
        f"warning: restore report not written to {blocker}")


def test_a_report_the_store_did_not_get_is_spooled_then_sent_by_the_next_restore(
        run: Run, pushed: tuple[Path, str], s3_url: str, tmp_path: Path) -> None:
    matrix, _ = pushed
    cache = tmp_path / "cache"
    store = open_store(s3_url)
    # the same store, out of reach: nothing listens on the endpoint's port
    down = run("restore", str(matrix), "--to", str(cache), "--cells", CELL_64,
               extra={"AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"})
    assert down.returncode == 6, down.stderr
    spool = cache / ".neffcache-entries" / "report-spool"
    (kept,) = spool.iterdir()
    warning = [line for line in down.stderr.splitlines() if "report" in line]
    assert len(warning) == 1 and warning[0].startswith(
        "warning: restore report not written to the store") and f"kept in {spool}" in warning[0]
    spooled = decode_report(kept.read_bytes(), source=str(kept))
    assert (spooled.status, spooled.exit_code, spooled.store) == ("failed", 6, s3_url)
    assert report_keys(store) == []

    back = run("restore", str(matrix), "--to", str(cache), "--cells", CELL_64)
    assert back.returncode == 0, back.stderr
    assert "restore: sent 1 spooled restore report(s)" in back.stderr
    assert "warning" not in back.stderr
    assert list(spool.iterdir()) == []
    keys = report_keys(store)
    assert len(keys) == 2 and spooled.key in keys

    index = {"NEFFCACHE_INDEX": f"sqlite:///{tmp_path / 'team.db'}"}
    assert run("db", "upgrade", extra=index).returncode == 0
    ingested = run("reports", "ingest", "--json", extra=index)
    assert ingested.returncode == 0, ingested.stderr
    assert json.loads(ingested.stdout)["added"] == 2
    with open_index(index["NEFFCACHE_INDEX"], auto_upgrade=False) as ix:
        rows = sorted(list_restores(ix), key=lambda r: r.created_at)
    assert [(r.exit_code, r.cells_restored, r.cells_missing) for r in rows] == [
        (6, 0, 1), (0, 1, 0)]
    assert rows[0].created_at == spooled.time and rows[0].host == spooled.host
