"""Start `neffcache precompile --claim` (or `--shard`) workers as real processes on the
``test-sleep`` TEST BACKEND, for the fleet tests and tools/bench/claims.py."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support.sleep_backend import RECORD_VAR, cell_ids, read_records, write_sleep_matrix

ROOT = Path(__file__).resolve().parents[2]


def draw_seconds(count: int, low: float, high: float, seed: int = 14) -> dict[str, float]:
    """Per-cell compile seconds drawn uniformly from [low, high] (deterministic per seed)."""
    rng = random.Random(seed)
    return {cid: round(rng.uniform(low, high), 3) for cid in cell_ids(count)}


def fleet_env(index_url: str, store: Path, record: Path,
              base: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(base if base is not None else os.environ)
    paths = [str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update(NEFFCACHE_INDEX=index_url, NEFFCACHE_STORE=str(store),
               PYTHONPATH=os.pathsep.join(paths), **{RECORD_VAR: str(record)})
    return env


def start_worker(matrix: Path, env: Mapping[str, str], out: Path, *args: str
                 ) -> subprocess.Popen[bytes]:
    """One worker process: ``neffcache precompile MATRIX ARGS --json`` with the test backend;
    stdout (the JSON report) to ``out``, stderr to ``out`` + ``.log``."""
    cmd = [sys.executable, "-m", "tests.support.sleep_cli", "precompile", str(matrix), *args,
           "--json"]
    with open(out, "wb") as fh, open(f"{out}.log", "wb") as log:
        return subprocess.Popen(cmd, env=dict(env), stdout=fh, stderr=log, cwd=ROOT,
                                stdin=subprocess.DEVNULL)


def wait_for_start(record: Path, parent_pid: int, timeout: float = 120.0
                   ) -> dict[str, object]:
    """The first cell a given worker process started compiling (from the record)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for r in read_records(record, "start"):
            if r["ppid"] == parent_pid:
                return r
        time.sleep(0.05)
    raise TimeoutError(f"worker {parent_pid} started no cell in {timeout} s")


def wait_all(procs: Sequence[subprocess.Popen[bytes]], timeout: float = 600.0) -> list[int]:
    deadline = time.monotonic() + timeout
    return [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]


__all__ = ["draw_seconds", "fleet_env", "start_worker", "wait_all", "wait_for_start",
           "write_sleep_matrix"]
