"""Worker threads for the restore path on ``threading`` alone: importing ``concurrent.futures``
(which pulls in logging, queue and traceback) costs a boot-time restore ~12 ms."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")
U = TypeVar("U")

THREAD_NAME = "neffcache-restore"


class _Shared:
    """What one call's threads share: a lock, each lane's next index, the first exception."""

    def __init__(self, lanes: int) -> None:
        self.lock = threading.Lock()
        self.taken = [0] * lanes
        self.error: BaseException | None = None

    def fail(self, exc: BaseException) -> None:
        """Record ``exc`` unless an earlier one was; from then on no thread takes a unit."""
        with self.lock:
            if self.error is None:
                self.error = exc

    def take(self, lane: int, count: int, deadline: float | None) -> int | None:
        """The index of the lane's next unit, now claimed; None once the lane is done, the
        deadline has passed or some thread failed."""
        with self.lock:
            i = self.taken[lane]
            if i >= count or self.error is not None or (
                    deadline is not None and time.monotonic() >= deadline):
                return None
            self.taken[lane] = i + 1
            return i

    def run_threads(self, targets: Sequence[Callable[[], None]], name: str) -> None:
        """Run each target on its own thread; returns once all have ended, re-raising the first
        exception any of them recorded."""
        threads = [threading.Thread(target=t, name=f"{name}-{i}")
                   for i, t in enumerate(targets, 1)]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        except BaseException as exc:  # Ctrl-C while waiting: the threads stop taking units
            self.fail(exc)
            raise
        if self.error is not None:
            raise self.error


def run_lanes(lanes: Sequence[tuple[int, Sequence[U]]], run: Callable[[U], object],
              deadline: float | None = None, *, name: str = THREAD_NAME) -> list[U]:
    """Run ``run(unit)`` for each lane's units, in order, on that lane's own number of threads
    (never more than it has units); no unit starts once ``deadline`` (a ``time.monotonic()``
    value) has passed. Returns the units never started, lane by lane, in their order.

    An exception from ``run`` stops every thread from taking another unit and is re-raised here
    once all threads have ended."""
    shared = _Shared(len(lanes))

    def worker(lane: int, units: Sequence[U]) -> Callable[[], None]:
        def work() -> None:
            while (i := shared.take(lane, len(units), deadline)) is not None:
                try:
                    run(units[i])
                except BaseException as exc:
                    shared.fail(exc)
                    return
        return work

    shared.run_threads([worker(k, units) for k, (threads, units) in enumerate(lanes)
                        for _ in range(min(threads, len(units)))], name)
    return [u for (_, units), i in zip(lanes, shared.taken, strict=True) for u in units[i:]]


def map_in_threads(fn: Callable[[T], R], items: Iterable[T], workers: int, *,
                   name: str = THREAD_NAME) -> list[R]:
    """``[fn(x) for x in items]`` on at most ``workers`` threads (inline when one would do);
    returns the results in input order. The first exception ``fn`` raises is re-raised here once
    every thread has stopped; no item starts after it."""
    todo = list(items)
    if min(workers, len(todo)) <= 1:
        return [fn(x) for x in todo]
    results: list[Any] = [None] * len(todo)

    def one(i: int) -> None:
        results[i] = fn(todo[i])

    run_lanes([(workers, range(len(todo)))], one, name=name)
    return results


__all__ = ["map_in_threads", "run_lanes"]
