"""A restore that fails before fetching (store unreachable) still leaves a report in the index."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


def test_unreachable_store_restore_is_reported(tmp_path: Path) -> None:
    matrix = tmp_path / "m.toml"
    matrix.write_text(MATRIX)
    index_url = f"sqlite:///{tmp_path / 'index.db'}"
    env = dict(os.environ, NEFFCACHE_INDEX=index_url, AWS_ACCESS_KEY_ID="testing",
               AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
               AWS_ENDPOINT_URL=f"http://127.0.0.1:{free_port()}")
    cli = [sys.executable, "-m", "neffcache.cli"]
    assert subprocess.run(cli + ["db", "upgrade"], env=env, capture_output=True).returncode == 0

    run = subprocess.run(cli + ["restore", str(matrix), "--to", str(tmp_path / "c"),
                                "--store", "s3://nowhere/prefix"],
                         env=env, capture_output=True, text=True, timeout=120)

    assert run.returncode == 6, run.stderr
    from neffcache.index import open_index

    with open_index(index_url, auto_upgrade=False) as idx:
        from neffcache.index.ops_queries import list_restores

        reports = list_restores(idx)
    assert [r.exit_code for r in reports] == [6]
    assert reports[0].cells_missing == 1
