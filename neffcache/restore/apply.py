"""Apply a restore plan: run its fetch units in two bounded lanes and tally what they did."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from neffcache.restore.fetch import Fetcher
from neffcache.restore.fs import Roots
from neffcache.restore.install import Failures, FailureTally, FileFailure, Outcome, batch_files
from neffcache.restore.plan import PackRun, RestorePlan, Target, Unit, unit_groups
from neffcache.restore.state import StateRecord
from neffcache.store import Store
from neffcache.thread_pool import run_lanes, usable_cpus

Progress = Callable[[int, int, int], None]  # (files done, files total, bytes fetched)
Ready = Callable[[int], None]  # a cell (its index in the plan's manifest order) is in place


@dataclass(frozen=True, slots=True)
class RestoreReport:
    """What ``apply_restore`` did: files installed, bytes fetched, failures."""

    installed: tuple[Target, ...]
    failures: Failures
    bytes_fetched: int
    deadline_hit: bool
    states: tuple[StateRecord, ...] = field(default=(), repr=False)  # of installed[i]
    hung: int = 0  # units still running at the deadline (a store call that did not return)


class _Collector:
    """Thread-safe tally of what the workers did."""

    def __init__(self, total: int, progress: Progress | None, waiting: Sequence[int] = (),
                 on_ready: Ready | None = None) -> None:
        self.lock = threading.Lock()
        self.total, self.progress = total, progress
        self.files = self.bytes = 0
        self.installed: list[Target] = []
        self.failures = FailureTally()
        self.states: list[StateRecord] = []  # one per installed file, in its order
        self.waiting, self.on_ready = list(waiting), on_ready

    def add(self, outcomes: Sequence[Outcome], nbytes: int, unit: Unit | None = None) -> None:
        with self.lock:
            done = 0
            for t, outcome in outcomes:
                if isinstance(outcome, FileFailure):
                    self.failures.add(outcome)
                    continue
                self.installed.append(t)
                self.states.append(outcome)
                done += 1
            self.bytes += nbytes
            self.files += len(outcomes)
            if self.progress and outcomes:
                self.progress(self.files, self.total, self.bytes)
            if done and unit is not None and self.on_ready is not None:
                self._count_down(outcomes, unit, done, self.on_ready)

    def _count_down(self, outcomes: Sequence[Outcome], unit: Unit, done: int,
                    on_ready: Ready) -> None:
        """Each of the ``done`` installed files' cells wait for one path less; at 0 it is ready."""
        if len(self.waiting) == 1:  # one cell: every path is its own (no map per unit)
            self.waiting[0] -= done
            if self.waiting[0] == 0:
                on_ready(0)
            return
        owners = {id(t): o for g in unit_groups(unit)  # owners: one per target, or none
                  for t, o in zip(g.targets, g.owners, strict=False)}
        for t, outcome in outcomes:
            if isinstance(outcome, FileFailure):
                continue
            for i in owners.get(id(t), ()):
                self.waiting[i] -= 1
                if self.waiting[i] == 0:
                    on_ready(i)


def apply_restore(store: Store, plan: RestorePlan, roots: Roots, *, workers: int = 16,
                  deadline: float | None = None, progress: Progress | None = None,
                  on_ready: Ready | None = None) -> RestoreReport:
    """Run every fetch unit of the plan; failures are collected, never raised. Pack runs (kernel
    and GIL work) run on at most one thread per CPU plus one, blob GETs and parts on ``workers``. A
    unit whose store call hangs is not waited for (``hung``: the caller leaves ``roots`` open).
    ``on_ready(i)`` is called, one call at a time, once cell ``i``'s last path is installed."""
    units = plan.units
    tally = _Collector(plan.files_to_fetch, progress, plan.waiting, on_ready)

    workers = max(1, workers)
    file_workers = max(1, min(workers, usable_cpus() + 1))
    fetcher = Fetcher(store, roots, deadline, batch_files(file_workers, workers))
    runs = [u for u in units if isinstance(u, PackRun)]
    blobs = [u for u in units if not isinstance(u, PackRun)]
    hung: list[Unit] = []
    left = run_lanes([(file_workers, runs), (workers, blobs)],
                     lambda u: tally.add(*fetcher.run(u), u), deadline, stuck=hung)
    for stopped in fetcher.abandon(left, hung):
        tally.add(stopped, 0)
    with tally.lock:  # a hung unit that returns later must not change this report
        installed, failures = tuple(tally.installed), tally.failures.done()
        states, nbytes = tuple(tally.states), tally.bytes
    deadline_hit = any(f.kind == "deadline" for f in failures.listed)
    return RestoreReport(installed, failures, nbytes, deadline_hit, states, len(hung))
