"""Worker threads: lanes of units with a deadline (``run_lanes``) and ``map_in_threads``."""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
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
    """Run each lane's units in order on its own number of threads; none starts past
    ``deadline`` (monotonic). Returns the units never started. Units still running ``GRACE``
    seconds past it are left and appended to ``stuck`` (do not take back what they hold). The
    first exception stops all starts and is re-raised once every thread has ended."""
    stop = threading.Event()
    # one runner per thread takes the next unit: a byte per unit, not a future (~1.6 KiB each;
    # a million blob GETs held 1.6 GiB: issue 38)
    started = [bytearray(len(units)) for _, units in lanes]  # 1: taken by a thread
    running: dict[int, tuple[int, int]] = {}  # thread -> (lane, unit) it runs now
    failures: list[tuple[int, int, BaseException]] = []

    def runner(k: int, units: Sequence[U], taken: Iterator[int]) -> None:
        me = threading.get_ident()
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            i = next(taken)  # atomic: each unit goes to one thread
            if i >= len(units):
                return
            started[k][i] = 1
            running[me] = (k, i)
            try:
                run(units[i])
            except BaseException as exc:  # noqa: BLE001 - re-raised on the calling thread
                failures.append((k, i, exc))
                stop.set()
                return
            finally:
                running.pop(me, None)

    pools: list[ThreadPoolExecutor] = []
    runners: list[Future[None]] = []
    late: list[U] = []
    try:
        for k, (count, units) in enumerate(lanes):
            if units:
                threads = min(max(1, count), len(units))
                pools.append(ThreadPoolExecutor(threads, thread_name_prefix=f"{name}-{k}"))
                taken = itertools.count()
                runners += [pools[-1].submit(runner, k, units, taken) for _ in range(threads)]
        _, pending = wait(runners, timeout=None if deadline is None
                          else max(0.0, deadline + GRACE - time.monotonic()))
        if pending:  # past the deadline: what runs now is stuck (the rest start nothing)
            late = [lanes[k][1][i] for k, i in sorted(running.values())]
    except BaseException:  # Ctrl-C while waiting: nothing more starts
        stop.set()
        raise
    finally:
        for pool in pools:
            pool.shutdown(wait=not late)
    if stuck is not None:
        stuck.extend(late)
    if failures:
        raise min(failures, key=lambda f: (f[0], f[1]))[2]
    return [u for (_, units), begun in zip(lanes, started, strict=True)
            for u, b in zip(units, begun, strict=True) if not b]


def map_in_threads(fn: Callable[[T], R], items: Iterable[T], workers: int, *,
                   name: str = THREAD_NAME, deadline: float | None = None,
                   late: Callable[[T], R] | None = None) -> list[R]:
    """``[fn(x) for x in items]`` on at most ``workers`` threads; the first exception is
    re-raised once all have stopped. With a ``deadline``, an item not started by it, or still
    running ``GRACE`` seconds after, gives ``late(x)``: the caller never waits on a hang."""
    todo = list(items)
    if deadline is None and min(workers, len(todo)) <= 1:
        return [fn(x) for x in todo]
    if deadline is not None and late is None:
        raise ValueError("map_in_threads: a deadline needs `late` for the items it stops")
    indexed: list[Any] = [_NONE] * len(todo)  # a list: 8 bytes an item, not a dict's ~80

    def one(i: int) -> None:
        indexed[i] = fn(todo[i])

    stuck: list[int] = []
    run_lanes([(workers, range(len(todo)))], one, deadline, name=name, stuck=stuck)
    stopped = set(stuck)
    given = late if late is not None else fn  # only a deadline leaves an item without a result
    return [indexed[i] if indexed[i] is not _NONE and i not in stopped else given(todo[i])
            for i in range(len(todo))]


def usable_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
