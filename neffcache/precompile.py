"""Precompile a matrix: plan which cells to warm, warm each in a worker, publish, record.

``plan_precompile`` is pure: a cell whose entry (for this fingerprint) is already in the store
is skipped unless forced, so a rerun does nothing; in compile-only mode an eager cell is
refused with the reason (its NEFFs only exist once ops run on a device). ``apply_precompile``
runs the warm cells
in worker subprocesses (neffcache.launch), a few at a time, each in fresh empty cache roots;
publishes what a successful warm-up captured as an entry (neffcache.publish) and indexes it;
records a failed, crashed or timed-out warm-up as a failed cell (exit status, seconds, log
tail) and publishes nothing for it. With ``verify`` each new entry is restored into a new
directory and warmed once more in a fresh process, which must compile nothing.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from neffcache.backends import Backend, compile_only_refusal, get_backend, root_dirs
from neffcache.capture import captured_records
from neffcache.errors import NotFoundError
from neffcache.fingerprint import Fingerprint
from neffcache.index.matrices import matrix_name_of, register_matrix
from neffcache.launch import WorkerOutcome, kill_running_workers, run_worker
from neffcache.manifest import decode_manifest, entry_key
from neffcache.matrix import Cell, Matrix
from neffcache.store import Store, manifest_key
from neffcache.worker import WorkerSpec

WARM, SKIP, REFUSE = "warm", "skip", "refuse"
SKIPPED, PUBLISHED, EXISTS, FAILED = "skipped", "published", "exists", "failed"
REFUSED = "refused"
HIT, COMPILED, VERIFY_FAILED = "hit", "compiled", "verify-failed"

# A progress event: (kind, cell id, message); kinds: start, skip, done, failed, verify, note.
Event = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class PrecompileOptions:
    workers: int = 1
    force: bool = False
    timeout: float | None = None
    verify: bool = False
    workdir: Path | None = None
    keep_workdir: bool = False
    extra_env: tuple[tuple[str, str], ...] = ()
    compile_only: bool = False  # no device here: cells that need one are refused


@dataclass(frozen=True, slots=True)
class CellPlan:
    cell: Cell
    entry_key: str
    ready: bool  # the store already holds this cell's entry for the fingerprint
    action: str  # warm | skip | refuse
    reason: str | None = None  # why a cell is refused


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """A fresh process warmed against the entry restored into a new directory."""

    status: str  # hit | compiled | verify-failed
    seconds: float | None  # that process's first call
    restore_seconds: float
    verdict: Mapping[str, Any] | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "seconds": self.seconds,
                "restore_seconds": round(self.restore_seconds, 3), "error": self.error,
                "compiled": self.verdict}


@dataclass(frozen=True, slots=True)
class CellReport:
    cell_id: str
    cell_key: str
    entry_key: str
    status: str  # skipped | published | exists | failed | refused
    seconds: float | None = None  # the warm-up's first call (compile + run)
    wall_seconds: float | None = None
    files: int | None = None
    total_bytes: int | None = None
    bytes_uploaded: int | None = None
    exit_status: int | None = None
    error: str | None = None
    log_tail: str | None = None
    verify: VerifyReport | None = None

    def to_json(self) -> dict[str, Any]:
        return {"cell_id": self.cell_id, "cell_key": self.cell_key,
                "entry_key": self.entry_key, "status": self.status, "seconds": self.seconds,
                "wall_seconds": None if self.wall_seconds is None else round(self.wall_seconds, 3),
                "files": self.files, "total_bytes": self.total_bytes,
                "bytes_uploaded": self.bytes_uploaded, "exit_status": self.exit_status,
                "error": self.error, "log_tail": self.log_tail,
                "verify": self.verify.to_json() if self.verify else None}


@dataclass(frozen=True, slots=True)
class PrecompileReport:
    matrix: str
    backend: str
    fingerprint_key: str
    store_url: str
    run_id: str | None
    cells: tuple[CellReport, ...]
    seconds: float
    workdir: str | None = None

    @property
    def failed(self) -> tuple[CellReport, ...]:
        return tuple(c for c in self.cells if c.status == FAILED)

    @property
    def not_verified(self) -> tuple[CellReport, ...]:
        return tuple(c for c in self.cells if c.verify and c.verify.status != HIT)

    def count(self, status: str) -> int:
        return sum(1 for c in self.cells if c.status == status)

    def to_json(self) -> dict[str, Any]:
        return {"matrix": self.matrix, "backend": self.backend,
                "fingerprint_key": self.fingerprint_key, "store": self.store_url,
                "run_id": self.run_id, "seconds": round(self.seconds, 3),
                "workdir": self.workdir,
                "counts": {s: self.count(s) for s in (PUBLISHED, EXISTS, SKIPPED, FAILED,
                                                      REFUSED)},
                "cells": [c.to_json() for c in self.cells]}


# --- plan (pure) ---------------------------------------------------------------------------

def plan_precompile(cells: Sequence[Cell], fingerprint: Fingerprint,
                    ready_entry_keys: Collection[str], *, force: bool = False,
                    compile_only: bool = False) -> tuple[CellPlan, ...]:
    """Warm every cell without an entry for this fingerprint (every cell with ``force``);
    with ``compile_only``, refuse the cells that need a device (see refusal_reason)."""
    plans = []
    for cell in cells:
        key = entry_key(cell, fingerprint)
        ready = key in ready_entry_keys
        reason = refusal_reason(cell, compile_only) if not ready or force else None
        if reason is not None:
            plans.append(CellPlan(cell, key, ready, REFUSE, reason))
        else:
            plans.append(CellPlan(cell, key, ready, WARM if force or not ready else SKIP))
    return tuple(plans)


def refusal_reason(cell: Cell, compile_only: bool) -> str | None:
    """Why ``cell`` cannot be pre-compiled here (None: it can). Pure."""
    if not compile_only:
        return None
    reason = compile_only_refusal(cell.mode)
    return f"compile-only: {reason}" if reason else None


def resolve_model(model: str, matrix_source: str) -> str:
    """A model written as ``./dir`` or ``../dir`` is relative to the matrix file; an existing
    directory becomes absolute; anything else is a hub id, kept as is."""
    if model.startswith(("./", "../")):
        return str((Path(matrix_source).parent / model).resolve())
    path = Path(model).expanduser()
    return str(path.resolve()) if path.is_dir() else model


def worker_spec(matrix: Matrix, cell: Cell, base: Path, result_path: Path) -> WorkerSpec:
    pipeline = matrix.pipeline(cell.pipeline)
    return WorkerSpec(cell=cell, backend=matrix.backend,
                      model=resolve_model(cell.model, matrix.source), base=str(base),
                      result_path=str(result_path), warmup_steps=pipeline.warmup_steps,
                      call_kwargs=pipeline.call_kwargs)


# --- I/O -------------------------------------------------------------------------------------

def find_ready(store: Store, cells: Sequence[Cell], fingerprint: Fingerprint,
               workers: int = 16) -> set[str]:
    """Entry keys of these cells that the store already holds (one existence check each)."""
    keys = [entry_key(c, fingerprint) for c in cells]
    if not keys:
        return set()
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(keys)))) as pool:
        present = list(pool.map(lambda k: store.has(manifest_key(k)), keys))
    return {k for k, p in zip(keys, present, strict=True) if p}


def stored_compile_seconds(store: Store, key: str, backend: Backend) -> float | None:
    """The cold first-call seconds recorded in an entry's manifest (None if unknown)."""
    try:
        data = store.read(manifest_key(key))
    except NotFoundError:
        return None
    return decode_manifest(data, allowed_roots=backend.root_names).compile_seconds


