"""Boot-time check: a cell's first call against restored cache dirs, judged hit or compiled."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neffcache.backends import Backend
from neffcache.errors import CacheMissError, NeffcacheError, WorkerError
from neffcache.matrix import Cell, Matrix
from neffcache.precompile.launch import WorkerOutcome, run_worker
from neffcache.precompile.plan import COMPILED, FAILED, HIT, worker_spec

REPORT_SCHEMA = 1


@dataclass(frozen=True, slots=True)
class WarmCell:
    """One cell's first call against the restored directory."""

    cell_id: str
    cell_key: str
    entry_key: str  # this cell's entry for the fingerprint (it may not exist)
    status: str  # hit | compiled | failed
    seconds: float | None  # the first call (compile + run)
    wall_seconds: float
    verdict: Mapping[str, Any] | None = None  # neffcache.hit_check.Verdict.to_json()
    error: str | None = None
    log_tail: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"cell_id": self.cell_id, "cell_key": self.cell_key, "entry_key": self.entry_key,
                "status": self.status, "seconds": self.seconds,
                "wall_seconds": round(self.wall_seconds, 3), "compiled": self.verdict,
                "error": self.error, "log_tail": self.log_tail}


@dataclass(frozen=True, slots=True)
class WarmReport:
    matrix: str
    backend: str
    fingerprint_key: str
    cache_dir: str
    cells: tuple[WarmCell, ...]
    seconds: float

    def with_status(self, status: str) -> tuple[WarmCell, ...]:
        return tuple(c for c in self.cells if c.status == status)

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": REPORT_SCHEMA, "matrix": self.matrix, "backend": self.backend,
                "fingerprint_key": self.fingerprint_key, "cache_dir": self.cache_dir,
                "seconds": round(self.seconds, 3),
                "counts": {s: len(self.with_status(s)) for s in (HIT, COMPILED, FAILED)},
                "cells": [c.to_json() for c in self.cells]}

    def error(self, strict: bool) -> NeffcacheError | None:
        """A failed warm-up is always an error (exit 1); a cell that compiled is one only
        with ``strict`` (exit 3, a cache miss)."""
        failed, compiled = self.with_status(FAILED), self.with_status(COMPILED)
        if failed:
            ids = ", ".join(c.cell_id for c in failed[:3])
            return WorkerError(f"{len(failed)} of {len(self.cells)} cells failed to warm ({ids}); "
                               f"first: {failed[0].error}",
                               hint="neffcache warm MATRIX --cache DIR --json shows each log tail")
        if strict and compiled:
            ids = ", ".join(c.cell_id for c in compiled[:3])
            return CacheMissError(
                f"{len(compiled)} of {len(self.cells)} cells compiled against {self.cache_dir} "
                f"(a cache miss): {ids}",
                hint=f"neffcache capture MATRIX --cache {self.cache_dir} (back-fill what "
                     f"compiled), or neffcache restore MATRIX --to {self.cache_dir}")
        return None


def judge_outcome(cell: Cell, key: str, outcome: WorkerOutcome) -> WarmCell:
    """A worker's outcome as hit, compiled or failed. Pure."""
    verdict = outcome.verdict()
    if verdict is None:
        return WarmCell(cell.id, cell.key, key, FAILED, outcome.seconds, outcome.wall_seconds,
                        error=outcome.error, log_tail=outcome.log_tail[-2000:])
    return WarmCell(cell.id, cell.key, key, COMPILED if verdict.compiled else HIT,
                    outcome.seconds, outcome.wall_seconds, verdict=verdict.to_json())


def describe(result: WarmCell) -> str:
    if result.status == FAILED:
        return result.error or "failed"
    seconds = "-" if result.seconds is None else f"{result.seconds:.1f} s"
    if result.status == HIT:
        return f"first call {seconds}, nothing compiled"
    reasons = (result.verdict or {}).get("reasons") or ["compiled"]
    return f"first call {seconds}, COMPILED: {reasons[0]}"


def warm_restored(matrix: Matrix, cell: Cell, backend: Backend, base: Path, workdir: Path, *,
                  environ: Mapping[str, str], timeout: float | None = None,
                  python: str | None = None) -> WorkerOutcome:
    """Warm ``cell`` in a fresh process against cache roots already restored under ``base``."""
    spec = worker_spec(matrix, cell, base, workdir / "result.json")
    return run_worker(spec, backend, workdir, environ=environ, timeout=timeout, python=python)
