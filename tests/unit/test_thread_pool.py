"""neffcache.thread_pool: ordered map and lanes on plain threads, bounded, deadline, failures."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from neffcache.thread_pool import THREAD_NAME, map_in_threads, run_lanes

WAIT = 5.0  # a barrier that is not met within this fails the test instead of hanging it


class Concurrency:
    """Counts calls running at once; ``peak`` is the most seen together, ``threads`` the names
    of the threads that ran them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = self.peak = 0
        self.threads: set[str] = set()

    def __enter__(self) -> None:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
            self.threads.add(threading.current_thread().name)

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.now -= 1


def overlapping(parties: int, seen: Concurrency) -> Callable[[Any], Any]:
    """A function that returns its argument once ``parties`` calls are running together."""
    barrier = threading.Barrier(parties, timeout=WAIT)

    def fn(x: Any) -> Any:
        with seen:
            barrier.wait()
        return x

    return fn


# --- map_in_threads ---------------------------------------------------------------------------

def test_map_keeps_input_order_when_later_items_finish_first() -> None:
    def slow_first(x: int) -> int:
        time.sleep((8 - x) * 0.002)
        return x * x

    assert map_in_threads(slow_first, range(8), 4) == [x * x for x in range(8)]


def test_map_runs_exactly_workers_calls_at_once() -> None:
    seen = Concurrency()
    assert map_in_threads(overlapping(4, seen), range(12), 4) == list(range(12))
    assert seen.peak == 4
    assert len(seen.threads) == 4
    assert all(name.startswith(f"{THREAD_NAME}-") for name in seen.threads)


def test_map_starts_no_more_threads_than_items() -> None:
    seen = Concurrency()
    assert map_in_threads(overlapping(3, seen), "abc", 16) == ["a", "b", "c"]
    assert len(seen.threads) == 3


@pytest.mark.parametrize(("items", "workers"), [([7], 8), ([1, 2, 3], 1), ([1, 2], 0)])
def test_map_runs_inline_when_one_thread_would_do(items: list[int], workers: int) -> None:
    assert map_in_threads(lambda x: (x, threading.current_thread()), items, workers) == [
        (x, threading.current_thread()) for x in items]


def test_map_of_nothing_calls_nothing() -> None:
    calls: list[object] = []
    assert map_in_threads(calls.append, [], 4) == []
    assert calls == []


def test_map_reraises_the_failure_after_the_other_threads_stop_and_starts_nothing_more() -> None:
    started: list[int] = []
    finished: list[int] = []
    both_running = threading.Barrier(2, timeout=WAIT)

    def fn(x: int) -> int:
        started.append(x)
        if x < 2:
            both_running.wait()
        if x == 0:
            raise ValueError("item 0")
        time.sleep(0.05)  # still running when item 0 fails
        finished.append(x)
        return x

    with pytest.raises(ValueError, match="item 0"):
        map_in_threads(fn, range(200), 2)
    assert finished == [1]  # the caller waited for it
    assert sorted(started) == [0, 1]  # nothing started once item 0 had failed


def test_map_inline_stops_at_the_failure() -> None:
    started: list[int] = []

    def fn(x: int) -> int:
        started.append(x)
        if x == 3:
            raise KeyError(x)
        return x

    with pytest.raises(KeyError):
        map_in_threads(fn, range(100), 1)
    assert started == [0, 1, 2, 3]


# --- run_lanes --------------------------------------------------------------------------------

def test_lanes_run_every_unit_once_on_non_daemon_threads() -> None:
    ran: list[tuple[object, bool]] = []
    lock = threading.Lock()

    def run(u: object) -> None:
        with lock:
            ran.append((u, threading.current_thread().daemon))

    assert run_lanes([(2, "abcde"), (3, [1, 2, 3, 4])], run, None) == []
    assert sorted(ran, key=str) == sorted([(u, False) for u in [*"abcde", 1, 2, 3, 4]], key=str)


