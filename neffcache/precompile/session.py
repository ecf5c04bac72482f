"""``precompile(PrecompileRequest) -> PrecompileResult``: ``neffcache precompile [--claim]``."""

from __future__ import annotations

import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neffcache.backends import neuron_env
from neffcache.errors import ExitRule, NeffcacheError, UsageError, WorkerError
from neffcache.matrix import Cell, Matrix, select_cells, shard_cells
from neffcache.precompile.heartbeat import CellBeat, Ticker
from neffcache.precompile.plan import (
    EXISTS,
    PUBLISHED,
    Event,
    PrecompileOptions,
    PrecompileReport,
    refusal_reason,
)
from neffcache.precompile.push_cell import open_publisher
from neffcache.precompile.run import (
    PrecompileRun,
    RunContext,
    RunHooks,
    precompile_cells,
    register_matrix_file,
)
from neffcache.request_rules import checked_request

if TYPE_CHECKING:
    from neffcache.index import Index, Lease

_SHARD_RE = re.compile(r"^(\d+)/(\d+)$")


@checked_request
class PrecompileRequest:
    """What ``neffcache precompile`` is asked to do; each field is the flag of that name.

    ``cells``: globs of cell ids (none: all). ``workers``: cells warmed at once, each in its
    own process. ``shard``: ``"I/N"``, shard I of N. ``claim``: take cells from the index's
    claim queue instead (with ``lease_seconds``, ``retries``; not with ``shard`` or
    ``force``). ``force``: warm cells whose entry exists. ``python``: the interpreter the
    workers run under and the fingerprint describes. ``allow_missing_packages``: run even when
    it lacks what the backend needs. ``replace_matrix``: register the matrix even when its
    name holds other content. ``verify``: restore each new entry and warm it again.
    ``target``, ``compile_only``: neuron only. ``store``, ``index``, ``python``,
    ``signing_key``: None resolves them as the CLI does, from ``environ`` (None: the
    process's; also the workers' environment). ``notice``: log lines. ``progress``: each
    event. ``selected``: told the number of selected cells once, first. ``stop``: set it
    (from any thread or a handler the caller installed) to stop the run: no cell starts,
    running workers are ended and reported ``cancelled`` (with ``claim``, their leases
    released as cancelled). ``heartbeat``: a ``CellBeat`` per running cell every
    ``heartbeat_seconds`` (0: never).
    """

    matrix: str | Path
    cells: Sequence[str] = ()
    workers: int = 1
    shard: str | None = None
    claim: bool = False
    lease_seconds: float = 300.0
    retries: int = 2
    force: bool = False
    timeout: float | None = None
    verify: bool = False
    target: str | None = None
    compile_only: bool = False
    workdir: str | Path | None = None
    keep_workdir: bool = False
    store: str | None = None
    index: str | None = None
    environ: Mapping[str, str] | None = None
    notice: Callable[[str], None] | None = None
    progress: Callable[[Event], None] | None = None
    selected: Callable[[int], None] | None = None
    stop: threading.Event | None = None
    allow_missing_packages: bool = False
    replace_matrix: bool = False
    python: str | None = None
    heartbeat: Callable[[CellBeat], None] | None = None
    heartbeat_seconds: float = 30.0
    signing_key: str | Path | None = None


@dataclass(frozen=True, slots=True)
class PrecompileResult(ExitRule):
    """How a precompile ended: ``report`` has a row per selected cell. ``to_json()`` is the
    ``--json`` document; ``error()`` a WorkerError (exit 1) when a cell failed or was
    cancelled or a verified entry still compiled."""

    report: PrecompileReport

    def to_json(self) -> dict[str, Any]:
        return self.report.to_json()

    def error(self) -> NeffcacheError | None:
        report, parts = self.report, []
        if report.stopped is not None and report.stopped.cancelled:
            parts.append(f"stopped: {report.stopped.cancelled} cell(s) cancelled")
        if report.failed:
            ids = ", ".join(c.cell_id for c in report.failed[:5])
            parts.append(f"{len(report.failed)} of {len(report.cells)} cells failed ({ids})")
        if unclean := report.not_verified:
            ids = ", ".join(f"{c.cell_id}: {c.verify.status}" for c in unclean[:5] if c.verify)
            parts.append(f"{len(unclean)} restored entries did not warm cleanly ({ids})")
        if not parts:
            return None
        return WorkerError("; ".join(parts),
                           hint="neffcache coverage MATRIX --json shows each failure's log tail")


