"""Run a precompile: warm each planned cell in a worker, publish, record, optionally verify.

``open_run`` plans the cells and returns a ``PrecompileRun``, whose steps a driver calls in
this order: ``start`` (the work directory and the run's row in the index), ``in_slots`` (a
slot loop in ``options.workers`` threads at once; each loop calls ``warm`` per cell it takes,
or ``already_published``), ``finish`` (the report). ``apply_precompile`` is the static driver:
its slots take the planned cells in order; ``neffcache.precompile.claims`` is the claimed one.

``warm`` runs one cell in a worker subprocess (``neffcache.precompile.launch``) in fresh empty
cache roots; publishes what a successful warm-up captured as an entry
(``neffcache.precompile.publish``) and indexes it; records a failed, crashed or timed-out
warm-up as a failed cell (exit status, seconds, log tail) and publishes nothing for it. With
``verify`` each new entry is restored into a new directory and warmed once more in a fresh
process (``warm_restored``), which must compile nothing.

Stopping: a run given a ``stop`` event (``threading.Event``) watches it while its slots run
(``in_slots`` looks every ``STOP_POLL_SECONDS``). Once set, no cell is started, the process
group of every running worker is ended, those cells are reported ``cancelled`` (never
recorded as failures) and the report's ``stopped`` says how many. A cell publishing then
stops at the publish's next safe point (``publish_entry``'s ``stop``: within
``STOP_POLL_SECONDS``, before its manifest, nothing half-published) and is reported
``cancelled`` too. Who sets the event (a
signal handler at the CLI edge, a caller's own thread) is not this module's business: the
library installs no signal handler.
"""


from __future__ import annotations

import glob
import itertools
import queue
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from neffcache.backends import Backend, get_backend, root_dirs
from neffcache.errors import NeffcacheError, NotFoundError, StoppedError
from neffcache.fingerprint import Fingerprint
from neffcache.manifest import Manifest, decode_manifest
from neffcache.matrix import Cell, Matrix
from neffcache.precompile.capture import captured_records
from neffcache.precompile.heartbeat import PUBLISHING, VERIFYING, Beats, CellBeat
from neffcache.precompile.launch import WorkerOutcome, kill_running_workers, run_worker
from neffcache.precompile.plan import (
    CANCELLED,
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
    StopSummary,
    VerifyReport,
    find_ready,
    plan_precompile,
    worker_spec,
)
from neffcache.precompile.publish import STOP_POLL_SECONDS, plan_publish, publish_entry
from neffcache.precompile.warm import warm_restored
from neffcache.precompile.worker import WorkerSpec
from neffcache.restore import RestoreRequest, RestoreResult, restore
from neffcache.store import Store, manifest_key

if TYPE_CHECKING:
    from neffcache.index import Index

WORKER_LOG = "worker.log"  # the log run_worker writes in a cell's directory
READERS = 16  # manifests read in parallel when indexing entries the index does not know


@dataclass(frozen=True, slots=True)
class RunHooks:
    """How the caller follows and stops a run: ``progress`` gets each event, setting ``stop``
    ends the run early (see the module's docstring), ``heartbeat`` gets a ``CellBeat`` per
    running cell every ``options.heartbeat_seconds``."""

    progress: Callable[[Event], None] | None = None
    stop: threading.Event | None = None
    heartbeat: Callable[[CellBeat], None] | None = None


@dataclass(frozen=True, slots=True)
class RunContext:
    """What every step of one run shares, static or claimed: the matrix, the store its
    entries go to and the index that records them, the fingerprint they are built for, how
    cells are warmed, the workers' environment, and the caller's hooks."""

    matrix: Matrix
    store: Store
    index: Index
    fingerprint: Fingerprint
    options: PrecompileOptions
    environ: Mapping[str, str]
    hooks: RunHooks = RunHooks()


def apply_precompile(matrix: Matrix, cells: Sequence[Cell], store: Store, index: Index,
                     fingerprint: Fingerprint, options: PrecompileOptions, *,
                     environ: Mapping[str, str], hooks: RunHooks = RunHooks()) -> PrecompileReport:
    """Warm, publish and record every planned cell, ``options.workers`` at a time; never
    raises for a failed cell (the report says which failed). ``hooks``: see ``RunHooks``."""
    context = RunContext(matrix, store, index, fingerprint, options, environ, hooks)
    run = open_run(context, cells, force=options.force, announce_skips=True)
    if run.to_warm:
        run.start(socket.gethostname())
        planned: queue.SimpleQueue[CellPlan] = queue.SimpleQueue()
        for plan in run.to_warm:
            planned.put(plan)

        def slot() -> None:
            while not run.stopping:
                try:
                    plan = planned.get_nowait()
                except queue.Empty:
                    return
                run.warm(plan)

        run.in_slots(slot)
    return run.finish()


