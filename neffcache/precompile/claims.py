"""``precompile --claim``: cells taken one at a time from the index's claim queue, under leases."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from neffcache.errors import NeffcacheError
from neffcache.matrix import Cell
from neffcache.precompile.heartbeat import Ticker
from neffcache.precompile.plan import EXISTS, PUBLISHED, PrecompileReport
from neffcache.precompile.run import PrecompileRun, RunContext

if TYPE_CHECKING:
    from neffcache.index import Index, Lease


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