@dataclass
class _Run:
    """Shared state of one apply_precompile call (threads publish and record through it)."""

    matrix: Matrix
    store: Store
    index: Any
    fingerprint: Fingerprint
    backend: Backend
    options: PrecompileOptions
    environ: Mapping[str, str]
    workdir: Path
    emit: Callable[[Event], None]
    run_id: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)


def apply_precompile(matrix: Matrix, cells: Sequence[Cell], store: Store, index: Any,
                     fingerprint: Fingerprint, options: PrecompileOptions, *,
                     environ: Mapping[str, str],
                     progress: Callable[[Event], None] | None = None) -> PrecompileReport:
    """Warm, publish and record every planned cell; never raises for a failed cell (the
    report says which failed). ``index`` is a neffcache.index.Index."""
    started = time.monotonic()
    backend = get_backend(matrix.backend)
    plans = plan_precompile(cells, fingerprint, find_ready(store, cells, fingerprint),
                            force=options.force, compile_only=options.compile_only)
    emit = progress or (lambda event: None)
    reports: dict[str, CellReport] = {}
    for p in plans:
        if p.action == SKIP:
            reports[p.cell.id] = CellReport(p.cell.id, p.cell.key, p.entry_key, SKIPPED)
            emit(("skip", p.cell.id, "ready (entry in store)"))
        elif p.action == REFUSE:
            reports[p.cell.id] = CellReport(p.cell.id, p.cell.key, p.entry_key, REFUSED,
                                            error=p.reason)
            emit(("refused", p.cell.id, p.reason or ""))
    _index_known_entries(store, index, [p for p in plans if p.action == SKIP], backend)
    _register(index, matrix)
    to_warm = [p for p in plans if p.action == WARM]
    workdir = Path(options.workdir or tempfile.mkdtemp(prefix="neffcache-precompile-"))
    run = _Run(matrix, store, index, fingerprint, backend, options, environ, workdir, emit)
    if to_warm:
        workdir.mkdir(parents=True, exist_ok=True)
        run.run_id = index.start_run(socket.gethostname(), fingerprint,
                                     matrix_name_of(matrix))
        try:
            with ThreadPoolExecutor(max_workers=max(1, options.workers)) as pool:
                numbered = list(enumerate(to_warm, 1))
                try:
                    for report in pool.map(lambda item: _warm(run, *item), numbered):
                        reports[report.cell_id] = report
                except BaseException:  # Ctrl-C or a store failure: stop, do not start more
                    run.stopping.set()
                    kill_running_workers()
                    raise
        finally:
            done = [r for r in reports.values() if r.status in (PUBLISHED, EXISTS)]
            failed = [r for r in reports.values() if r.status == FAILED]
            index.finish_run(run.run_id, len(done), len(failed))
    if not options.keep_workdir and options.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return PrecompileReport(
        matrix=matrix.source, backend=backend.name, fingerprint_key=fingerprint.key,
        store_url=store.url, run_id=run.run_id,
        cells=tuple(reports[p.cell.id] for p in plans if p.cell.id in reports),
        seconds=time.monotonic() - started,
        workdir=str(workdir) if options.keep_workdir or options.workdir else None)


