"""The claim queue on SQLite with a FAKE CLOCK: claim order, lease expiry and re-claim,
heartbeats, retries, exhausted leases, stale rows of undeclared cells, coverage in_progress."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import select

from neffcache.index import IN_PROGRESS, MISSING, Index, open_index
from neffcache.index.values import Lease
from neffcache.precompile.session import Heartbeat
from tests.support.coverage import coverage_of
from tests.support.rows import CellClaimRow
from tests.unit.test_index_factories import make_cell, make_fingerprint, make_manifest

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
LEASE = 60.0


class FakeClock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def at(self, seconds: float) -> None:
        self.now = T0 + timedelta(seconds=seconds)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ix(tmp_path: Path, clock: FakeClock) -> Iterator[Index]:
    with open_index(f"sqlite:///{tmp_path / 'index.db'}", auto_upgrade=True) as index:
        index.lease_clock = clock
        yield index


CELLS = [make_cell(n) for n in range(3)]
KEYS = [c.key for c in CELLS]
FP = make_fingerprint(0)


def claim(ix: Index, who: str, max_attempts: int = 3) -> Lease | None:
    return ix.claim_next(KEYS, FP.key, holder=who, host=f"host-{who}", lease_seconds=LEASE,
                         max_attempts=max_attempts).lease


def rows(ix: Index) -> list[CellClaimRow]:
    with ix.read_session() as s:  # reading the queue is the point here
        return list(s.scalars(select(CellClaimRow)))


def test_claims_go_in_matrix_order_and_a_leased_cell_is_not_claimed_twice(ix: Index) -> None:
    ix.queue_claims("m", CELLS, FP, KEYS)
    got = [claim(ix, w) for w in ("a", "b", "c", "d")]
    assert [g.cell_key if g else None for g in got] == [*KEYS, None]
    assert got[0] is not None and got[0].attempt == 1 and got[0].host == "host-a"
    assert got[0].expires_at == T0 + timedelta(seconds=LEASE)
    result = ix.claim_next(KEYS, FP.key, holder="d", host="h", lease_seconds=LEASE,
                           max_attempts=3)
    assert result.lease is None and result.live_elsewhere == 3


def test_an_expired_lease_goes_back_to_the_queue_and_the_old_holder_loses_it(
        ix: Index, clock: FakeClock) -> None:
    ix.queue_claims("m", CELLS[:1], FP, KEYS)
    first = claim(ix, "a")
    assert first is not None
    clock.at(LEASE - 1)
    assert claim(ix, "b") is None  # still live
    clock.at(LEASE)
    again = claim(ix, "b")
    assert again is not None and again.cell_key == first.cell_key and again.attempt == 2
    assert not ix.renew_lease(first, LEASE)  # the dead holder's heartbeat finds it gone
    assert not ix.release_failed(first)
    assert ix.renew_lease(again, LEASE)


def test_a_heartbeat_keeps_the_lease_alive_past_its_first_expiry(
        ix: Index, clock: FakeClock) -> None:
    ix.queue_claims("m", CELLS[:1], FP, KEYS)
    lease = claim(ix, "a")
    assert lease is not None
    renewed = threading.Event()

    class Watched:
        """The real index, noting each renewal (the heartbeat thread calls it)."""

        def renew_lease(self, lease: Lease, seconds: float) -> bool:
            ok = ix.renew_lease(lease, seconds)
            renewed.set()
            return ok

    clock.at(LEASE * 0.9)
    with Heartbeat(Watched(), lease, LEASE, interval=0.01):
        assert renewed.wait(30)  # renewed at 0.9 x LEASE: now expires at 1.9 x LEASE
        clock.at(LEASE * 1.5)
        assert claim(ix, "b") is None
    clock.at(LEASE * 1.5)
    assert claim(ix, "b") is None  # the last renewal still holds after the heartbeat stops
    # the heartbeat may have renewed once more at 1.5 x LEASE before it stopped: after
    # 2.5 x LEASE no renewal holds
    clock.at(LEASE * 2.6)
    taken = claim(ix, "b")
    assert taken is not None and taken.attempt == 2


def test_heartbeat_reports_a_lost_lease(ix: Index, clock: FakeClock) -> None:
    ix.queue_claims("m", CELLS[:1], FP, KEYS)
    lease = claim(ix, "a")
    assert lease is not None
    clock.at(LEASE + 1)
    assert claim(ix, "b") is not None
    with Heartbeat(ix, lease, LEASE, interval=0.01) as beat:
        assert beat.lost.wait(30)


def test_failed_cells_are_retried_at_most_n_times_then_left_failed(ix: Index) -> None:
    ix.queue_claims("m", CELLS[:1], FP, KEYS)
    for attempt in (1, 2):
        lease = claim(ix, f"w{attempt}", max_attempts=2)
        assert lease is not None and lease.attempt == attempt
        ix.record_failure(None, CELLS[0], FP, 1, 1.0, f"attempt {attempt} failed")
        assert ix.release_failed(lease)
    assert claim(ix, "w3", max_attempts=2) is None
    row = coverage_of(ix, CELLS[:1], [FP]).rows[0]
    assert (row.status, row.log_tail) == ("failed", "attempt 2 failed")


def test_a_cancelled_lease_is_claimable_at_once_and_spends_no_attempt(ix: Index) -> None:
    ix.queue_claims("m", CELLS[:1], FP, KEYS)
    lease = claim(ix, "a", max_attempts=1)
    assert lease is not None and lease.attempt == 1
    assert ix.release_cancelled(lease)
    assert not ix.release_cancelled(lease)  # no longer ours
    again = claim(ix, "b", max_attempts=1)  # at once, and the one allowed attempt is left
    assert again is not None and again.cell_key == lease.cell_key and again.attempt == 1
    assert coverage_of(ix, CELLS[:1], [FP]).rows[0].status == "in_progress"


def test_a_lease_that_expires_on_the_last_attempt_is_recorded_as_failed(
        ix: Index, clock: FakeClock) -> None:
    ix.queue_claims("m", CELLS[:1], FP, KEYS)
    assert claim(ix, "a", max_attempts=1) is not None
    clock.at(LEASE + 1)
    assert claim(ix, "b", max_attempts=1) is None
    row = coverage_of(ix, CELLS[:1], [FP]).rows[0]
    assert row.status == "failed" and "host-a" in (row.log_tail or "")
    assert "expired" in (row.log_tail or "")


def test_a_published_cell_is_never_claimed_even_if_queued_again(ix: Index) -> None:
    ix.queue_claims("m", CELLS[:1], FP, KEYS)
    lease = claim(ix, "a")
    assert lease is not None
    ix.record_entry(make_manifest(CELLS[0], FP), "/store")
    ix.release_done(lease)
    assert rows(ix) == []
    ix.queue_claims("m", CELLS[:1], FP, KEYS)  # a late worker that planned before the publish
    assert claim(ix, "b") is None


def test_rows_for_cells_the_matrix_no_longer_declares_are_removed_not_claimed(
        ix: Index, clock: FakeClock) -> None:
    ix.queue_claims("m", CELLS, FP, KEYS)
    dead = claim(ix, "a")  # CELLS[0], then its worker died
    assert dead is not None
    clock.at(LEASE + 1)
    other = ix.queue_claims("other", CELLS[2:], FP, KEYS[2:])  # another matrix: untouched
    assert other == 0
    removed = ix.queue_claims("m", CELLS[1:2], FP, KEYS[1:2])  # m now declares CELLS[1] only
    assert removed == 2  # CELLS[0] (expired lease) and CELLS[2] (queued)
    assert {r.cell_key for r in rows(ix)} == {KEYS[1]}
    got = ix.claim_next(KEYS, FP.key, holder="b", host="h", lease_seconds=LEASE,
                        max_attempts=3).lease
    assert got is not None and got.cell_key == KEYS[1]
    assert claim(ix, "c") is None


def test_a_live_lease_on_an_undeclared_cell_is_left_to_its_holder(ix: Index) -> None:
    ix.queue_claims("m", CELLS[:1], FP, KEYS)
    assert claim(ix, "a") is not None
    assert ix.queue_claims("m", CELLS[1:2], FP, KEYS[1:2]) == 0
    assert KEYS[0] in {r.cell_key for r in rows(ix)}


def test_coverage_shows_in_progress_with_host_and_since(ix: Index, clock: FakeClock) -> None:
    ix.queue_claims("m", CELLS, FP, KEYS)
    clock.at(5)
    assert claim(ix, "a") is not None
    report = coverage_of(ix, CELLS, [FP])
    first = report.row(KEYS[0], FP.key)
    assert (first.status, first.host, first.since) == (IN_PROGRESS, "host-a",
                                                      T0 + timedelta(seconds=5))
    assert first.to_json()["since"] == "2026-12-01T12:00:05+00:00"
    assert report.row(KEYS[1], FP.key).status == MISSING
    assert report.counts(FP.key)["in_progress"] == 1
    assert [(lv.cell_key, lv.host) for lv in ix.live_leases()] == [(KEYS[0], "host-a")]
    clock.at(5 + LEASE)
    assert coverage_of(ix, CELLS, [FP]).row(KEYS[0], FP.key).status == MISSING
    assert ix.live_leases() == []


def test_database_clock_is_used_without_a_fake(tmp_path: Path) -> None:
    with open_index(f"sqlite:///{tmp_path / 'index.db'}", auto_upgrade=True) as ix:
        ix.queue_claims("m", CELLS[:1], FP, KEYS)
        before = datetime.now(timezone.utc)
        lease = claim(ix, "a")
        assert lease is not None
        assert abs((lease.claimed_at - before).total_seconds()) < 5
        assert lease.claimed_at.tzinfo is not None
