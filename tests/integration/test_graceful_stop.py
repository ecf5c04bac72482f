"""Graceful stop of ``precompile`` with real processes on the ``test-sleep`` TEST BACKEND:
SIGTERM to a claiming runner mid-cell ends its compile process, releases its lease as
cancelled (no attempt spent, claimable at once) and exits 143 with a one-line summary;
SIGINT stops a static run with 130; a SIGKILLed runner takes its compile process with it;
SIGTERM mid-publish (to S3 behind a proxy that stalls blob uploads) stops it at a safe point:
no entry, the lease released, and the next runner publishes it uploading only what is missing.
Only the issue's bounds are asserted (5 s to a clean stop, a few seconds after a SIGKILL)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select

from neffcache.cli import run
from neffcache.manifest import decode_manifest
from neffcache.store import BLOBS, CELLS, MANIFESTS, PENDING, open_store
from tests.support.claims_fleet import fleet_env, start_worker, wait_for_start
from tests.support.faulty_proxy import FaultyProxy
from tests.support.rows import CellClaimRow
from tests.support.sleep_backend import (
    SECONDS_FILE,
    cell_ids,
    read_records,
    register,
    write_sleep_matrix,
)

LONG = 120.0  # a "compile" far longer than any test: only a stop ends it
CELL = cell_ids(1)[0]


@pytest.fixture(autouse=True)
def _test_backend() -> None:
    register()


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (an exited child not reaped yet is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return not any(_alive(p) for p in pids)


def _claim_row(index_url: str) -> tuple[str | None, int]:
    engine = create_engine(index_url)
    try:
        with engine.connect() as conn:
            row = conn.execute(select(CellClaimRow.holder, CellClaimRow.attempts)).one()
    finally:
        engine.dispose()
    return row[0], int(row[1])


def _wait_claimed(index_url: str, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        holder, attempts = _claim_row(index_url)
        if holder is not None:
            return attempts
        time.sleep(0.05)
    raise TimeoutError("the cell was never claimed")


def _cleanup(procs: list[subprocess.Popen[bytes]], pids: list[int]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    for pid in pids:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _setup(tmp_path: Path, index_url: str) -> tuple[Path, dict[str, str], Path]:
    matrix = write_sleep_matrix(tmp_path, {CELL: LONG})
    record = tmp_path / "record.jsonl"
    assert run(["db", "upgrade", "--index", index_url]) == 0
    return matrix, fleet_env(index_url, tmp_path / "store", record), record


def _sigterm_mid_cell(tmp_path: Path, index_url: str) -> None:
    matrix, env, record = _setup(tmp_path, index_url)
    out_a, out_b = tmp_path / "a.json", tmp_path / "b.json"
    procs: list[subprocess.Popen[bytes]] = []
    pids: list[int] = []
    try:
        a = start_worker(matrix, env, out_a, "--claim", "--lease", "60", "--retries", "0")
        procs.append(a)
        compile_pid = int(wait_for_start(record, a.pid)["pid"])
        pids.append(compile_pid)
        assert _wait_claimed(index_url) == 1  # the claim counted its attempt
        a.send_signal(signal.SIGTERM)
        # within 5 s: the runner is gone and so is its compile process
        assert _gone_within([a.pid, compile_pid], 5.0), "a process of the run is left"
        assert a.wait(timeout=5) == 143
        log = Path(f"{out_a}.log").read_text()
        assert ("neffcache: stopped by SIGTERM: 1 cell(s) running, 1 cancelled, "
                "1 lease(s) released") in log, log
        doc = json.loads(out_a.read_text())
        assert doc["stopped"] == {"running": 1, "cancelled": 1, "released": 1}
        assert [c["status"] for c in doc["cells"]] == ["cancelled"]
        assert _claim_row(index_url) == (None, 0)  # released, and no attempt spent

        # claimable at once by a second runner, with no retry left to spend: with
        # --retries 0 only an unspent attempt and a released lease let it publish
        seconds = matrix.parent / "sleepy-model" / SECONDS_FILE
        seconds.write_text(json.dumps({CELL: 0.2}), encoding="utf-8")
        b = start_worker(matrix, env, out_b, "--claim", "--lease", "60", "--retries", "0")
        procs.append(b)
        assert b.wait(timeout=120) == 0, Path(f"{out_b}.log").read_text()
        assert [c["status"] for c in json.loads(out_b.read_text())["cells"]] == ["published"]
        assert [r["ppid"] for r in read_records(record, "end")] == [b.pid]
    finally:
        _cleanup(procs, pids)


def test_sigterm_to_a_claiming_runner_on_postgres_stops_cleanly_and_frees_the_cell(
        tmp_path: Path, pg_new_database: Callable[[], str]) -> None:
    _sigterm_mid_cell(tmp_path, pg_new_database())


def test_sigterm_to_a_claiming_runner_on_sqlite_stops_cleanly_and_frees_the_cell(
        tmp_path: Path) -> None:
    _sigterm_mid_cell(tmp_path, f"sqlite:///{tmp_path / 'index.db'}")


def test_sigint_stops_a_static_run_with_130(tmp_path: Path) -> None:
    matrix, env, record = _setup(tmp_path, f"sqlite:///{tmp_path / 'index.db'}")
    out = tmp_path / "static.json"
    procs: list[subprocess.Popen[bytes]] = []
    pids: list[int] = []
    try:
        runner = start_worker(matrix, env, out)
        procs.append(runner)
        compile_pid = int(wait_for_start(record, runner.pid)["pid"])
        pids.append(compile_pid)
        runner.send_signal(signal.SIGINT)
        assert _gone_within([runner.pid, compile_pid], 5.0), "a process of the run is left"
        assert runner.wait(timeout=5) == 130
        log = Path(f"{out}.log").read_text()
        assert ("neffcache: stopped by SIGINT: 1 cell(s) running, 1 cancelled, "
                "0 lease(s) released") in log, log
        assert json.loads(out.read_text())["counts"]["failed"] == 0  # cancelled, not failed
    finally:
        _cleanup(procs, pids)


def test_a_sigkilled_runner_takes_its_compile_process_with_it(tmp_path: Path) -> None:
    matrix, env, record = _setup(tmp_path, f"sqlite:///{tmp_path / 'index.db'}")
    procs: list[subprocess.Popen[bytes]] = []
    pids: list[int] = []
    try:
        runner = start_worker(matrix, env, tmp_path / "killed.json", "--claim")
        procs.append(runner)
        compile_pid = int(wait_for_start(record, runner.pid)["pid"])
        pids.append(compile_pid)
        runner.kill()
        runner.wait(timeout=10)
        assert _gone_within([compile_pid], 10.0), "the compile process outlived its runner"
    finally:
        _cleanup(procs, pids)


def _wait_for(what: str, ok: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise TimeoutError(f"never happened: {what}")
        time.sleep(0.05)


def test_sigterm_mid_publish_stops_at_a_safe_point_and_the_next_runner_resumes(
        tmp_path: Path, s3_env: dict[str, str], s3_url: str) -> None:
    index_url = f"sqlite:///{tmp_path / 'index.db'}"
    matrix, env, record = _setup(tmp_path, index_url)
    seconds = matrix.parent / "sleepy-model" / SECONDS_FILE
    seconds.write_text(json.dumps({CELL: 0.2}), encoding="utf-8")  # straight to the publish
    env = {**env, **s3_env, "NEFFCACHE_STORE": s3_url}
    store = open_store(s3_url)
    out_a, out_b = tmp_path / "a.json", tmp_path / "b.json"
    procs: list[subprocess.Popen[bytes]] = []
    # the first blob upload goes through, every other one hangs (as long as the test runs)
    with FaultyProxy(stall_seconds=600.0) as proxy:
        proxy.stall_puts, proxy.pass_puts = f"/{BLOBS}", 1
        try:
            a = start_worker(matrix, {**env, "HTTP_PROXY": proxy.url}, out_a,
                             "--claim", "--lease", "60", "--retries", "0")
            procs.append(a)
            _wait_for("a blob upload through and another one hanging",
                      lambda: proxy.puts_passed >= 1 and proxy.puts_stalled >= 1)
            a.send_signal(signal.SIGTERM)
            assert _gone_within([a.pid], 5.0), "the runner did not stop within 5 s"
            assert a.wait(timeout=5) == 143
            log = Path(f"{out_a}.log").read_text()
            assert ("neffcache: stopped by SIGTERM: 1 cell(s) running, 1 cancelled, "
                    "1 lease(s) released") in log, log
            assert [c["status"] for c in json.loads(out_a.read_text())["cells"]] == ["cancelled"]
            # nothing half-published: no manifest, no pointer, the intent dropped; only blobs
            assert [k for p in (MANIFESTS, CELLS, PENDING) for k in store.list(p)] == []
            present = set(store.list(BLOBS))
            assert len(present) == 1
            assert _claim_row(index_url) == (None, 0)  # released, and no attempt spent

            # the next runner (no proxy, no retry to spend) publishes the entry whole,
            # uploading only the blobs the stopped publish did not get in
            b = start_worker(matrix, env, out_b, "--claim", "--lease", "60", "--retries", "0")
            procs.append(b)
            assert b.wait(timeout=120) == 0, Path(f"{out_b}.log").read_text()
            [cell] = json.loads(out_b.read_text())["cells"]
            assert cell["status"] == "published"
            [mkey] = list(store.list(MANIFESTS))
            manifest = decode_manifest(store.read(mkey))
            assert len(list(store.list(CELLS))) == 1
            sizes = {f.sha256: f.size for f in manifest.files}
            assert len(sizes) > 1  # a multi-blob entry: the stop came between two uploads
            missing = {sha: n for sha, n in sizes.items()
                       if not any(k.endswith(sha) for k in present)}
            assert len(missing) == len(sizes) - 1
            assert cell["bytes_uploaded"] == sum(missing.values())
            assert all(store.has(f"{BLOBS}{sha[:2]}/{sha}") for sha in sizes)
        finally:
            _cleanup(procs, [])
