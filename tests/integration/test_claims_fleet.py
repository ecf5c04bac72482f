"""`precompile --claim` with real worker processes on the ``test-sleep`` TEST BACKEND: 4 on
Postgres over 40 cells of 0.2-3 s, and 2 on SQLite over 40 cells of 0.2-1 s (after the kill
one worker does them all, so shorter cells keep the test short); one worker is killed with
SIGKILL in the middle of a cell (its compile child dies with it). Every cell must be
published exactly once, store and index must agree, and the killed cell must be claimed
again only after its lease expired. No timing is asserted beyond the lease rule."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select

from neffcache.cli import run
from neffcache.index.models import EntryRow
from neffcache.store import open_store
from tests.support.claims_fleet import (
    draw_seconds,
    fleet_env,
    start_worker,
    wait_all,
    wait_for_start,
)
from tests.support.rows import CellClaimRow
from tests.support.sleep_backend import read_records, register, write_sleep_matrix

LEASE = 4.0
CELLS = 40


@pytest.fixture(autouse=True)
def _test_backend() -> None:
    register()  # this process reads the matrix and the coverage too


def _fleet(tmp_path: Path, index_url: str, workers: int,
           capsys: pytest.CaptureFixture[str], longest: float = 3.0) -> None:
    seconds = draw_seconds(CELLS, 0.2, longest)
    matrix = write_sleep_matrix(tmp_path, seconds)
    store, record = tmp_path / "store", tmp_path / "record.jsonl"
    assert run(["db", "upgrade", "--index", index_url]) == 0
    env = fleet_env(index_url, store, record)
    procs = [start_worker(matrix, env, tmp_path / f"worker{i}.json", "--claim",
                          "--lease", str(LEASE)) for i in range(workers)]
    victim = procs[-1]
    try:
        started = wait_for_start(record, victim.pid)
        time.sleep(0.1)
        killed_at = time.time()
        os.kill(victim.pid, signal.SIGKILL)
        try:  # the compile child dies with its runner (launch); make sure, as a runner would
            os.kill(int(started["pid"]), signal.SIGKILL)
        except ProcessLookupError:
            pass
        codes = wait_all(procs[:-1])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert codes == [0] * (workers - 1)

    starts = Counter(str(r["cell_id"]) for r in read_records(record, "start"))
    ends = Counter(str(r["cell_id"]) for r in read_records(record, "end"))
    killed = str(started["cell_id"])
    assert set(ends) == set(seconds) and set(ends.values()) == {1}  # each finished once
    assert starts == Counter({**dict.fromkeys(seconds, 1), killed: 2})  # only it was re-run
    again = [r for r in read_records(record, "start") if r["cell_id"] == killed][1]
    # re-claimed only after the lease expired: at least LEASE after its last heartbeat,
    # and heartbeats come every LEASE / 3
    assert float(again["t"]) >= killed_at + LEASE * 2 / 3 - 0.2

    reports = [json.loads((tmp_path / f"worker{i}.json").read_text())
               for i in range(workers - 1)]
    statuses = Counter(c["status"] for r in reports for c in r["cells"])
    assert statuses["exists"] == 0 and statuses["failed"] == 0
    st = open_store(str(store))
    manifests = {k.rsplit("/", 1)[1].removesuffix(".json") for k in st.list("manifests/")}
    engine = create_engine(index_url)
    with engine.connect() as conn:
        entries = set(conn.scalars(select(EntryRow.entry_key)))
        queued = conn.scalar(select(func.count()).select_from(CellClaimRow))
    engine.dispose()
    assert len(manifests) == CELLS and entries == manifests  # store and index agree
    assert queued == 0
    capsys.readouterr()
    assert run(["coverage", str(matrix), "--index", index_url, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert {r["status"] for r in rows} == {"ready"} and len(rows) == CELLS


def test_four_workers_on_postgres_each_cell_once_and_a_killed_cell_is_reclaimed(
        tmp_path: Path, pg_new_database: Callable[[], str],
        capsys: pytest.CaptureFixture[str]) -> None:
    _fleet(tmp_path, pg_new_database(), 4, capsys)


def test_two_workers_on_sqlite_each_cell_once_and_a_killed_cell_is_reclaimed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fleet(tmp_path, f"sqlite:///{tmp_path / 'index.db'}", 2, capsys, longest=1.0)
