"""Run a precompile: warm each planned cell in a worker, publish, record, optionally verify.

``apply_precompile`` runs the warm cells of ``plan_precompile`` in worker subprocesses
(``neffcache.precompile.launch``), a few at a time, each in fresh empty cache roots; publishes
what a successful warm-up captured as an entry (``neffcache.precompile.publish``) and indexes
it; records a failed, crashed or timed-out warm-up as a failed cell (exit status, seconds, log
tail) and publishes nothing for it. With ``verify`` each new entry is restored into a new
directory and warmed once more in a fresh process (``warm_restored``), which must compile
nothing.
"""


from __future__ import annotations

import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from neffcache.backends import Backend, get_backend, root_dirs
from neffcache.errors import NotFoundError
from neffcache.fingerprint import Fingerprint
from neffcache.index.matrices import matrix_name_of, register_matrix
from neffcache.manifest import decode_manifest
from neffcache.matrix import Cell, Matrix
from neffcache.precompile.capture import captured_records
from neffcache.precompile.launch import WorkerOutcome, kill_running_workers, run_worker
from neffcache.precompile.plan import (
    COMPILED,
    EXISTS,
    FAILED,
    HIT,
    PUBLISHED,
    REFUSE,
    REFUSED,
    SKIP,
    SKIPPED,
    VERIFY_FAILED,
    WARM,
    CellPlan,
    CellReport,
    Event,
    PrecompileOptions,
    PrecompileReport,
    VerifyReport,
    find_ready,
    plan_precompile,
    worker_spec,
)
from neffcache.precompile.publish import plan_publish, publish_entry
from neffcache.precompile.warm import warm_restored
from neffcache.precompile.worker import WorkerSpec
from neffcache.restore.run import restore_cells
from neffcache.store import Store, manifest_key

READERS = 16  # manifests read in parallel when indexing entries the index does not know


@dataclass
class Run:
    """Shared state of one run, static or claimed (threads publish and record through it)."""

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
    run, plans, reports = prepare_run(matrix, cells, store, index, fingerprint, options,
                                      environ=environ, progress=progress, force=options.force,
                                      announce_skips=True)
    to_warm = [p for p in plans if p.action == WARM]
    if to_warm:
        begin_run(run, socket.gethostname())
        numbered = list(enumerate(to_warm, 1))

        def warm_all(pool: ThreadPoolExecutor) -> None:
            for report in pool.map(lambda item: warm_cell(run, *item), numbered):
                reports[report.cell_id] = report

        run_pool(run, reports, warm_all)
    return finish_run(run, started, [reports[p.cell.id] for p in plans if p.cell.id in reports])


def prepare_run(matrix: Matrix, cells: Sequence[Cell], store: Store, index: Any,
                fingerprint: Fingerprint, options: PrecompileOptions, *,
                environ: Mapping[str, str], progress: Callable[[Event], None] | None,
                force: bool, announce_skips: bool
                ) -> tuple[Run, list[CellPlan], dict[str, CellReport]]:
    """What a static and a claimed run do first: plan the cells, report the skipped
    (``announce_skips``: as events too) and refused ones, index the ready entries the index
    lacks, register the matrix; the run's shared state, the plans and the reports so far."""
    backend = get_backend(matrix.backend)
    plans = plan_precompile(cells, fingerprint, find_ready(store, cells, fingerprint),
                            force=force, compile_only=options.compile_only)
    emit = progress or (lambda event: None)
    reports: dict[str, CellReport] = {}
    for p in plans:
        if p.action == SKIP:
            reports[p.cell.id] = CellReport(p.cell.id, p.cell.key, p.entry_key, SKIPPED)
            if announce_skips:
                emit(("skip", p.cell.id, "ready (entry in store)"))
        elif p.action == REFUSE:
            reports[p.cell.id] = CellReport(p.cell.id, p.cell.key, p.entry_key, REFUSED,
                                            error=p.reason)
            emit(("refused", p.cell.id, p.reason or ""))
    index_known_entries(store, index, [p for p in plans if p.action == SKIP], backend)
    _register(index, matrix)
    workdir = Path(options.workdir or tempfile.mkdtemp(prefix="neffcache-precompile-"))
    run = Run(matrix, store, index, fingerprint, backend, options, environ, workdir, emit)
    return run, plans, reports