def test_each_lane_runs_on_its_own_number_of_threads() -> None:
    small, large = Concurrency(), Concurrency()
    two, three = overlapping(2, small), overlapping(3, large)

    def run(unit: tuple[str, int]) -> None:
        (two if unit[0] == "two" else three)(unit)

    left = run_lanes([(2, [("two", i) for i in range(6)]),
                      (3, [("three", i) for i in range(9)])], run, time.monotonic() + 60)
    assert left == []
    assert (small.peak, len(small.threads)) == (2, 2)
    assert (large.peak, len(large.threads)) == (3, 3)
    assert not small.threads & large.threads


def test_a_lane_takes_its_units_in_order() -> None:
    ran: list[int] = []
    assert run_lanes([(1, range(10))], ran.append) == []
    assert ran == list(range(10))


def test_deadline_in_the_past_starts_nothing_and_returns_every_unit_in_order() -> None:
    ran: list[object] = []
    left = run_lanes([(2, ["a", "b", "c"]), (4, [1, 2]), (3, [])], ran.append,
                     time.monotonic() - 1)
    assert ran == []
    assert left == ["a", "b", "c", 1, 2]


def test_deadline_reached_mid_way_returns_the_rest() -> None:
    deadline = time.monotonic() + 0.05
    ran: list[int] = []

    def run(u: int) -> None:
        ran.append(u)
        if u == 3:
            while time.monotonic() < deadline:
                time.sleep(0.005)

    assert run_lanes([(1, range(10))], run, deadline) == [4, 5, 6, 7, 8, 9]
    assert ran == [0, 1, 2, 3]


def test_deadline_stops_every_lane_and_returns_lane_by_lane() -> None:
    deadline = time.monotonic() + 0.3
    ran: list[str] = []

    def run(u: str) -> None:  # each lane's first unit outlasts the deadline
        ran.append(u)
        while time.monotonic() < deadline:
            time.sleep(0.005)

    left = run_lanes([(1, ["a0", "a1", "a2"]), (1, ["b0", "b1"])], run, deadline)
    assert sorted(ran) == ["a0", "b0"]
    assert left == ["a1", "a2", "b1"]


def test_a_unit_that_hangs_is_left_running_after_the_deadline() -> None:
    """A unit blocked in a call that ignores the deadline is not waited for beyond GRACE: it
    is returned in ``stuck`` (not among the never-started units) and keeps its thread."""
    release = threading.Event()
    ran: list[str] = []

    def run(u: str) -> None:
        ran.append(u)
        if u == "hang":
            release.wait(WAIT)

    stuck: list[str] = []
    try:
        left = run_lanes([(1, ["hang", "after"]), (1, ["ok"])], run,
                         time.monotonic() + 0.1, stuck=stuck)
    finally:
        release.set()
    assert (left, stuck, sorted(ran)) == (["after"], ["hang"], ["hang", "ok"])


def test_map_with_a_deadline_gives_late_for_what_did_not_finish() -> None:
    release = threading.Event()

    def fn(x: int) -> int:
        if x == 1:
            release.wait(WAIT)
        return x * 10

    try:
        got = map_in_threads(fn, [0, 1, 2], 1, deadline=time.monotonic() + 0.1,
                             late=lambda x: -x)
    finally:
        release.set()
    assert got == [0, -1, -2]


def test_lanes_reraise_a_failure_after_every_thread_finished() -> None:
    finished: list[str] = []
    both_running = threading.Barrier(2, timeout=WAIT)

    def run(u: str) -> None:
        if u in ("bad", "slow"):
            both_running.wait()
        if u == "bad":
            raise RuntimeError("a bug in run")
        time.sleep(0.05)
        finished.append(u)

    with pytest.raises(RuntimeError, match="a bug in run"):
        run_lanes([(1, ["bad", *(f"a{i}" for i in range(50))]),
                   (1, ["slow", *(f"b{i}" for i in range(50))])], run, None)
    assert finished == ["slow"]  # waited for, and no lane started another unit


def test_lanes_without_units() -> None:
    assert run_lanes([], print) == []
    assert run_lanes([(4, []), (2, ())], print, time.monotonic() - 1) == []
