"""``neffcache demo`` (``run_demo``): precompile a tiny pipeline, restore it fresh, time calls."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neffcache.config import Settings, read_settings
from neffcache.errors import CompiledAfterRestoreError, ExitRule, NeffcacheError, UsageError
from neffcache.precompile import Verdict
from neffcache.request_rules import checked_request

if TYPE_CHECKING:
    from neffcache.index import CoverageReport
    from neffcache.matrix import Cell
    from neffcache.precompile import PrecompileReport, RunContext

__all__ = ["DemoCell", "DemoRequest", "DemoResult", "run_demo"]

MODEL_DIR = "tiny-flux2-klein"
MATRIX_FILE = "matrix.toml"
INSTANCE_DIR = "instance"
# Stable timings on a small shared machine (DESIGN.md); a value the user set is kept.
DEMO_ENV = {"OMP_NUM_THREADS": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1"}
_SHAPES_LINE = re.compile(r"^shapes = .*$", re.MULTILINE)
_SHAPE = re.compile(r"^\d{1,5}x\d{1,5}$")
DEFAULT_TIMEOUT = 1800.0
Event = tuple[str, str, str]  # (kind, cell id, message), as precompile reports progress


@checked_request
class DemoRequest:
    """What ``neffcache demo`` is asked to do: ``shapes`` to warm instead of the matrix's two
    (the --shapes text or "HxW" strings), ``workers`` cells compiled at a time, ``timeout``
    seconds per warm-up (None: never killed), ``store``/``index`` URLs (None: as configured),
    the workers' ``environ`` (None: ``os.environ``; DEMO_ENV's defaults under it), ``notice``
    for the step lines and ``progress`` for the precompile's per-cell events."""

    shapes: str | Sequence[str] | None = None
    workers: int = 1
    timeout: float | None = DEFAULT_TIMEOUT
    store: str | None = None
    index: str | None = None
    environ: Mapping[str, str] | None = None
    notice: Callable[[str], None] | None = None
    progress: Callable[[Event], None] | None = None


@dataclass(frozen=True, slots=True)
class DemoCell:
    """One cell of the demo: its cold and restored first-call seconds and whether anything
    compiled after restore."""

    cell_id: str
    entry_key: str
    cold_seconds: float | None
    cold_source: str  # "this run" (warmed now) or "entry" (read from the stored manifest)
    restored_seconds: float | None
    verdict: Verdict | None  # None: the restored warm-up did not finish
    error: str | None = None

    @property
    def speedup(self) -> float | None:
        if self.cold_seconds and self.restored_seconds:
            return self.cold_seconds / self.restored_seconds
        return None

    @property
    def clean(self) -> bool:
        return self.verdict is not None and not self.verdict.compiled

    def to_json(self) -> dict[str, Any]:
        sp = self.speedup
        return {"cell_id": self.cell_id, "entry_key": self.entry_key,
                "cold_seconds": self.cold_seconds, "cold_source": self.cold_source,
                "restored_seconds": self.restored_seconds,
                "speedup": None if sp is None else round(sp, 2),
                "compiled_after_restore": None if self.verdict is None else self.verdict.compiled,
                "evidence": self.verdict.to_json() if self.verdict else None,
                "error": self.error}


