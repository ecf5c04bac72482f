"""Logs a person can follow: ``precompile`` off a terminal (stderr to a pipe) with the
``test-sleep`` TEST BACKEND prints a heartbeat line per running cell at the --heartbeat
interval (elapsed time increasing, the phase the worker announced, its last log line);
``--log-format jsonl`` makes every stderr line a JSON object; a ``--claim`` worker with
nothing claimable while another runner holds the cell says it is waiting for a lease. Only
loose bounds on timing are asserted (at least 2 beats in a 3 s cell at 1 s)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from neffcache.cli import run
from tests.support.claims_fleet import ROOT, fleet_env, start_worker, wait_all, wait_for_start
from tests.support.sleep_backend import cell_ids, register, write_sleep_matrix

CELL = cell_ids(1)[0]
BEAT = re.compile(r"^\s+beat  (\S+)  (\d+)s (\S+)  log: (.*)$")


@pytest.fixture(autouse=True)
def _test_backend() -> None:
    register()


def _precompile(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    """``precompile`` on a 3 s cell, stdout and stderr to pipes (not a terminal)."""
    matrix = write_sleep_matrix(tmp_path, {CELL: 3.0})
    index_url = f"sqlite:///{tmp_path / 'index.db'}"
    assert run(["db", "upgrade", "--index", index_url]) == 0
    env = fleet_env(index_url, tmp_path / "store", tmp_path / "record.jsonl")
    env.pop("NEFFCACHE_LOG_FORMAT", None)
    proc = subprocess.run([sys.executable, "-m", "tests.support.sleep_cli", "precompile",
                           str(matrix), "--heartbeat", "1", *args], env=env, cwd=ROOT,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def test_text_log_has_heartbeats_at_the_interval(tmp_path: Path) -> None:
    code, out, err = _precompile(tmp_path)
    assert code == 0, err
    lines = err.splitlines()
    assert lines[0].split() == ["start", CELL, "warming"], err
    assert any(line.split()[:2] == ["done", CELL] for line in lines), err  # kept
    beats = [m for line in lines if (m := BEAT.match(line))]
    assert len(beats) >= 2, err
    assert {m.group(1) for m in beats} == {CELL}
    elapsed = [int(m.group(2)) for m in beats]
    assert elapsed == sorted(elapsed) and elapsed[-1] > elapsed[0], err
    # the phase the worker announced, with its last log line (a loaded machine may beat
    # once more while the cell publishes)
    compiling = [m for m in beats if m.group(3) == "compiling"]
    assert compiling and "sleeping 3 s" in compiling[-1].group(4), err
    assert {m.group(3) for m in beats} <= {"compiling", "publishing"}, err
    assert "published" in out  # the results stay on stdout


def test_jsonl_log_is_json_on_every_line(tmp_path: Path) -> None:
    code, out, err = _precompile(tmp_path, "--log-format", "jsonl", "--json")
    assert code == 0, err
    docs = [json.loads(line) for line in err.splitlines()]
    assert all(set(d) == {"ts", "event", "cell", "elapsed", "phase", "message"} for d in docs)
    assert all(d["ts"].endswith("Z") for d in docs)
    beats = [d for d in docs if d["event"] == "heartbeat"]
    assert len(beats) >= 2 and {d["cell"] for d in beats} == {CELL}, err
    assert [d["elapsed"] for d in beats] == sorted(d["elapsed"] for d in beats)
    assert {"start", "done"} <= {d["event"] for d in docs}
    assert json.loads(out)["counts"]["published"] == 1  # --json unchanged, on stdout


def test_a_claim_worker_waiting_for_a_lease_says_so(tmp_path: Path) -> None:
    matrix = write_sleep_matrix(tmp_path, {CELL: 4.0})
    index_url = f"sqlite:///{tmp_path / 'index.db'}"
    assert run(["db", "upgrade", "--index", index_url]) == 0
    record = tmp_path / "record.jsonl"
    env = fleet_env(index_url, tmp_path / "store", record)
    env.pop("NEFFCACHE_LOG_FORMAT", None)
    procs = [start_worker(matrix, env, tmp_path / "a.json", "--claim", "--heartbeat", "1")]
    try:
        wait_for_start(record, procs[0].pid)
        procs.append(start_worker(matrix, env, tmp_path / "b.json", "--claim", "--heartbeat",
                                  "1"))
        assert wait_all(procs, timeout=120) == [0, 0]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    log = Path(f"{tmp_path / 'b.json'}.log").read_text()
    waits = [line for line in log.splitlines() if line.split()[:1] == ["wait"]]
    assert waits, log
    assert "waiting for a lease: 1 cell(s) held by other runners, next check in" in waits[0]