def precompile(request: PrecompileRequest) -> PrecompileResult:
    """Warm every selected cell not yet cached for this host's fingerprint, each in its own
    worker process, and publish and index what each compiled (``neffcache precompile
    --help``); a failed cell does not stop the others.

    Raises UsageError (2) for a request that cannot run here, MatrixError (2),
    FingerprintMismatchError (5) for an unusable fingerprint, UnavailableError (6).
    """
    from neffcache.fingerprint import described_interpreter
    from neffcache.index import open_index
    from neffcache.matrix_io import load_matrix

    environ = os.environ if request.environ is None else request.environ
    spec = load_matrix(request.matrix)
    cells = _selected_cells(request, spec)
    env = {**environ, **neuron_overrides(spec.backend, request.target, request.compile_only,
                                         environ)}
    refuse_if_nothing_left(cells, request.compile_only)
    to = open_publisher(request, spec.backend, env)
    python = to.settings.python
    options = PrecompileOptions(  # the request's fields of that name, and a few derived
        **{f.name: getattr(request, f.name) for f in fields(PrecompileOptions)
           if f.name not in _DERIVED},
        workdir=Path(request.workdir) if request.workdir else None,
        python=None if python is None else described_interpreter(python), signer=to.signer)
    hooks = RunHooks(request.progress, request.stop, request.heartbeat)
    with open_index(to.settings.index_url, auto_upgrade=to.settings.index_is_embedded) as ix:
        context = RunContext(spec, to.store, ix, to.fingerprint, options, env, hooks)
        register_matrix_file(ix, spec, replace=request.replace_matrix)  # refused before work
        if request.selected is not None:
            request.selected(len(cells))
        report = (apply_claims(context, cells, ClaimOptions(request.lease_seconds, request.retries))
                  if request.claim else precompile_cells(context, cells))
    return PrecompileResult(report)


_DERIVED = ("workdir", "python", "signer", "extra_env")  # PrecompileOptions not taken as is


def _selected_cells(request: PrecompileRequest, spec: Matrix) -> tuple[Cell, ...]:
    """The cells ``--cells`` and ``--shard`` select."""
    cells = select_cells(spec.cells, request.cells)
    shard = parse_shard(request.shard)
    if request.claim and (shard is not None or request.force):
        raise UsageError(f"--claim and {'--shard' if shard is not None else '--force'} do not "
                         f"mix: claiming shares cells dynamically and never re-warms a cell "
                         f"with an entry")
    if shard is not None:
        cells = shard_cells(cells, *shard)
    if not cells and request.notice is not None:
        request.notice(f"{spec.source}: no cell selected")
    return cells


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"I/N"`` as (I, N); None for None. Anything else is a UsageError. Pure."""
    if text is None:
        return None
    m = _SHARD_RE.match(text.strip())
    if not m:
        raise UsageError(f"--shard {text!r}: expected I/N such as 0/4 (shard I of N, from 0)")
    return int(m.group(1)), int(m.group(2))


def neuron_overrides(backend: str, target: str | None, compile_only: bool,
                     environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Variables --target/--compile-only set for the workers (and the fingerprint). Pure."""
    if backend != "neuron" and (target or compile_only):
        raise UsageError(f"--target/--compile-only apply to the neuron backend, and this "
                         f"matrix's backend is {backend!r}")
    env = {neuron_env.PLATFORM_TARGET: target} if target else {}
    if compile_only:
        if not (target or (environ or {}).get(neuron_env.PLATFORM_TARGET, "").strip()):
            raise UsageError(f"--compile-only needs --target {'|'.join(neuron_env.TARGETS)} "
                             f"(or {neuron_env.PLATFORM_TARGET}): there is no Trainium device "
                             f"here to tell which one to compile for")
        env[neuron_env.COMPILE_ONLY] = neuron_env.COMPILE_ONLY_ON
    return env


def refuse_if_nothing_left(cells: Sequence[Cell], compile_only: bool) -> None:
    """Every selected cell refused is a usage error (some are reported per cell). Pure."""
    reasons = [refusal_reason(c, compile_only) for c in cells]
    if cells and all(reasons):
        raise UsageError(f"{cells[0].id}: {reasons[0]} (all {len(cells)} selected cells are "
                         f"refused)")


@dataclass(frozen=True, slots=True)
class ClaimOptions:
    """How ``precompile --claim`` holds its cells: the lease and the retries."""

    lease_seconds: float = 300.0  # a lease not renewed for this long goes back to the queue
    retries: int = 2  # failed attempts retried at most this often across the fleet

    @property
    def heartbeat_seconds(self) -> float:
        return self.lease_seconds / 3  # two heartbeats may be missed before the lease expires

    @property
    def poll_seconds(self) -> float:  # how often a worker waiting for a lease looks again
        return max(0.2, min(self.lease_seconds / 4, 1.0))