def _index_known_entries(store: Store, index: Any, plans: Sequence[CellPlan],
                         backend: Backend) -> None:
    """Entries already in the store but unknown to this index get indexed (coverage stays
    true when several indexes share a store); nothing is written when all are known."""
    known = index.entry_keys() if plans else set()
    for p in plans:
        if p.entry_key in known:
            continue
        try:
            data = store.read(manifest_key(p.entry_key))
        except NotFoundError:
            continue
        index.record_entry(decode_manifest(data, allowed_roots=backend.root_names), store.url)


def _slug(n: int, cell: Cell) -> str:
    return f"{n:03d}-" + "".join(ch if ch.isalnum() or ch in "-." else "_" for ch in cell.id)


def _warm(run: _Run, n: int, plan: CellPlan) -> CellReport:
    cell = plan.cell
    cell_dir = run.workdir / _slug(n, cell)
    spec = worker_spec(run.matrix, cell, cell_dir / "roots", cell_dir / "result.json")
    if run.stopping.is_set():
        return CellReport(cell.id, cell.key, plan.entry_key, FAILED, error="not started: stopped")
    run.emit(("start", cell.id, "warming"))
    outcome = run_worker(spec, run.backend, cell_dir, environ=run.environ,
                         extra_env=dict(run.options.extra_env), timeout=run.options.timeout)
    try:
        if not outcome.ok and run.stopping.is_set():
            return CellReport(cell.id, cell.key, plan.entry_key, FAILED, error="interrupted")
        if not outcome.ok:
            return _record_failure(run, plan, outcome)
        report = _publish(run, plan, spec, outcome)
        if run.options.verify:
            report = replace(report, verify=_verify(run, plan, spec, cell_dir))
        return report
    finally:
        if not run.options.keep_workdir:
            shutil.rmtree(cell_dir, ignore_errors=True)


