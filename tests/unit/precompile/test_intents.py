"""Publish intents: written before a publish looks at any blob, renewed under a new key while it
runs (the previous one deleted only after), gone when it ends; a failed renewal keeps the last."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from neffcache.backends import NEURON
from neffcache.errors import UnavailableError
from neffcache.fingerprint import build_fingerprint
from neffcache.manifest import Manifest
from neffcache.matrix import Cell
from neffcache.precompile.intents import IntentHolder, held_intents
from neffcache.precompile.publish import plan_publish, publish_entry
from neffcache.store.base import BLOBS, PENDING
from tests.support.faulty_store import FaultyStore
from tests.support.memory_store import MemoryStore
from tests.support.slow_store import SlowStore
from tests.support.synthetic import make_neff_cache

FP = build_fingerprint("neuron", {"target": "trn2"})
CELL = Cell("p", "diffusers:P", "m", "main", "bfloat16", "compile", ("transformer",), 64, 64,
            1, 1)


def manifest(tmp_path: Path, seed: int = 1) -> Manifest:
    cache = make_neff_cache(tmp_path / f"src{seed}", seed=seed, count=5, large=0)
    files = plan_publish(NEURON, {"neff": cache.root})
    return Manifest(cell=CELL, fingerprint=FP, files=files, producer=(), compile_seconds=None,
                    created_at="2026-01-01T00:00:00Z")


def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Poll until ``condition`` holds; fail (not hang) if it never does."""
    deadline = time.monotonic() + 20
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"never happened: {what}")
        time.sleep(0.01)


def test_holder_renews_under_new_keys_and_releases(tmp_path: Path) -> None:
    store = MemoryStore()
    m = manifest(tmp_path)
    holder = IntentHolder(store, [m], every=0.02)
    first = holder.keys[0]
    doc = json.loads(store.read(first))
    assert doc["entry_key"] == m.entry_key
    assert doc["blobs"] == sorted({f.sha256 for f in m.files})
    wait_for(lambda: holder.renewals >= 3, "three renewals")
    holder.release()
    assert list(store.list(PENDING)) == [] and holder.keys[0] != first


def test_a_renewal_is_written_before_the_previous_intent_is_deleted(tmp_path: Path) -> None:
    """At every moment at least one intent of the publish is in the store."""
    store = MemoryStore()
    counts: list[int] = []
    original_delete = store.delete

    def delete(key: str) -> None:
        counts.append(len(list(store.list(PENDING))))  # just before a delete
        original_delete(key)

    store.delete = delete  # type: ignore[method-assign]
    with held_intents(store, [manifest(tmp_path)], every=0.02) as holder:
        wait_for(lambda: holder.renewals >= 3, "three renewals")
    assert counts and min(counts) >= 1
    assert counts[:-1] and all(c == 2 for c in counts[:-1])  # renewals: new one, then old gone
    assert list(store.list(PENDING)) == []


def test_a_failed_renewal_keeps_the_last_intent_and_tries_again(tmp_path: Path) -> None:
    inner = MemoryStore()
    # The first write (before the publish starts) succeeds, the next three (renewals) fail.
    store = FaultyStore(inner, fail_on=2, fail_count=3, fail_methods={"put"})
    with held_intents(store, [manifest(tmp_path)], every=0.02) as holder:
        first = holder.keys[0]
        wait_for(lambda: holder.failures >= 3 and holder.renewals >= 1, "failures, then a renewal")
        assert inner.has(holder.keys[0]) and holder.keys[0] != first
        assert list(inner.list(PENDING)) == [holder.keys[0]]
    assert list(inner.list(PENDING)) == []


def test_the_intent_is_in_the_store_before_any_blob_is_looked_at(tmp_path: Path) -> None:
    cache = make_neff_cache(tmp_path / "src", seed=2, count=10, large=0)
    store = FaultyStore(MemoryStore())
    publish_entry(store, CELL, FP, NEURON, {"neff": cache.root})
    calls = [(m, k) for m, k in store.calls if k.startswith((PENDING, BLOBS))]
    assert calls[0][0] == "put" and calls[0][1].startswith(PENDING)
    assert any(k.startswith(BLOBS) for _, k in calls[1:])
    assert list(store.list(PENDING)) == []


def test_a_slow_publish_keeps_its_intent_fresh_and_drops_it_at_the_end(tmp_path: Path) -> None:
    cache = make_neff_cache(tmp_path / "src", seed=3, count=12, large=0)
    store = SlowStore(MemoryStore(), delay=0.05, prefixes=(BLOBS,))
    seen: set[str] = set()
    stop = threading.Event()

    def watch() -> None:  # what a gc listing pending/ during the publish would find
        while not stop.is_set():
            seen.update(store.list(PENDING))
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        publish_entry(store, CELL, FP, NEURON, {"neff": cache.root}, workers=1,
                      refresh_every=0.05)
    finally:
        stop.set()
        watcher.join()
    written = [k for k in store.puts if k.startswith(PENDING)]
    assert len(written) >= 3 and len(set(written)) == len(written)  # renewed, new key each time
    assert seen <= set(written) and len(seen) >= 2
    assert list(store.list(PENDING)) == []


def test_release_swallows_an_unreachable_store(tmp_path: Path) -> None:
    store = FaultyStore(MemoryStore(), fail_methods={"delete"})
    holder = IntentHolder(store, [manifest(tmp_path)], every=60)
    store.fail_on, store.fail_count = 1, None
    holder.release()  # a leftover intent expires after gc's grace
    assert len(list(store.list(PENDING))) == 1
    with pytest.raises(UnavailableError):
        store.delete(holder.keys[0])
