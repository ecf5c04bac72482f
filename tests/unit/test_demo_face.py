"""The demo's face without running the demo: bad shapes are refused before anything is
built, and the result carries the exit rule (a cell that did not stay warm: exit 1)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from neffcache.demo import DemoCell, DemoRequest, DemoResult, run_demo
from neffcache.errors import CompiledAfterRestoreError, UsageError


def test_bad_shapes_are_refused_before_anything_is_built(neffcache_home: Path) -> None:
    with pytest.raises(UsageError, match="--shapes"):
        run_demo(DemoRequest(shapes="64x64,big"))
    with pytest.raises(UsageError, match="--shapes"):
        run_demo(DemoRequest(shapes=["64"]))
    assert not (neffcache_home / "demo").exists()


def _result(cells: tuple[DemoCell, ...], restore_exit: int = 0) -> DemoResult:
    report: Any = SimpleNamespace(failed=(), to_json=lambda: {})  # what ok reads of it
    coverage: Any = None
    return DemoResult(model_dir="m", matrix_path="matrix.toml", store_url="s", index_url="i",
                      fingerprint_key="f" * 64, instance_dir="d", precompile=report,
                      restore={}, restore_exit=restore_exit, cells=cells, coverage=coverage,
                      seconds=1.0)


def test_the_result_knows_its_exit_code() -> None:
    unfinished = DemoCell(cell_id="p/compile/64x64/b1/tp1", entry_key="e", cold_seconds=3.0,
                          cold_source="this run", restored_seconds=None, verdict=None,
                          error="timed out")
    result = _result((unfinished,))
    err = result.error()
    assert isinstance(err, CompiledAfterRestoreError) and result.exit_code == 1
    assert "1 cell(s) compiled or failed after restore (p/compile/64x64/b1/tp1)" in str(err)
    assert "restore exited 3" in str(_result((), restore_exit=3).error())
    assert _result(()).error() is None and _result(()).exit_code == 0
