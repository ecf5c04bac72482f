"""Heartbeats (neffcache.precompile.heartbeat): the worker's phase and last line from its log,
the beats due per cell at the interval, and how ``neffcache precompile`` renders them (a text
line, a JSON line)."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone
from pathlib import Path

from neffcache.cli.precompile import (
    ProgressDisplay,
    heartbeat_line,
    human_elapsed,
    jsonl_line,
)
from neffcache.precompile import CellBeat
from neffcache.precompile.heartbeat import (
    PUBLISHING,
    STARTING,
    Beats,
    last_log_line,
    worker_phase,
)
from neffcache.precompile.worker import PHASE_MARK

CELL = "flux2-klein/compile/512x512/b1/tp1"


def test_worker_phase_is_the_latest_mark() -> None:
    assert worker_phase("") is None
    assert worker_phase("some output\n") is None
    log = f"{PHASE_MARK}loading\nfetching\n{PHASE_MARK}compiling\nneuronx-cc: step 3\n"
    assert worker_phase(log) == "compiling"


def test_last_log_line_skips_blanks_and_trims() -> None:
    assert last_log_line("") == ""
    assert last_log_line("first\nsecond\n\n   \n") == "second"
    assert last_log_line("bar 10%\rbar 55%\r\n") == "bar 55%"  # a progress bar's last state
    long = last_log_line("x" * 500)
    assert len(long) == 200 and long.endswith("…")


def test_beats_due_at_the_interval(tmp_path: Path) -> None:
    now = [100.0]
    log = tmp_path / "worker.log"
    log.write_text(f"{PHASE_MARK}loading\nLoading checkpoint shards: 2/4\n")
    beats = Beats(30.0, lambda beat: None, clock=lambda: now[0])
    beats.watch(CELL, log)
    assert beats.due() == []  # nothing before the first interval
    now[0] = 130.5
    (beat,) = beats.due()
    assert beat == CellBeat(CELL, 30.5, "loading", "Loading checkpoint shards: 2/4")
    assert beats.due() == []  # once per interval
    now[0] = 161.0
    beats.phase(CELL, PUBLISHING)
    (beat,) = beats.due()
    assert (beat.elapsed, beat.phase) == (61.0, PUBLISHING)  # the run's phase wins
    beats.forget(CELL)
    now[0] = 500.0
    assert beats.due() == []


def test_beats_before_the_worker_says_anything(tmp_path: Path) -> None:
    now = [0.0]
    beats = Beats(1.0, lambda beat: None, clock=lambda: now[0])
    beats.watch(CELL, tmp_path / "missing.log")
    now[0] = 1.0
    assert beats.due() == [CellBeat(CELL, 1.0, STARTING, "")]
    assert Beats(0.0, lambda beat: None).due() == []  # off


def test_human_elapsed() -> None:
    assert [human_elapsed(s) for s in (0, 45.9, 125, 3725)] == ["0s", "45s", "2m05s", "1h02m"]


def test_heartbeat_line_names_cell_elapsed_phase_and_log() -> None:
    line = heartbeat_line(CellBeat(CELL, 754.2, "compiling", "Compiler status PASS"))
    assert line == f"   beat  {CELL}  12m34s compiling  log: Compiler status PASS"
    assert heartbeat_line(CellBeat(CELL, 3, STARTING, "")).endswith("3s starting  log: -")


def test_jsonl_line_fields() -> None:
    ts = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
    doc = json.loads(jsonl_line("heartbeat", CELL, "step 3", elapsed=61.26, phase="compiling",
                                ts=ts))
    assert doc == {"ts": "2026-01-02T03:04:05.678Z", "event": "heartbeat", "cell": CELL,
                   "elapsed": 61.3, "phase": "compiling", "message": "step 3"}
    assert json.loads(jsonl_line("notice", None, "x"))["elapsed"] is None


def test_display_off_a_terminal_writes_beats_and_jsonl_writes_json() -> None:
    text = io.StringIO()
    with ProgressDisplay(1, stream=text) as display:
        display(("start", CELL, "warming"))
        display.beat(CellBeat(CELL, 30.0, "loading", "shards 1/2"))
        display(("done", CELL, "published"))
    lines = text.getvalue().splitlines()
    assert lines[1] == f"   beat  {CELL}  30s loading  log: shards 1/2"
    out = io.StringIO()
    with ProgressDisplay(1, stream=out, log_format="jsonl") as display:
        display(("start", CELL, "warming"))
        display.beat(CellBeat(CELL, 30.0, "loading", "shards 1/2"))
        display(("wait", "demo", "waiting for a lease: 1 cell(s) held by other runners"))
        display.notice("no cell selected")
    docs = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [d["event"] for d in docs] == ["start", "heartbeat", "wait", "notice"]
    assert docs[1]["phase"] == "loading" and docs[2]["phase"] == "waiting"
