"""Boot-time warm: a worker outcome judged hit / compiled / failed, and the exit it leads to."""

from __future__ import annotations

from pathlib import Path

from neffcache.errors import CacheMissError, WorkerError, exit_code_for
from neffcache.matrix import Cell
from neffcache.precompile.launch import WorkerOutcome
from neffcache.precompile.warm import COMPILED, FAILED, HIT, WarmReport, judge_outcome

CELL = Cell("klein", "diffusers:Flux2KleinPipeline", "m", "main", "bfloat16", "compile",
            ("transformer",), 64, 64, 1, 1)
BEFORE = [["neff", "aa/bb/x.neff", 10, 1]]


def _outcome(after: list[list[object]] | None, ok: bool = True) -> WorkerOutcome:
    result = None if after is None else {"ok": True, "seconds": 1.5, "files_before": BEFORE,
                                         "files_after": after, "activity": {}}
    return WorkerOutcome(CELL.id, ok, 0 if ok else 1, False, 2.0, result,
                         "Traceback ...\nRuntimeError: boom\n", Path("/c"))


def test_judged_by_files_not_by_hit_counters() -> None:
    hit = judge_outcome(CELL, "k", _outcome(BEFORE))
    assert hit.status == HIT and hit.seconds == 1.5
    new = judge_outcome(CELL, "k", _outcome(BEFORE + [["neff", "cc/dd/y.neff", 5, 2]]))
    assert new.status == COMPILED and new.verdict and new.verdict["new_files"] == 1
    rewritten = judge_outcome(CELL, "k", _outcome([["neff", "aa/bb/x.neff", 11, 3]]))
    assert rewritten.status == COMPILED
    failed = judge_outcome(CELL, "k", _outcome(None, ok=False))
    assert failed.status == FAILED and "RuntimeError: boom" in (failed.error or "")


def _report(*statuses: str) -> WarmReport:
    cells = tuple(judge_outcome(CELL, "k", _outcome(
        None if s == FAILED else BEFORE + ([["neff", "n.neff", 1, 1]] if s == COMPILED else []),
        ok=s != FAILED)) for s in statuses)
    return WarmReport("m.toml", "neuron", "f" * 64, "/c", cells, 1.0)


def test_exit_codes() -> None:
    assert _report(HIT, HIT).error(strict=True) is None
    assert _report(HIT, COMPILED).error(strict=False) is None
    miss = _report(HIT, COMPILED).error(strict=True)
    assert isinstance(miss, CacheMissError) and exit_code_for(miss) == 3
    assert "neffcache capture" in (miss.hint or "")
    failed = _report(FAILED, COMPILED).error(strict=False)
    assert isinstance(failed, WorkerError) and exit_code_for(failed) == 1
    assert _report(HIT, COMPILED, FAILED).to_json()["counts"] == \
        {"hit": 1, "compiled": 1, "failed": 1}
