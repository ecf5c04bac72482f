"""Run a precompile: warm each planned cell in a worker, publish, index and verify its entry."""

from __future__ import annotations

import glob
import itertools
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neffcache.backends import get_backend, root_dirs
from neffcache.errors import NeffcacheError, StoppedError
from neffcache.fingerprint import Fingerprint
from neffcache.matrix import Cell, Matrix
from neffcache.precompile.heartbeat import PUBLISHING, VERIFYING, Beats, CellBeat
from neffcache.precompile.launch import WORKER_LOG, WorkerOutcome, kill_running_workers
from neffcache.precompile.plan import (
    CANCELLED,
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
    read_entries,
)
from neffcache.precompile.publish import STOP_POLL_SECONDS, PublishOptions, publish_with
from neffcache.precompile.warm import judge_outcome, warm_restored
from neffcache.restore import RestoreRequest, restore
from neffcache.store import Store, manifest_key

if TYPE_CHECKING:
    from neffcache.index import Index


@dataclass(frozen=True, slots=True)
class RunHooks:
    """How the caller follows and stops a run: ``progress`` gets each event, setting ``stop``
    ends it early (the library installs no signal handler), ``heartbeat`` gets each beat."""

    progress: Callable[[Event], None] | None = None
    stop: threading.Event | None = None
    heartbeat: Callable[[CellBeat], None] | None = None