def begin_run(run: Run, host: str) -> None:
    """Before the first warm-up: the work directory, and the run's row in the index."""
    run.workdir.mkdir(parents=True, exist_ok=True)
    run.run_id = run.index.start_run(host, run.fingerprint, matrix_name_of(run.matrix))


def finish_run(run: Run, started: float, cells: Sequence[CellReport]) -> PrecompileReport:
    """Remove the work directory (unless kept or given) and make the report."""
    options = run.options
    if not options.keep_workdir and options.workdir is None:
        shutil.rmtree(run.workdir, ignore_errors=True)
    return PrecompileReport(
        matrix=run.matrix.source, backend=run.backend.name,
        fingerprint_key=run.fingerprint.key, store_url=run.store.url, run_id=run.run_id,
        cells=tuple(cells), seconds=time.monotonic() - started,
        workdir=str(run.workdir) if options.keep_workdir or options.workdir else None)


def index_known_entries(store: Store, index: Any, plans: Sequence[CellPlan],
                         backend: Backend) -> None:
    """Entries already in the store but unknown to this index get indexed (coverage stays
    true when several indexes share a store): only these cells' entry keys are looked up
    (never every indexed key); the unknown ones are read in parallel and recorded a batch
    per transaction (``Index.record_entries``). Nothing is written when all are known."""
    if not plans:
        return
    known = index.indexed_entry_keys([p.entry_key for p in plans])
    unknown = [p.entry_key for p in plans if p.entry_key not in known]
    if not unknown:
        return

    def read(key: str) -> Any:
        try:
            data = store.read(manifest_key(key))
        except NotFoundError:
            return None
        return decode_manifest(data, allowed_roots=backend.root_names)

    with ThreadPoolExecutor(max_workers=min(READERS, len(unknown))) as pool:
        manifests = [m for m in pool.map(read, unknown) if m is not None]
    if manifests:
        index.record_entries(manifests, store.url)


def _slug(n: int, cell: Cell) -> str:
    return f"{n:03d}-" + "".join(ch if ch.isalnum() or ch in "-." else "_" for ch in cell.id)



def run_pool(run: Run, reports: Mapping[str, CellReport],
             work: Callable[[ThreadPoolExecutor], object]) -> None:
    """Run ``work`` on a pool of ``run.options.workers`` threads; on any failure (Ctrl-C, a
    store failure) stop the run and its worker processes and start nothing more; whatever
    happens, record the run's published and failed counts in the index."""
    try:
        with ThreadPoolExecutor(max_workers=max(1, run.options.workers)) as pool:
            try:
                work(pool)
            except BaseException:
                run.stopping.set()
                kill_running_workers()
                raise
    finally:
        done = [r for r in reports.values() if r.status in (PUBLISHED, EXISTS)]
        failed = [r for r in reports.values() if r.status == FAILED]
        run.index.finish_run(run.run_id, len(done), len(failed))

def warm_cell(run: Run, n: int, plan: CellPlan) -> CellReport:
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


def _record_failure(run: Run, plan: CellPlan, outcome: WorkerOutcome) -> CellReport:
    with run.lock:
        run.index.record_failure(run.run_id, plan.cell, run.fingerprint, outcome.exit_status,
                                 outcome.wall_seconds, outcome.log_tail)
    run.emit(("failed", plan.cell.id, f"{outcome.error} (exit {outcome.exit_status}, "
                                      f"{outcome.wall_seconds:.1f} s)"))
    return CellReport(plan.cell.id, plan.cell.key, plan.entry_key, FAILED,
                      seconds=outcome.seconds, wall_seconds=outcome.wall_seconds,
                      exit_status=outcome.exit_status, error=outcome.error,
                      log_tail=outcome.log_tail[-2000:])


def _publish(run: Run, plan: CellPlan, spec: WorkerSpec, outcome: WorkerOutcome) -> CellReport:
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


def _verify(run: Run, plan: CellPlan, spec: WorkerSpec, cell_dir: Path) -> VerifyReport:
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


def _verified(run: Run, plan: CellPlan, report: VerifyReport) -> VerifyReport:
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
