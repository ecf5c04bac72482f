"""The test doubles do what other suites rely on: FaultyStore fails and damages on demand."""

from __future__ import annotations

import hashlib
import io

import pytest

from neffcache.errors import UnavailableError
from neffcache.store.base import Store
from tests.support.faulty_store import FaultyStore
from tests.support.memory_store import MemoryStore


def faulty(**faults: object) -> FaultyStore:
    inner = MemoryStore()
    inner.put("blobs/a", io.BytesIO(b"0123456789"))
    return FaultyStore(inner, **faults)  # type: ignore[arg-type]


def test_both_doubles_satisfy_the_protocol() -> None:
    assert isinstance(MemoryStore(), Store)
    assert isinstance(FaultyStore(MemoryStore()), Store)


def test_fails_on_the_nth_call_only() -> None:
    store = faulty(fail_on=2)
    assert store.has("blobs/a")
    with pytest.raises(UnavailableError, match="call 2"):
        store.read("blobs/a")
    assert store.read("blobs/a") == b"0123456789"
    assert [m for m, _ in store.calls] == ["has", "read", "read"]


def test_fails_every_call_from_n_when_count_is_none() -> None:
    store = faulty(fail_on=1, fail_count=None)
    for _ in range(3):
        with pytest.raises(UnavailableError):
            store.check()


def test_counts_only_the_chosen_methods() -> None:
    store = faulty(fail_on=2, fail_methods={"open"})
    store.has("blobs/a")
    store.open("blobs/a").close()
    store.read("blobs/a")
    with pytest.raises(UnavailableError):
        store.open("blobs/a")
    store.open("blobs/a").close()


def test_truncates_and_corrupts_reads_of_chosen_keys() -> None:
    store = faulty(truncate={"blobs/a": 4})
    assert store.open("blobs/a").read() == b"0123"
    assert store.read("blobs/a", 2) == b"23"
    store.truncate.clear()
    store.corrupt.add("blobs/a")
    damaged = store.read("blobs/a")
    assert len(damaged) == 10 and damaged != b"0123456789"
    assert hashlib.sha256(store.open("blobs/a").read()).digest() == hashlib.sha256(damaged).digest()
    assert store.read("blobs/a", 0, 5) == b"01234"  # the flipped byte is in the middle
    assert store.inner.read("blobs/a") == b"0123456789"  # the stored bytes are intact
