"""A restore that fails before fetching (store unreachable) still reports: the report to the
store fails with one warning and is kept in the restore's spool; the next restore, reporting
to a local directory it can write, writes the spooled report there first, then its own; and
`neffcache reports ingest --from DIR` puts both in the index (once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from neffcache.reports import decode_report
from tests.support.servers import free_port

MATRIX = """
backend = "inductor"
[[pipelines]]
name = "tiny"
class = "diffusers:Flux2KleinPipeline"
model = "tiny"
mode = "compile"
shapes = ["64x64"]
"""
CLI = [sys.executable, "-m", "neffcache.cli"]


def test_unreachable_store_restore_is_reported(tmp_path: Path) -> None:
    matrix = tmp_path / "m.toml"
    matrix.write_text(MATRIX)
    index_url = f"sqlite:///{tmp_path / 'index.db'}"
    env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
               AWS_DEFAULT_REGION="us-east-1",
               AWS_ENDPOINT_URL=f"http://127.0.0.1:{free_port()}")
    restore = CLI + ["restore", str(matrix), "--to", str(tmp_path / "c"),
                     "--store", "s3://nowhere/prefix"]

    to_store = subprocess.run(restore, env=env, capture_output=True, text=True, timeout=120)
    assert to_store.returncode == 6, to_store.stderr
    assert to_store.stderr.count("warning: restore report not written to the store") == 1
    spool = tmp_path / "c" / ".neffcache-entries" / "report-spool"
    (spooled,) = spool.iterdir()

    reports = tmp_path / "reports"
    run = subprocess.run(restore + ["--report-to", str(reports)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 6, run.stderr
    assert "warning" not in run.stderr
    assert f"restore: sent 1 spooled restore report(s) to {reports}" in run.stderr
    assert list(spool.iterdir()) == []
    names = {p.name for p in reports.iterdir()}
    assert len(names) == 2 and spooled.name in names  # the spooled report, then this run's
    for path in reports.iterdir():
        report = decode_report(path.read_bytes(), source=str(path))
        assert (report.status, report.exit_code, report.cells_missing) == (
            "failed", 6, ("tiny/compile/64x64/b1/tp1",))
        assert report.error and "cannot reach" in report.error
        assert report.store == "s3://nowhere/prefix"

    ingest = CLI + ["reports", "ingest", "--from", str(reports), "--index", index_url, "--json"]
    assert subprocess.run(CLI + ["db", "upgrade", "--index", index_url], env=env,
                          capture_output=True).returncode == 0
    first = subprocess.run(ingest, env=env, capture_output=True, text=True)
    second = subprocess.run(ingest, env=env, capture_output=True, text=True)
    assert first.returncode == second.returncode == 0, first.stderr
    assert (json.loads(first.stdout)["added"], json.loads(second.stdout)["added"]) == (2, 0)
    from neffcache.index import open_index
    from neffcache.index.ops_queries import list_restores

    with open_index(index_url, auto_upgrade=False) as idx:
        rows = list_restores(idx)
    assert [(r.exit_code, r.cells_missing) for r in rows] == [(6, 1), (6, 1)]