@dataclass(frozen=True, slots=True)
class DemoResult(ExitRule):
    """The demo's outcome; ``ok`` (exit 0) when the restore exited 0, no cell failed to
    precompile and nothing compiled after restore, else ``error()`` says which (exit 1)."""

    model_dir: str
    matrix_path: str
    store_url: str
    index_url: str
    fingerprint_key: str
    instance_dir: str
    precompile: PrecompileReport
    restore: Mapping[str, Any]
    restore_exit: int
    cells: tuple[DemoCell, ...]
    coverage: CoverageReport
    seconds: float

    @property
    def ok(self) -> bool:
        return (self.restore_exit == 0 and not self.precompile.failed
                and all(c.clean for c in self.cells))

    def error(self) -> NeffcacheError | None:
        if self.ok:
            return None
        bad = [c.cell_id for c in self.cells if not c.clean]
        return CompiledAfterRestoreError(
            f"demo: {len(bad)} cell(s) compiled or failed after restore ({', '.join(bad)})"
            if bad else f"demo: restore exited {self.restore_exit} or a warm-up failed")

    def to_json(self) -> dict[str, Any]:
        """The ``neffcache demo --json`` document."""
        return {"ok": self.ok, "model": self.model_dir, "matrix": self.matrix_path,
                "store": self.store_url, "index": self.index_url,
                "fingerprint_key": self.fingerprint_key, "instance": self.instance_dir,
                "seconds": round(self.seconds, 3), "precompile": self.precompile.to_json(),
                "restore": dict(self.restore), "restore_exit_code": self.restore_exit,
                "cells": [c.to_json() for c in self.cells],
                "coverage": {"matrix": self.matrix_path, "backend": "inductor",
                             "here": self.fingerprint_key, **self.coverage.to_json()}}


def parse_shapes(text: str | None) -> tuple[str, ...] | None:
    """The --shapes text as a tuple of "HxW" strings (None stays None); UsageError if bad."""
    if text is None:
        return None
    shapes = tuple(s.strip() for s in text.split(",") if s.strip())
    bad = [s for s in shapes if not _SHAPE.match(s)]
    if not shapes or bad:
        raise UsageError(f"--shapes {text!r}: expected HEIGHTxWIDTH[,HEIGHTxWIDTH...] "
                         f"such as 64x64,96x128")
    return shapes


def render_demo_matrix(template: str, shapes: Sequence[str] | None) -> str:
    if not shapes:
        return template
    listed = ", ".join(f'"{s}"' for s in shapes)
    return _SHAPES_LINE.sub(f"shapes = [{listed}]", template, count=1)


def _write_matrix(demo_dir: Path, shapes: Sequence[str] | None) -> Path:
    template = resources.files("neffcache.demo").joinpath(MATRIX_FILE).read_text("utf-8")
    path = demo_dir / MATRIX_FILE
    text = render_demo_matrix(template, shapes)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    return path


def run_demo(request: DemoRequest) -> DemoResult:
    """Build the tiny pipeline (once), precompile the demo matrix, restore it into an empty
    directory in a separate process and time each cell's first call in a fresh process.
    UsageError for bad shapes; the store's and the index's errors when they cannot open."""
    shapes = request.shapes
    parsed = parse_shapes(shapes if shapes is None or isinstance(shapes, str)
                          else ",".join(shapes))
    settings = read_settings(os.environ, store=request.store, index=request.index)
    say = request.notice or (lambda _message: None)
    from neffcache.command_steps import open_checked_store
    from neffcache.demo.tiny_pipeline import build_tiny_flux2_klein
    from neffcache.fingerprint import collect_fingerprint
    from neffcache.index import CoverageRequest, ingest_reports, open_index, register_matrix
    from neffcache.index import coverage as cover
    from neffcache.matrix_io import load_matrix
    from neffcache.precompile import PrecompileOptions, RunContext, RunHooks, apply_precompile
    from neffcache.reports import date_prefixes

    started = time.monotonic()
    env = {**DEMO_ENV, **(os.environ if request.environ is None else request.environ)}
    demo_dir = settings.home / "demo"
    demo_dir.mkdir(parents=True, exist_ok=True)
    say(f"[1/4] tiny Flux2KleinPipeline: {demo_dir / MODEL_DIR} (built once, random weights)")
    model_dir = build_tiny_flux2_klein(demo_dir / MODEL_DIR)
    matrix = load_matrix(_write_matrix(demo_dir, parsed))
    fingerprint = collect_fingerprint(matrix.backend, env)
    store = open_checked_store(settings.store_url, create=True)
    cells = matrix.cells
    with open_index(settings.index_url, auto_upgrade=settings.index_is_embedded) as ix:
        # The demo owns its matrix: other --shapes replace the registered one on purpose.
        register_matrix(ix, matrix, Path(matrix.source).read_text(encoding="utf-8"),
                        replace=True)
        say(f"[2/4] precompile {len(cells)} cells of {matrix.source} (cold, one fresh "
            f"process each) -> {store.url}")
        run = RunContext(matrix, store, ix, fingerprint,
                         PrecompileOptions(workers=request.workers, timeout=request.timeout), env,
                         RunHooks(progress=request.progress))
        pre = apply_precompile(matrix, cells, store, ix, fingerprint, run.options,
                               environ=env, hooks=run.hooks)
        instance = demo_dir / INSTANCE_DIR
        shutil.rmtree(instance, ignore_errors=True)
        instance.mkdir(parents=True)
        say(f"[3/4] fresh instance: empty {instance}; neffcache restore (separate process)")
        restore_doc, restore_exit = _restore_cli(Path(matrix.source), instance, settings, env)
        ingest_reports(ix, store, date_prefixes(datetime.now(timezone.utc), 1))  # as serve does
        say("[4/4] first call per cell in a fresh process against the restored cache")
        demo_cells = tuple(_restored_cell(run, cell, pre, instance, say) for cell in cells)
        coverage = cover(CoverageRequest(matrix.source, cells=[c.id for c in cells],
                                         fingerprints=[fingerprint],
                                         index=settings.index_url)).report
    return DemoResult(model_dir=str(model_dir), matrix_path=matrix.source,
                      store_url=store.url, index_url=settings.index_url,
                      fingerprint_key=fingerprint.key, instance_dir=str(instance),
                      precompile=pre, restore=restore_doc, restore_exit=restore_exit,
                      cells=demo_cells, coverage=coverage, seconds=time.monotonic() - started)