def open_run(context: RunContext, cells: Sequence[Cell], *, force: bool,
             announce_skips: bool) -> PrecompileRun:
    """What a static and a claimed run do first: plan the cells, report the skipped
    (``announce_skips``: as events too) and refused ones, index the ready entries the index
    lacks, register the matrix; the run, ready for ``start``."""
    started = time.monotonic()
    matrix, store, options = context.matrix, context.store, context.options
    backend = get_backend(matrix.backend)
    plans = plan_precompile(cells, context.fingerprint,
                            find_ready(store, cells, context.fingerprint),
                            force=force, compile_only=options.compile_only)
    emit = context.hooks.progress or (lambda event: None)
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
    index_known_entries(store, context.index, [p for p in plans if p.action == SKIP], backend)
    _register(context.index, matrix)
    workdir = Path(options.workdir or tempfile.mkdtemp(prefix="neffcache-precompile-"))
    run = PrecompileRun(context, backend, workdir, plans, reports, started)
    run.beats = Beats(options.heartbeat_seconds, context.hooks.heartbeat)
    return run


class PrecompileRun:
    """One run, static or claimed: its plans and what its slot threads share (the reports so
    far, the run's id in the index, the stop flag). Made by ``open_run``; the driver calls
    ``start``, ``in_slots`` (whose loops call ``warm`` / ``already_published``), ``finish``."""

    def __init__(self, context: RunContext, backend: Backend, workdir: Path,
                 plans: Sequence[CellPlan], reports: Mapping[str, CellReport],
                 started: float) -> None:
        self.matrix, self.store, self.index = context.matrix, context.store, context.index
        self.fingerprint, self.backend, self.options = context.fingerprint, backend, \
            context.options
        self.environ, self.workdir = context.environ, workdir
        self.plans: tuple[CellPlan, ...] = tuple(plans)
        self.run_id: str | None = None  # set by start
        self._emit = context.hooks.progress or (lambda event: None)
        self._reports = dict(reports)
        self._started = started
        self._lock = threading.Lock()  # the reports, the cell numbers, the index's writes
        self._stopping = threading.Event()
        stop = context.hooks.stop
        self._cancel = stop if stop is not None else threading.Event()  # the caller's stop
        self._ended_workers = 0  # workers ended because of the stop event
        self._stopped_publishes = 0  # publishes stopped by it (counted as running cells)
        self._numbers = itertools.count(1)
        self.beats = Beats(0.0, None)  # the running cells' heartbeats (open_run sets them)

    @property
    def to_warm(self) -> tuple[CellPlan, ...]:
        """The plans whose cells this run warms (in the order of the cells)."""
        return tuple(p for p in self.plans if p.action == WARM)

    @property
    def stopping(self) -> bool:
        """True once a slot failed, the run was interrupted or stopped: start nothing more."""
        return self._stopping.is_set() or self._cancel.is_set()

    @property
    def cancelled(self) -> bool:
        """True once the caller's stop event is set."""
        return self._cancel.is_set()

    def pause(self, seconds: float) -> None:
        """Wait ``seconds``, or less when the run stops meanwhile."""
        until = time.monotonic() + seconds
        while not self.stopping and (left := until - time.monotonic()) > 0:
            self._stopping.wait(min(left, STOP_POLL_SECONDS))

    def emit(self, event: Event) -> None:
        """A progress event, to the run's ``progress`` callback."""
        self._emit(event)

    def start(self, host: str) -> None:
        """Before the first warm-up: the work directory, and the run's row in the index."""
        from neffcache.index import matrix_name_of

        self.workdir.mkdir(parents=True, exist_ok=True)
        self.run_id = self.index.start_run(host, self.fingerprint, matrix_name_of(self.matrix))

    def in_slots(self, slot: Callable[[], None]) -> None:
        """Run ``slot`` in ``options.workers`` threads at once until each returns. On any
        failure (Ctrl-C, a store failure) stop the run and its worker processes, so the other
        slots start nothing more, and raise it; when the stop event is set, end the running
        workers' process groups (their slots report them cancelled) and let the slots return.
        Whatever happens, record the run's published and failed counts in the index (and, when
        it was stopped, its cancelled ones)."""
        count = max(1, self.options.workers)
        try:
            with self.beats, ThreadPoolExecutor(max_workers=count) as pool:
                pending = {pool.submit(self._guarded, slot) for _ in range(count)}
                try:
                    while pending:
                        ended, pending = wait(pending, timeout=STOP_POLL_SECONDS,
                                              return_when=FIRST_EXCEPTION)
                        for future in ended:
                            future.result()
                        if self._cancel.is_set():
                            # again at each look: a worker may have started just before
                            self._stopping.set()
                            self._ended_workers += kill_running_workers()
                except BaseException:
                    self._stopping.set()
                    kill_running_workers()
                    raise
        finally:
            with self._lock:
                done = [r for r in self._reports.values() if r.status in (PUBLISHED, EXISTS)]
                failed = [r for r in self._reports.values() if r.status == FAILED]
                cancelled = sum(1 for r in self._reports.values() if r.status == CANCELLED)
            assert self.run_id is not None, "in_slots before start"
            self.index.finish_run(self.run_id, len(done), len(failed),
                                  cancelled if self.cancelled else None)

    def _guarded(self, slot: Callable[[], None]) -> None:
        try:
            slot()
        except BaseException:
            self._stopping.set()  # the other slots finish their cell and take no other
            raise

    def warm(self, plan: CellPlan) -> CellReport:
        """Warm one planned cell in a worker, then publish and index its entry (and verify it
        with ``options.verify``), or record its failure; the cell's report, also kept for
        ``finish``."""
        report = self._warm(plan)
        self._keep(report)
        return report

    def already_published(self, plan: CellPlan) -> CellReport | None:
        """If the store holds ``plan``'s entry (published, its index row lost), index it and
        report it as existing (kept for ``finish``); None when the store lacks it."""
        if not self.store.has(manifest_key(plan.entry_key)):
            return None
        index_known_entries(self.store, self.index, [plan], self.backend)
        self.emit(("skip", plan.cell.id, "ready (entry in store)"))
        report = CellReport(plan.cell.id, plan.cell.key, plan.entry_key, EXISTS)
        self._keep(report)
        return report

    def finish(self, released: int = 0) -> PrecompileReport:
        """Remove the work directory (unless kept or given) and make the report: a cell per
        plan that has a report, in the order of the cells; when the run was stopped, its
        ``stopped`` summary (``released``: leases the driver gave back as cancelled)."""
        options = self.options
        if not options.keep_workdir and options.workdir is None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        with self._lock:
            cells = [self._reports[p.cell.id] for p in self.plans if p.cell.id in self._reports]
        return PrecompileReport(
            matrix=self.matrix.source, backend=self.backend.name,
            fingerprint_key=self.fingerprint.key, store_url=self.store.url, run_id=self.run_id,
            cells=tuple(cells), seconds=time.monotonic() - self._started,
            workdir=str(self.workdir) if options.keep_workdir or options.workdir else None,
            stopped=StopSummary(self._ended_workers + self._stopped_publishes,
                                sum(1 for c in cells if c.status == CANCELLED), released)
            if self.cancelled else None)

    # --- one cell ------------------------------------------------------------------------

    def _keep(self, report: CellReport) -> None:
        with self._lock:
            self._reports[report.cell_id] = report

    def _warm(self, plan: CellPlan) -> CellReport:
        cell = plan.cell
        with self._lock:
            n = next(self._numbers)
        cell_dir = self.workdir / _slug(n, cell)
        spec = worker_spec(self.matrix, cell, cell_dir / "roots", cell_dir / "result.json")
        if self.stopping:
            return CellReport(cell.id, cell.key, plan.entry_key,
                              CANCELLED if self.cancelled else FAILED,
                              error="not started: stopped")
        self.emit(("start", cell.id, "warming"))
        self.beats.watch(cell.id, cell_dir / WORKER_LOG)
        try:
            outcome = run_worker(spec, self.backend, cell_dir, environ=self.environ,
                                 extra_env=dict(self.options.extra_env),
                                 timeout=self.options.timeout, python=self.options.python)
            if not outcome.ok and self.cancelled:
                self.emit(("cancel", cell.id, f"worker ended: the run was stopped "
                                              f"({outcome.wall_seconds:.1f} s)"))
                return CellReport(cell.id, cell.key, plan.entry_key, CANCELLED,
                                  wall_seconds=outcome.wall_seconds,
                                  exit_status=outcome.exit_status, error="cancelled: stopped")
            if not outcome.ok and self.stopping:
                return CellReport(cell.id, cell.key, plan.entry_key, FAILED, error="interrupted")
            if not outcome.ok:
                return self._record_failure(plan, outcome)
            self.beats.phase(cell.id, PUBLISHING)
            try:
                report = self._publish(plan, spec, outcome)
            except StoppedError:
                with self._lock:
                    self._stopped_publishes += 1
                self.emit(("cancel", cell.id, "publish stopped: the run was stopped (no entry "
                                              "written; a later publish resumes it)"))
                return CellReport(cell.id, cell.key, plan.entry_key, CANCELLED,
                                  seconds=outcome.seconds, wall_seconds=outcome.wall_seconds,
                                  exit_status=outcome.exit_status,
                                  error="cancelled: stopped while publishing")
            if self.options.verify:
                self.beats.phase(cell.id, VERIFYING, cell_dir / "verify" / WORKER_LOG)
                report = replace(report, verify=self._verify(plan, cell_dir))
            return report
        finally:
            self.beats.forget(cell.id)
            if not self.options.keep_workdir:
                shutil.rmtree(cell_dir, ignore_errors=True)

    def _record_failure(self, plan: CellPlan, outcome: WorkerOutcome) -> CellReport:
        with self._lock:
            self.index.record_failure(self.run_id, plan.cell, self.fingerprint,
                                      outcome.exit_status, outcome.wall_seconds,
                                      outcome.log_tail)
        self.emit(("failed", plan.cell.id, f"{outcome.error} (exit {outcome.exit_status}, "
                                           f"{outcome.wall_seconds:.1f} s)"))
        return CellReport(plan.cell.id, plan.cell.key, plan.entry_key, FAILED,
                          seconds=outcome.seconds, wall_seconds=outcome.wall_seconds,
                          exit_status=outcome.exit_status, error=outcome.error,
                          log_tail=outcome.log_tail[-2000:])

    def _publish(self, plan: CellPlan, spec: WorkerSpec, outcome: WorkerOutcome) -> CellReport:
        roots = {name: Path(d) for name, d in root_dirs(self.backend, spec.base).items()}
        files = captured_records(self.backend, plan_publish(self.backend, roots))
        producer = {"tool": "neffcache precompile", "run_id": str(self.run_id),
                    "matrix": self.matrix.name or Path(self.matrix.source).name,
                    "worker_wall_seconds": f"{outcome.wall_seconds:.3f}"}
        result = publish_entry(self.store, plan.cell, self.fingerprint, self.backend, roots,
                               producer=producer, compile_seconds=outcome.seconds, files=files,
                               signer=self.options.signer, stop=self._cancel)
        with self._lock:
            self.index.record_entry(result.manifest, self.store.url)
        status = PUBLISHED if result.created else EXISTS
        self.emit(("done", plan.cell.id, f"{status}: first call {outcome.seconds or 0:.1f} s, "
                                         f"{len(files)} files, "
                                         f"{result.manifest.total_bytes} bytes"))
        return CellReport(plan.cell.id, plan.cell.key, result.manifest.entry_key, status,
                          seconds=outcome.seconds, wall_seconds=outcome.wall_seconds,
                          files=len(files), total_bytes=result.manifest.total_bytes,
                          bytes_uploaded=result.bytes_uploaded, exit_status=outcome.exit_status)

    def _verify(self, plan: CellPlan, cell_dir: Path) -> VerifyReport:
        self.emit(("verify", plan.cell.id, "restoring into a new directory and warming again"))
        target = cell_dir / "verify-roots"
        restored: RestoreResult | None = None
        err: NeffcacheError | None
        try:  # as an instance would: the restore use case, for the fingerprint built here
            restored = restore(RestoreRequest(
                self.matrix, target, cells=(glob.escape(plan.cell.id),), store=self.store.url,
                fingerprint=self.fingerprint, report_to="none"))
            err = restored.error()
        except NeffcacheError as exc:
            err = exc
        if restored is None or err is not None or plan.cell.id not in restored.restored:
            return self._verified(plan, VerifyReport(
                VERIFY_FAILED, None, restored.seconds if restored else 0.0,
                error=f"restore: {err or 'cell not restored'}"))
        outcome = warm_restored(self.matrix, plan.cell, self.backend, target,
                                cell_dir / "verify",
                                environ={**self.environ, **dict(self.options.extra_env)},
                                timeout=self.options.timeout, python=self.options.python)
        verdict = outcome.verdict()
        if verdict is None:
            report = VerifyReport(VERIFY_FAILED, None, restored.seconds, error=outcome.error)
        else:
            report = VerifyReport(COMPILED if verdict.compiled else HIT, outcome.seconds,
                                  restored.seconds, verdict=verdict.to_json())
        return self._verified(plan, report)

    def _verified(self, plan: CellPlan, report: VerifyReport) -> VerifyReport:
        with self._lock:
            self.index.record_verification(plan.entry_key, report.status)
        detail = report.error or (f"first call {report.seconds:.1f} s, "
                                  f"{'nothing compiled' if report.status == HIT else 'COMPILED'}")
        self.emit(("verify", plan.cell.id, f"{report.status}: {detail}"))
        return report


def index_known_entries(store: Store, index: Index, plans: Sequence[CellPlan],
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

    def read(key: str) -> Manifest | None:
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


def _register(index: Index, matrix: Matrix) -> None:
    """Keep the declared matrix in the index, so coverage needs no file (a new version only
    when its content changed)."""
    from neffcache.index import register_matrix

    if not matrix.source or matrix.source.startswith("<"):
        return
    try:
        text = Path(matrix.source).read_text(encoding="utf-8")
    except OSError:
        return
    register_matrix(index, matrix, text)
