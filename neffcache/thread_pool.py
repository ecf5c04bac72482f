"""The restore's worker threads, on ``concurrent.futures``: lanes of units, each lane on its own
number of threads, that stop starting units at a deadline or after the first failure.

(Its import costs a boot ~6-10 ms, measured with obstore loaded; a hand-written pool saved that
and was retired in favour of the library.)
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")
U = TypeVar("U")

THREAD_NAME = "neffcache-restore"
_NONE: Any = object()  # no result (yet)
# After the deadline, how long units still running get to notice it (they check between
# chunks) before they are left running and reported as stuck.
GRACE = 0.2


def run_lanes(lanes: Sequence[tuple[int, Sequence[U]]], run: Callable[[U], object],
              deadline: float | None = None, *, name: str = THREAD_NAME,
              stuck: list[U] | None = None) -> list[U]:
    """Run ``run(unit)`` for each lane's units, in order, on that lane's own number of threads
    (never more than it has units); no unit starts once ``deadline`` (a ``time.monotonic()``
    value) has passed. Returns the units never started, lane by lane, in their order.

    With a deadline this never waits more than ``GRACE`` seconds past it: units still running
    then (a call that hangs) are left running on their threads and appended to ``stuck``; the
    caller must not take back what they hold (the process ends them when it exits).

    An exception from ``run`` stops every thread from starting another unit and is re-raised
    here once all threads have ended."""
    stop = threading.Event()

    def guarded(unit: U) -> bool:
        if stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
            return False
        try:
            run(unit)
        except BaseException:
            stop.set()
            raise
        return True

    pools: list[ThreadPoolExecutor] = []
    submitted: list[list[Future[bool]]] = []
    late: list[U] = []
    try:
        for k, (threads, units) in enumerate(lanes):
            pool = ThreadPoolExecutor(max(1, min(threads, len(units))),
                                      thread_name_prefix=f"{name}-{k}")
            pools.append(pool)
            submitted.append([pool.submit(guarded, u) for u in units])
        wait([f for fs in submitted for f in fs],
             timeout=None if deadline is None else max(0.0, deadline + GRACE - time.monotonic()))
        left, late, error = _collect(lanes, submitted)
    except BaseException:  # Ctrl-C while waiting: nothing more starts
        stop.set()
        raise
    finally:
        for pool in pools:
            pool.shutdown(wait=not late, cancel_futures=stop.is_set() or bool(late))
    if stuck is not None:
        stuck.extend(late)
    if error is not None:
        raise error
    return left


def _collect(lanes: Sequence[tuple[int, Sequence[U]]], submitted: list[list[Future[bool]]]
             ) -> tuple[list[U], list[U], BaseException | None]:
    """The units that never started, those still running (only after a deadline's wait), and
    the first failure (in lane and unit order)."""
    left: list[U] = []
    late: list[U] = []
    error: BaseException | None = None
    for (_, units), futures in zip(lanes, submitted, strict=True):
        for unit, future in zip(units, futures, strict=True):
            if not future.done() and not future.cancel():
                late.append(unit)
                continue
            if future.cancelled():
                left.append(unit)
                continue
            exc = future.exception()
            if exc is not None:
                error = error or exc
            elif not future.result():
                left.append(unit)
    return left, late, error


def map_in_threads(fn: Callable[[T], R], items: Iterable[T], workers: int, *,
                   name: str = THREAD_NAME, deadline: float | None = None,
                   late: Callable[[T], R] | None = None) -> list[R]:
    """``[fn(x) for x in items]`` on at most ``workers`` threads (inline when one would do);
    returns the results in input order. The first exception ``fn`` raises is re-raised here once
    every thread has stopped; no item starts after it.

    With a ``deadline`` (and ``late``, required then) every item runs on a thread and an item
    not started by the deadline, or still running ``GRACE`` seconds after it, gives
    ``late(x)``: the caller never waits on a call that hangs."""
    todo = list(items)
    if deadline is None and min(workers, len(todo)) <= 1:
        return [fn(x) for x in todo]
    if deadline is not None and late is None:
        raise ValueError("map_in_threads: a deadline needs `late` for the items it stops")
    indexed: list[Any] = [_NONE] * len(todo)  # a list: 8 bytes an item, not a dict's ~80
    failed = threading.Event()
    # ``workers`` runners take the next item in input order until none is left: no future
    # per item (a million of them cost over a GiB; issue 22), the same order of starts.
    taken = itertools.count()
    current: dict[int, int] = {}  # runner -> the item it runs

    def runner(k: int) -> None:
        while not failed.is_set() and (deadline is None or time.monotonic() < deadline):
            i = next(taken)  # atomic: each item goes to one runner
            if i >= len(todo):
                return
            current[k] = i
            try:
                indexed[i] = fn(todo[i])
            except BaseException:
                failed.set()
                raise

    stuck: list[int] = []
    run_lanes([(workers, range(min(workers, len(todo))))], runner, deadline, name=name,
              stuck=stuck)
    stopped = {current[k] for k in stuck if k in current}
    out: list[R] = []
    for i in range(len(todo)):
        if indexed[i] is not _NONE and i not in stopped:
            out.append(indexed[i])
        else:
            assert late is not None  # only a deadline leaves an item without a result
            out.append(late(todo[i]))
    return out


__all__ = ["map_in_threads", "run_lanes"]


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