class Heartbeat(Ticker):
    """Renews one lease every ``interval`` seconds in the block (a dead parent stops, so its
    lease expires); sets ``lost`` once the lease is not ours, tells ``note`` a failed renewal."""

    def __init__(self, index: Index, lease: Lease, lease_seconds: float,
                 interval: float, note: Callable[[str], None] = lambda message: None) -> None:
        super().__init__(interval, "neffcache-heartbeat")
        self._index, self._lease, self._note = index, lease, note
        self._lease_seconds = lease_seconds
        self.lost = threading.Event()

    def tick(self) -> bool:
        try:
            if not self._index.renew_lease(self._lease, self._lease_seconds):
                self.lost.set()
                return False
        except NeffcacheError as exc:  # a blip: try again at the next beat
            self._note(f"lease renewal failed (trying again in {self.tick_interval:g} s): "
                       f"{exc}")
        return True


def apply_claims(context: RunContext, cells: Sequence[Cell],
                 claim: ClaimOptions) -> PrecompileReport:
    """Warm cells from the claim queue until none is left to claim or in progress, or the
    hooks' ``stop`` is set; the report lists the cells this worker handled."""
    from neffcache.index import matrix_name_of

    run = PrecompileRun.open(context, cells, announce_skips=False)
    name = matrix_name_of(context.matrix)
    removed = context.index.queue_claims(name, [p.cell for p in run.to_warm],
                                         context.fingerprint, [c.key for c in context.matrix.cells])
    if removed:
        run.emit(("note", name, f"removed {removed} queued cell(s) the matrix no longer "
                                f"declares"))
    loop = _ClaimLoop(run, claim, name)
    run.in_slots(loop.host, loop.drain)
    return run.finish(released=loop.released)


class _ClaimLoop:
    """What each local slot runs: claim a cell, warm it under a heartbeat, release it."""

    def __init__(self, run: PrecompileRun, claim: ClaimOptions, name: str) -> None:
        self.run, self.index, self.claim, self.name = run, run.context.index, claim, name
        self.plans = {p.cell.key: p for p in run.to_warm}
        self.keys = sorted(self.plans)
        self.host = f"{socket.gethostname()} pid {os.getpid()}"  # who holds its leases
        self.released = 0  # leases given back as cancelled
        self._lock = threading.Lock()
        self._next_wait = 0.0  # when a waiting slot may say so again (monotonic)

    def drain(self) -> None:
        run, claim = self.run, self.claim
        while not run.stopping:
            result = self.index.claim_next(self.keys, run.context.fingerprint.key,
                                           holder=uuid.uuid4().hex, host=self.host,
                                           lease_seconds=claim.lease_seconds,
                                           max_attempts=claim.retries + 1)
            if result.lease is not None:
                with self._lock:
                    self._next_wait = 0.0  # waiting again later: say so at once
                self._warm_leased(result.lease)
            elif result.live_elsewhere:
                self._say_waiting(result.live_elsewhere)
                run.pause(claim.poll_seconds)  # leased elsewhere: may yet expire
            else:
                return

    def _say_waiting(self, held: int) -> None:
        """A ``wait`` event, at most once per heartbeat interval across the slots."""
        interval = self.run.options.heartbeat_seconds
        now = time.monotonic()
        with self._lock:
            if now < self._next_wait:
                return
            self._next_wait = now + interval if interval > 0 else float("inf")
        self.run.emit(("wait", self.name, f"waiting for a lease: {held} cell(s) held by "
                                          f"other runners, next check in "
                                          f"{self.claim.poll_seconds:g} s"))

    def _warm_leased(self, lease: Lease) -> None:
        run, plan = self.run, self.plans[lease.cell_key]
        if run.already_published(plan) is not None:
            self.index.release_done(lease)
            return
        run.emit(("claim", plan.cell.id, f"attempt {lease.attempt}, lease "
                                         f"{self.claim.lease_seconds:g} s"))
        with Heartbeat(self.index, lease, self.claim.lease_seconds,
                       self.claim.heartbeat_seconds,
                       note=lambda message: run.emit(("note", plan.cell.id, message))) as beat:
            report = run.warm(plan)
        if beat.lost.is_set():
            run.emit(("note", plan.cell.id, "lease lost while warming (expired and claimed "
                                            "elsewhere?)"))
        if report.status in (PUBLISHED, EXISTS):
            self.index.release_done(lease)
        elif run.cancelled:  # stopped, not failed: no retry spent, claimable at once
            if self.index.release_cancelled(lease):
                with self._lock:
                    self.released += 1
        else:
            self.index.release_failed(lease)
