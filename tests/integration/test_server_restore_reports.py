"""Restore reports end to end: the real ``neffcache restore`` (subprocess) writes one report
per run to the store, `neffcache reports ingest` puts them in the index, and the API, the
metrics and the coverage grid show them; restore never contacts the index, so one that is
unreachable or never answers changes nothing."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from neffcache.index import open_index
from tests.support.live_server import get_json, request, serve_in_thread
from tests.support.synthetic import make_neff_cache

MATRIX = """\
name = "boot"
backend = "neuron"
[[pipelines]]
name = "tiny"
class = "diffusers:Flux2KleinPipeline"
model = "/models/tiny"
mode = "compile"
shapes = ["64x64", "128x128"]
"""
CELL_64, CELL_128 = "tiny/compile/64x64/b1/tp1", "tiny/compile/128x128/b1/tp1"


def cli(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "neffcache.cli", *args], env=env, text=True,
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=timeout)


@pytest.fixture
def setup(neffcache_home: Path, tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The embedded home with one of the matrix's two cells pushed, and the matrix
    registered; returns (environment, matrix path)."""
    env = dict(os.environ, NEFFCACHE_HOME=str(neffcache_home),
               NEFFCACHE_INSTANCE_TYPE="trn2.48xlarge")
    matrix = tmp_path / "boot.toml"
    matrix.write_text(MATRIX, encoding="utf-8")
    cache = make_neff_cache(tmp_path / "neff", seed=3, count=20, large=0)
    pushed = cli(env, "push", "--matrix", str(matrix), "--cell", CELL_64,
                 "--root", f"neff={cache.root}", "--json")
    assert pushed.returncode == 0, pushed.stderr
    registered = cli(env, "matrix", "register", str(matrix), "--json")
    assert registered.returncode == 0, registered.stderr
    return env, matrix


def restore(env: dict[str, str], matrix: Path, target: Path, *cells: str
            ) -> tuple[int, dict[str, Any], str]:
    args = ["restore", str(matrix), "--to", str(target), "--json"]
    for c in cells:
        args += ["--cells", c]
    done = cli(env, *args)
    return done.returncode, json.loads(done.stdout), done.stderr


@pytest.fixture
def served(neffcache_home: Path) -> Iterator[str]:
    with open_index(f"sqlite:///{neffcache_home / 'index.db'}", auto_upgrade=False) as ix, \
            serve_in_thread(ix) as base:
        yield base


def test_each_restore_run_sends_one_report_the_api_shows(
        setup: tuple[dict[str, str], Path], tmp_path: Path, neffcache_home: Path) -> None:
    env, matrix = setup
    code, doc, _ = restore(env, matrix, tmp_path / "instance")
    assert code == 3 and doc["cells_restored"] == [CELL_64] and doc["cells_missing"] == [CELL_128]
    code2, doc2, _ = restore(env, matrix, tmp_path / "instance", CELL_64)
    assert code2 == 0 and doc2["files_fetched"] == 0  # already in place
    assert len(list((neffcache_home / "store" / "reports").glob("*/*.json"))) == 2
    ingested = cli(env, "reports", "ingest", "--json")
    assert ingested.returncode == 0 and json.loads(ingested.stdout)["added"] == 2

    with open_index(f"sqlite:///{neffcache_home / 'index.db'}", auto_upgrade=False) as ix, \
            serve_in_thread(ix) as base:
        reports = get_json(f"{base}/api/restores")
        assert len(reports) == 2  # one per run
        newest, oldest = reports
        for report, sent, exit_code in ((oldest, doc, 3), (newest, doc2, 0)):
            assert report["host"] == socket.gethostname()
            assert report["matrix"] == "boot"
            assert report["fingerprint_key"] == sent["fingerprint_key"]
            assert report["cells_restored"] == len(sent["cells_restored"])
            assert report["cells_missing"] == len(sent["cells_missing"])
            assert report["bytes_fetched"] == sent["bytes_fetched"]
            assert report["seconds"] == pytest.approx(sent["seconds"])
            assert report["exit_code"] == exit_code
        assert (oldest["outcome"], oldest["missing"]) == ("partial", [CELL_128])
        assert oldest["bytes_fetched"] > 0 and newest["outcome"] == "hit"

        metrics = request(f"{base}/metrics").text
        assert 'neffcache_restores_total{outcome="hit"} 1.0' in metrics
        assert 'neffcache_restores_total{outcome="partial"} 1.0' in metrics
        grid = get_json(f"{base}/api/coverage?matrix=boot")
        (column,) = grid["fingerprints"]
        assert column["key"] == doc["fingerprint_key"]
        assert [(r["cell_id"], r["statuses"]) for r in grid["rows"]] == [
            (CELL_64, ["ready"]), (CELL_128, ["missing"])]
        assert 'neffcache_coverage_ratio{backend="neuron",fingerprint="' in metrics


class SilentListener:
    """A loopback TCP port that accepts connections and never says a word (a hung database)."""

    def __enter__(self) -> int:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        return int(self.sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def test_an_index_that_never_answers_is_never_contacted(
        setup: tuple[dict[str, str], Path], tmp_path: Path, neffcache_home: Path) -> None:
    env, matrix = setup
    with SilentListener() as port:
        hung = dict(env, NEFFCACHE_INDEX=f"postgresql+psycopg://neffcache@127.0.0.1:{port}/db")
        started = time.monotonic()
        code, doc, stderr = restore(hung, matrix, tmp_path / "instance", CELL_64)
        elapsed = time.monotonic() - started
    assert code == 0 and doc["cells_restored"] == [CELL_64]
    assert "warning" not in stderr and "127.0.0.1" not in stderr
    assert len(list((neffcache_home / "store" / "reports").glob("*/*.json"))) == 1
    print(f"\nrestore with a silent index configured: {elapsed:.1f} s wall (restore itself "
          f"{doc['seconds']:.2f} s)")
