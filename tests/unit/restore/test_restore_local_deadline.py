"""The store-free check holds the deadline (issue 38): this boot's pending files it has not
synced when the deadline comes stay pending (the state file does not vouch for them) and the
result counts them (``files_unsynced``); the cells are in place all the same."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from neffcache.backends import NEURON
from neffcache.fingerprint import build_fingerprint
from neffcache.matrix import Cell
from neffcache.precompile.publish import publish_entry
from neffcache.restore import fs as restore_fs
from neffcache.restore.local import restore_local
from neffcache.restore.run import restore_cells
from neffcache.restore.state import load_pending, load_state
from neffcache.store.local import LocalStore
from tests.support.synthetic import make_neff_cache

FP = build_fingerprint("neuron", {"target": "trn2"})
CELL = Cell("p", "diffusers:P", "m", "main", "bfloat16", "compile", ("transformer",),
            64, 64, 1, 1)
WAIT = 10.0  # the blocking sync double gives up after this (the test fails rather than hangs)


@pytest.fixture
def restored(tmp_path: Path) -> tuple[LocalStore, dict[str, bytes], Path]:
    """A restore's target whose every file is pending in this boot (nothing synced)."""
    cache = make_neff_cache(tmp_path / "src", seed=11, count=12, large=0)
    store = LocalStore(tmp_path / "store")
    publish_entry(store, CELL, FP, NEURON, {"neff": cache.root})
    target = tmp_path / "t"
    assert restore_cells(store, [CELL], NEURON, FP, target).error() is None
    return store, cache.files, target


def this_boots_pending(target: Path) -> set[tuple[str, str]]:
    return {k for k, (boot, _) in load_pending({"neff": str(target / "neff")}).items()
            if boot == restore_fs.boot_id()}


def test_past_the_deadline_the_store_free_check_syncs_nothing_and_leaves_it_pending(
        restored, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    store, files, target = restored
    synced: list[int] = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced.append(fd), real(fd))[1])
    r = restore_local([CELL], NEURON, FP, target, store_url=store.url,
                      deadline=time.monotonic() - 1)
    assert r is not None and r.error() is None and r.restored == (CELL.id,)
    assert (r.files_skipped, r.files_unsynced) == (len(files), len(files))
    assert r.to_json()["files_unsynced"] == len(files)
    assert synced == []
    assert load_state({"neff": str(target / "neff")}) == {}  # vouches for none of them
    assert this_boots_pending(target) == {("neff", p) for p in files}
    again = restore_local([CELL], NEURON, FP, target, store_url=store.url)  # no deadline
    assert again is not None and again.files_unsynced == 0 and len(synced) == len(files)
    assert this_boots_pending(target) == set()


def test_a_sync_that_blocks_is_not_waited_for_past_the_deadline(
        restored, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """A sync double that blocks (as one beside a heavy writer does): the check returns at
    the deadline with every file still pending, and vouches for none of them."""
    store, files, target = restored
    entered, release = threading.Event(), threading.Event()
    real = os.fdatasync

    def blocking(fd: int) -> None:  # the first sync blocks until released (or WAIT)
        if not entered.is_set():
            entered.set()
            release.wait(WAIT)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", blocking)
    try:
        r = restore_local([CELL], NEURON, FP, target, store_url=store.url,
                          deadline=time.monotonic() + 0.5)
        still_blocked = not release.is_set()
    finally:
        release.set()
        for t in threading.enumerate():
            if t.name == "neffcache-settle":
                t.join(WAIT)
    assert still_blocked  # returned while the sync it started had not
    assert r is not None and r.error() is None and r.files_unsynced == len(files)
    assert load_state({"neff": str(target / "neff")}) == {}
    assert this_boots_pending(target) == {("neff", p) for p in files}


def test_without_a_deadline_every_pending_file_is_synced(
        restored, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    store, files, target = restored
    r = restore_local([CELL], NEURON, FP, target, store_url=store.url,
                      deadline=time.monotonic() + 600)
    assert r is not None and r.error() is None and r.files_unsynced == 0
    assert set(load_state({"neff": str(target / "neff")})) == {("neff", p) for p in files}
    assert this_boots_pending(target) == set()