def _restore_cli(matrix_path: Path, target: Path, settings: Settings,
                 env: Mapping[str, str]) -> tuple[dict[str, Any], int]:
    """Run ``neffcache restore MATRIX --to DIR --json`` as its own process, as a boot hook."""
    child_env = {**env, "NEFFCACHE_STORE": settings.store_url}
    cmd = [sys.executable, "-m", "neffcache.cli", "restore", str(matrix_path),
           "--to", str(target), "--json"]
    proc = subprocess.run(cmd, env=child_env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, check=False)
    try:
        doc = json.loads(proc.stdout) if proc.stdout.strip() else {}
    except ValueError:
        doc = {}
    if not doc:
        doc = {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    return doc, proc.returncode


def _restored_cell(run: RunContext, cell: Cell, pre: PrecompileReport, instance: Path,
                   say: Callable[[str], None]) -> DemoCell:
    from neffcache.backends import get_backend
    from neffcache.manifest import entry_key
    from neffcache.precompile import stored_compile_seconds, warm_restored

    backend, store = get_backend(run.matrix.backend), run.store
    key = entry_key(cell, run.fingerprint)
    warmed = {c.cell_id: c for c in pre.cells}.get(cell.id)
    cold: float | None
    if warmed is not None and warmed.seconds is not None:
        cold, source = warmed.seconds, "this run"
    else:
        cold, source = stored_compile_seconds(store, key, backend), "entry"
    runs = instance.parent / "runs" / re.sub(r"[^A-Za-z0-9.-]", "_", cell.id)
    shutil.rmtree(runs, ignore_errors=True)
    outcome = warm_restored(run.matrix, cell, backend, instance, runs, environ=run.environ,
                            timeout=run.options.timeout)
    verdict = outcome.verdict()
    if verdict is None:
        say(f"      {cell.id}: restored warm-up failed: {outcome.error}")
    else:
        say(f"      {cell.id}: first call {outcome.seconds:.1f} s, compiled after restore: "
            f"{verdict.summary()}")
    return DemoCell(cell_id=cell.id, entry_key=key, cold_seconds=cold, cold_source=source,
                    restored_seconds=outcome.seconds, verdict=verdict,
                    error=None if outcome.ok else outcome.error)