@dataclass(frozen=True, slots=True)
class RunContext:
    """What every step of one run shares, static or claimed (``environ``: the workers')."""

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
    raises for a failed cell (the report says which failed)."""
    return precompile_cells(RunContext(matrix, store, index, fingerprint, options, environ,
                                       hooks), cells)


def precompile_cells(context: RunContext, cells: Sequence[Cell]) -> PrecompileReport:
    """The static driver: the slots take the planned cells in order."""
    run = PrecompileRun.open(context, cells, announce_skips=True)
    planned = iter(run.to_warm)  # shared: next() is atomic, each plan goes to one slot

    def slot() -> None:
        while not run.stopping and (plan := next(planned, None)) is not None:
            run.warm(plan)

    run.in_slots(socket.gethostname(), slot)
    return run.finish()


class PrecompileRun:
    """One run, static or claimed: its plans and what its slot threads share."""

    def __init__(self, context: RunContext, plans: tuple[CellPlan, ...], workdir: Path,
                 started: float) -> None:
        self.context, self.options, self.plans = context, context.options, plans
        self.workdir, self._started = workdir, started
        self.backend = get_backend(context.matrix.backend)
        self.run_id: str | None = None  # set by in_slots
        self.emit: Callable[[Event], None] = context.hooks.progress or (lambda event: None)
        self.environ = {**context.environ, **dict(self.options.extra_env)}  # the workers'
        self._reports: dict[str, CellReport] = {  # skipped and refused cells: known from the plans
            p.cell.id: _cell_report(p, SKIPPED if p.action == SKIP else REFUSED, error=p.reason)
            for p in plans if p.action != WARM}
        self._lock = threading.Lock()  # the reports, the index's writes
        self._stopping = threading.Event()
        self._cancel = context.hooks.stop or threading.Event()  # the caller's stop
        self._ended_workers = 0  # workers ended because of the stop event
        self._stopped_publishes = 0  # publishes stopped by it (counted as running cells)
        self._numbers = itertools.count(1)
        self.beats = Beats(self.options.heartbeat_seconds, context.hooks.heartbeat)

    @classmethod
    def open(cls, context: RunContext, cells: Sequence[Cell], *,
             announce_skips: bool) -> PrecompileRun:
        """Plan the cells, announce the skipped and refused ones, index the ready entries the
        index lacks, register the matrix: the run of those plans."""
        started, options, fingerprint = time.monotonic(), context.options, context.fingerprint
        plans = plan_precompile(cells, fingerprint, find_ready(context.store, cells, fingerprint),
                                force=options.force, compile_only=options.compile_only)
        workdir = Path(options.workdir or tempfile.mkdtemp(prefix="neffcache-precompile-"))
        run = cls(context, plans, workdir, started)
        for p in plans:
            if p.action == SKIP and announce_skips:
                run.emit(("skip", p.cell.id, "ready (entry in store)"))
            elif p.action == REFUSE:
                run.emit(("refused", p.cell.id, p.reason or ""))
        run._index_known([p for p in plans if p.action == SKIP])
        register_matrix_file(context.index, context.matrix)
        return run

    @property
    def to_warm(self) -> tuple[CellPlan, ...]:
        return tuple(p for p in self.plans if p.action == WARM)

    @property
    def stopping(self) -> bool:
        """True once a slot failed or the run was stopped: start nothing more."""
        return self._stopping.is_set() or self._cancel.is_set()

    @property
    def cancelled(self) -> bool:  # the caller's stop event is set
        return self._cancel.is_set()

    def pause(self, seconds: float) -> None:  # or less, when the run stops meanwhile
        until = time.monotonic() + seconds
        while not self.stopping and (left := until - time.monotonic()) > 0:
            self._stopping.wait(min(left, STOP_POLL_SECONDS))

    def in_slots(self, host: str, slot: Callable[[], None]) -> None:
        """With cells to warm: the work directory and the run's row in the index (run by
        ``host``), then ``slot`` in ``options.workers`` threads until each returns; a failure
        stops the run and its workers and is raised. Always records the run's counts."""
        from neffcache.index import matrix_name_of

        if not self.to_warm:
            return
        c, count = self.context, max(1, self.options.workers)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.run_id = c.index.start_run(host, c.fingerprint, matrix_name_of(c.matrix))
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
                statuses = [r.status for r in self._reports.values()]
            c.index.finish_run(
                self.run_id, statuses.count(PUBLISHED) + statuses.count(EXISTS),
                statuses.count(FAILED), statuses.count(CANCELLED) if self.cancelled else None)

    def _guarded(self, slot: Callable[[], None]) -> None:
        try:
            slot()
        except BaseException:
            self._stopping.set()  # the other slots finish their cell and take no other
            raise

    def warm(self, plan: CellPlan) -> CellReport:
        """Warm one planned cell in a worker, then publish, index (and maybe verify) its entry,
        or record its failure; the cell's report, also kept for ``finish``."""
        return self._kept(self._warm(plan))

    def already_published(self, plan: CellPlan) -> CellReport | None:
        """If the store holds ``plan``'s entry (its index row lost), index it and report it
        existing; None when the store lacks it."""
        if not self.context.store.has(manifest_key(plan.entry_key)):
            return None
        self._index_known([plan])
        self.emit(("skip", plan.cell.id, "ready (entry in store)"))
        return self._kept(_cell_report(plan, EXISTS))

    def finish(self, released: int = 0) -> PrecompileReport:
        """Remove the work directory (unless kept or given) and make the report;
        ``released``: leases the driver gave back as cancelled."""
        c, options = self.context, self.options
        if not options.keep_workdir and options.workdir is None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        with self._lock:
            cells = [self._reports[p.cell.id] for p in self.plans if p.cell.id in self._reports]
        return PrecompileReport(
            matrix=c.matrix.source, backend=self.backend.name,
            fingerprint_key=c.fingerprint.key, store_url=c.store.url, run_id=self.run_id,
            cells=tuple(cells), seconds=time.monotonic() - self._started,
            workdir=str(self.workdir) if options.keep_workdir or options.workdir else None,
            stopped=StopSummary(self._ended_workers + self._stopped_publishes,
                                sum(1 for r in cells if r.status == CANCELLED), released)
            if self.cancelled else None)

    def _index_known(self, plans: Sequence[CellPlan]) -> None:
        """Index the entries the store holds but this index lacks (coverage stays true when
        several indexes share a store)."""
        if not plans:
            return
        store, index = self.context.store, self.context.index
        known = index.indexed_entry_keys([p.entry_key for p in plans])
        unknown = [p.entry_key for p in plans if p.entry_key not in known]
        if unknown:
            index.record_entries(list(read_entries(store, unknown, self.backend).values()),
                                 store.url)

    def _kept(self, report: CellReport) -> CellReport:
        with self._lock:
            self._reports[report.cell_id] = report
        return report

    def _warm(self, plan: CellPlan) -> CellReport:
        cell, options = plan.cell, self.options
        slug = "".join(ch if ch.isalnum() or ch in "-." else "_" for ch in cell.id)
        cell_dir = self.workdir / f"{next(self._numbers):03d}-{slug}"  # next() is atomic
        if self.stopping:
            return _cell_report(plan, CANCELLED if self.cancelled else FAILED,
                                error="not started: stopped")
        self.emit(("start", cell.id, "warming"))
        self.beats.watch(cell.id, cell_dir / WORKER_LOG)
        try:
            outcome = self._worker(cell, cell_dir / "roots", cell_dir)
            if not outcome.ok:
                return self._not_warmed(plan, outcome)
            self.beats.phase(cell.id, PUBLISHING)
            try:
                report = self._publish(plan, outcome)
            except StoppedError:
                with self._lock:
                    self._stopped_publishes += 1
                self.emit(("cancel", cell.id, "publish stopped: the run was stopped (no entry "
                                              "written; a later publish resumes it)"))
                return _cell_report(plan, CANCELLED, outcome,
                                    error="cancelled: stopped while publishing")
            if options.verify:
                self.beats.phase(cell.id, VERIFYING, cell_dir / "verify" / WORKER_LOG)
                report = replace(report, verify=self._verify(plan, cell_dir))
            return report
        finally:
            self.beats.forget(cell.id)
            if not options.keep_workdir:
                shutil.rmtree(cell_dir, ignore_errors=True)

    def _worker(self, cell: Cell, base: Path, workdir: Path) -> WorkerOutcome:
        """A worker warming ``cell`` against the cache roots under ``base`` (empty, or restored
        into), its spec, log and result in ``workdir``."""
        return warm_restored(self.context.matrix, cell, self.backend, base, workdir,
                             environ=self.environ, timeout=self.options.timeout,
                             python=self.options.python)

    def _not_warmed(self, plan: CellPlan, outcome: WorkerOutcome) -> CellReport:
        """Cancelled (the run was stopped), interrupted, or a failure recorded in the index."""
        if self.cancelled:
            self.emit(("cancel", plan.cell.id, f"worker ended: the run was stopped "
                                               f"({outcome.wall_seconds:.1f} s)"))
            return _cell_report(plan, CANCELLED, outcome, seconds=None,
                                error="cancelled: stopped")
        if self.stopping:
            return _cell_report(plan, FAILED, error="interrupted")
        with self._lock:
            self.context.index.record_failure(self.run_id, plan.cell, self.context.fingerprint,
                                              outcome.exit_status, outcome.wall_seconds,
                                              outcome.log_tail)
        self.emit(("failed", plan.cell.id, f"{outcome.error} (exit {outcome.exit_status}, "
                                           f"{outcome.wall_seconds:.1f} s)"))
        return _cell_report(plan, FAILED, outcome, error=outcome.error,
                            log_tail=outcome.log_tail[-2000:])

    def _publish(self, plan: CellPlan, outcome: WorkerOutcome) -> CellReport:
        c, backend = self.context, self.backend
        roots = {name: Path(d) for name, d in root_dirs(backend, str(outcome.base)).items()}
        producer = {"tool": "neffcache precompile", "run_id": str(self.run_id),
                    "matrix": c.matrix.name or Path(c.matrix.source).name,
                    "worker_wall_seconds": f"{outcome.wall_seconds:.3f}"}
        result = publish_with(c.store, plan.cell, c.fingerprint, backend, roots, PublishOptions(
            producer=producer, compile_seconds=outcome.seconds, signer=self.options.signer,
            stop=self._cancel))
        with self._lock:
            c.index.record_entry(result.manifest, c.store.url)
        status = PUBLISHED if result.created else EXISTS
        files = len(result.manifest.files)
        self.emit(("done", plan.cell.id, f"{status}: first call {outcome.seconds or 0:.1f} s, "
                                         f"{files} files, {result.manifest.total_bytes} bytes"))
        return _cell_report(plan, status, outcome, files=files,
                            total_bytes=result.manifest.total_bytes,
                            bytes_uploaded=result.bytes_uploaded)

    def _verify(self, plan: CellPlan, cell_dir: Path) -> VerifyReport:
        c = self.context
        self.emit(("verify", plan.cell.id, "restoring into a new directory and warming again"))
        target = cell_dir / "verify-roots"
        try:  # as an instance would: the restore use case, for the fingerprint built here
            restored = restore(RestoreRequest(
                c.matrix, target, cells=(glob.escape(plan.cell.id),), store=c.store.url,
                fingerprint=c.fingerprint, report_to="none"))
        except NeffcacheError as exc:
            return self._verified(plan, VerifyReport(VERIFY_FAILED, None, 0.0,
                                                     error=f"restore: {exc}"))
        if (err := restored.error()) is not None or plan.cell.id not in restored.restored:
            return self._verified(plan, VerifyReport(
                VERIFY_FAILED, None, restored.seconds,
                error=f"restore: {err or 'cell not restored'}"))
        outcome = self._worker(plan.cell, target, cell_dir / "verify")
        judged = judge_outcome(plan.cell, plan.entry_key, outcome)
        failed = judged.status == FAILED
        return self._verified(plan, VerifyReport(
            VERIFY_FAILED if failed else judged.status, None if failed else judged.seconds,
            restored.seconds, verdict=judged.verdict, error=judged.error))

    def _verified(self, plan: CellPlan, report: VerifyReport) -> VerifyReport:
        with self._lock:
            self.context.index.record_verification(plan.entry_key, report.status)
        detail = report.error or (f"first call {report.seconds:.1f} s, "
                                  f"{'nothing compiled' if report.status == HIT else 'COMPILED'}")
        self.emit(("verify", plan.cell.id, f"{report.status}: {detail}"))
        return report


def _cell_report(plan: CellPlan, status: str, outcome: WorkerOutcome | None = None,
                 **fields: Any) -> CellReport:
    """``plan``'s cell report: ``outcome``'s seconds and exit status, then ``fields``."""
    if outcome is not None:
        fields = {"seconds": outcome.seconds, "wall_seconds": outcome.wall_seconds,
                  "exit_status": outcome.exit_status, **fields}
    return CellReport(plan.cell.id, plan.cell.key, plan.entry_key, status, **fields)


def register_matrix_file(index: Index, matrix: Matrix, *, replace: bool = False) -> None:
    """Keep the declared matrix in the index, so coverage needs no file (``replace``: even
    when its name holds other content)."""
    from neffcache.index import register_matrix

    if not matrix.source or matrix.source.startswith("<"):
        return
    try:
        text = Path(matrix.source).read_text(encoding="utf-8")
    except OSError:
        return
    register_matrix(index, matrix, text, replace=replace)
