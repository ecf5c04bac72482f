"""The restore's worker threads, on ``concurrent.futures``: lanes of units, each lane on its own
number of threads, that stop starting units at a deadline or after the first failure.

(Its import costs a boot ~6-10 ms, measured with obstore loaded; a hand-written pool saved that
and was retired in favour of the library.)
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")
U = TypeVar("U")

THREAD_NAME = "neffcache-restore"


def run_lanes(lanes: Sequence[tuple[int, Sequence[U]]], run: Callable[[U], object],
              deadline: float | None = None, *, name: str = THREAD_NAME) -> list[U]:
    """Run ``run(unit)`` for each lane's units, in order, on that lane's own number of threads
    (never more than it has units); no unit starts once ``deadline`` (a ``time.monotonic()``
    value) has passed. Returns the units never started, lane by lane, in their order.

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
    try:
        for k, (threads, units) in enumerate(lanes):
            pool = ThreadPoolExecutor(max(1, min(threads, len(units))),
                                      thread_name_prefix=f"{name}-{k}")
            pools.append(pool)
            submitted.append([pool.submit(guarded, u) for u in units])
        left, error = _collect(lanes, submitted)
    except BaseException:  # Ctrl-C while waiting: nothing more starts
        stop.set()
        raise
    finally:
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=stop.is_set())
    if error is not None:
        raise error
    return left


def _collect(lanes: Sequence[tuple[int, Sequence[U]]],
             submitted: list[list[Future[bool]]]) -> tuple[list[U], BaseException | None]:
    """The units that never started, and the first failure (in lane and unit order)."""
    left: list[U] = []
    error: BaseException | None = None
    for (_, units), futures in zip(lanes, submitted, strict=True):
        for unit, future in zip(units, futures, strict=True):
            exc = future.exception()
            if exc is not None:
                error = error or exc
            elif not future.result():
                left.append(unit)
    return left, error


def map_in_threads(fn: Callable[[T], R], items: Iterable[T], workers: int, *,
                   name: str = THREAD_NAME) -> list[R]:
    """``[fn(x) for x in items]`` on at most ``workers`` threads (inline when one would do);
    returns the results in input order. The first exception ``fn`` raises is re-raised here once
    every thread has stopped; no item starts after it."""
    todo = list(items)
    if min(workers, len(todo)) <= 1:
        return [fn(x) for x in todo]
    results: list[R] = []
    indexed: dict[int, R] = {}

    def one(i: int) -> None:
        indexed[i] = fn(todo[i])

    run_lanes([(workers, range(len(todo)))], one, name=name)
    results.extend(indexed[i] for i in range(len(todo)))
    return results


__all__ = ["map_in_threads", "run_lanes"]


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