def _record_failure(run: _Run, plan: CellPlan, outcome: WorkerOutcome) -> CellReport:
    with run.lock:
        run.index.record_failure(run.run_id, plan.cell, run.fingerprint, outcome.exit_status,
                                 outcome.wall_seconds, outcome.log_tail)
    run.emit(("failed", plan.cell.id, f"{outcome.error} (exit {outcome.exit_status}, "
                                      f"{outcome.wall_seconds:.1f} s)"))
    return CellReport(plan.cell.id, plan.cell.key, plan.entry_key, FAILED,
                      seconds=outcome.seconds, wall_seconds=outcome.wall_seconds,
                      exit_status=outcome.exit_status, error=outcome.error,
                      log_tail=outcome.log_tail[-2000:])


def _publish(run: _Run, plan: CellPlan, spec: WorkerSpec, outcome: WorkerOutcome) -> CellReport:
    from neffcache.publish import plan_publish, publish_entry

    roots = {name: Path(d) for name, d in root_dirs(run.backend, spec.base).items()}
    files = captured_records(run.backend, plan_publish(run.backend, roots))
    producer = {"tool": "neffcache precompile", "run_id": str(run.run_id),
                "matrix": run.matrix.name or Path(run.matrix.source).name,
                "worker_wall_seconds": f"{outcome.wall_seconds:.3f}"}
    result = publish_entry(run.store, plan.cell, run.fingerprint, run.backend, roots,
                           producer=producer, compile_seconds=outcome.seconds, files=files)
    with run.lock:
        run.index.record_entry(result.manifest, run.store.url)
    status = PUBLISHED if result.created else EXISTS
    run.emit(("done", plan.cell.id, f"{status}: first call {outcome.seconds or 0:.1f} s, "
                                    f"{len(files)} files, {result.manifest.total_bytes} bytes"))
    return CellReport(plan.cell.id, plan.cell.key, result.manifest.entry_key, status,
                      seconds=outcome.seconds, wall_seconds=outcome.wall_seconds,
                      files=len(files), total_bytes=result.manifest.total_bytes,
                      bytes_uploaded=result.bytes_uploaded, exit_status=outcome.exit_status)


def warm_restored(matrix: Matrix, cell: Cell, backend: Backend, base: Path, workdir: Path, *,
                  environ: Mapping[str, str], extra_env: Mapping[str, str] | None = None,
                  timeout: float | None = None) -> WorkerOutcome:
    """Warm ``cell`` in a fresh process against cache roots already restored under ``base``."""
    spec = worker_spec(matrix, cell, base, workdir / "result.json")
    return run_worker(spec, backend, workdir, environ=environ, extra_env=extra_env,
                      timeout=timeout)


def _verify(run: _Run, plan: CellPlan, spec: WorkerSpec, cell_dir: Path) -> VerifyReport:
    from neffcache.restore.run import restore_cells

    run.emit(("verify", plan.cell.id, "restoring into a new directory and warming again"))
    target = cell_dir / "verify-roots"
    restored = restore_cells(run.store, [plan.cell], run.backend, run.fingerprint, target)
    err = restored.error()
    if err is not None or plan.cell.id not in restored.restored:
        return _verified(run, plan, VerifyReport(VERIFY_FAILED, None, restored.seconds,
                                                 error=f"restore: {err or 'cell not restored'}"))
    outcome = warm_restored(run.matrix, plan.cell, run.backend, target, cell_dir / "verify",
                            environ=run.environ, extra_env=dict(run.options.extra_env),
                            timeout=run.options.timeout)
    verdict = outcome.verdict()
    if verdict is None:
        report = VerifyReport(VERIFY_FAILED, None, restored.seconds, error=outcome.error)
    else:
        report = VerifyReport(COMPILED if verdict.compiled else HIT, outcome.seconds,
                              restored.seconds, verdict=verdict.to_json())
    return _verified(run, plan, report)


def _verified(run: _Run, plan: CellPlan, report: VerifyReport) -> VerifyReport:
    with run.lock:
        run.index.record_verification(plan.entry_key, report.status)
    detail = report.error or (f"first call {report.seconds:.1f} s, "
                              f"{'nothing compiled' if report.status == HIT else 'COMPILED'}")
    run.emit(("verify", plan.cell.id, f"{report.status}: {detail}"))
    return report


def _register(index: Any, matrix: Matrix) -> None:
    """Keep the declared matrix in the index, so coverage needs no file (a new version only
    when its content changed)."""
    if not matrix.source or matrix.source.startswith("<"):
        return
    try:
        text = Path(matrix.source).read_text(encoding="utf-8")
    except OSError:
        return
    register_matrix(index, matrix, text)
