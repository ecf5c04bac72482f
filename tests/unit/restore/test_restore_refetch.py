"""Verification-driven refetch (issue 12): a piece whose bytes arrive damaged — a blob, a part
of a large blob, a member of a pack — is fetched again alone, a bounded number of times, before
its file fails; a pack read that ends early goes on from the first member it did not deliver.
And a store call that hangs is not waited for past the deadline."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from neffcache.backends import NEURON
from neffcache.fingerprint import build_fingerprint
from neffcache.manifest import Manifest
from neffcache.matrix import Cell
from neffcache.parts import PartPolicy
from neffcache.precompile.packing import PackPolicy
from neffcache.precompile.publish import publish_entry
from neffcache.restore.fetch import ATTEMPTS
from neffcache.restore.run import restore_cells
from neffcache.store import blob_key
from neffcache.store.base import pack_key
from neffcache.store.local import LocalStore
from tests.support.faulty_store import FaultyStore
from tests.support.synthetic import read_tree

FP = build_fingerprint("neuron", {"target": "trn2"})
KiB, MiB = 1 << 10, 1 << 20
CELL = Cell("p", "diffusers:P", "m", "main", "bfloat16", "compile", ("transformer",),
            64, 64, 1, 1)
SMALL_PACKS = PackPolicy(min_files=8, target=16 * KiB, min_bytes=8 * KiB, max_bytes=64 * KiB)


def publish(tmp_path: Path, files: dict[str, bytes], **policy: Any) -> tuple[LocalStore, Manifest]:
    root = tmp_path / "src"
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    store = LocalStore(tmp_path / "store")
    return store, publish_entry(store, CELL, FP, NEURON, {"neff": root}, **policy).manifest


def small_files(n: int = 40) -> dict[str, bytes]:
    return {f"op{i:03}.neff": os.urandom(1000 + 37 * i) for i in range(n)}


def restored(tmp_path: Path) -> dict[str, bytes]:
    tree = read_tree(tmp_path / "t" / "neff")
    tree.pop(".neffcache-state.json", None)
    return tree


# --- blobs -----------------------------------------------------------------------------------

@pytest.mark.parametrize("fault", ["corrupt", "truncate"])
def test_a_blob_damaged_on_the_way_is_fetched_again(tmp_path: Path, fault: str) -> None:
    files = {"graph.neff": os.urandom(300 * KiB), "op.neff": b"small"}
    store, m = publish(tmp_path, files, packing=None)
    key = blob_key(next(f.sha256 for f in m.files if f.path == "graph.neff"))
    faulty = FaultyStore(store, damaged_reads=2, **(
        {"corrupt": {key}} if fault == "corrupt" else {"truncate": {key: 1000}}))
    r = restore_cells(faulty, [CELL], NEURON, FP, tmp_path / "t", workers=4)
    assert r.error() is None, r.failures
    assert restored(tmp_path) == files
    assert [k for k, *_ in faulty.ranges].count(key) == 3  # two damaged reads, then intact


def test_a_blob_damaged_every_time_fails_after_the_bounded_attempts(tmp_path: Path) -> None:
    files = {"graph.neff": os.urandom(300 * KiB), "op.neff": b"small"}
    store, m = publish(tmp_path, files, packing=None)
    key = blob_key(next(f.sha256 for f in m.files if f.path == "graph.neff"))
    faulty = FaultyStore(store, corrupt={key})
    r = restore_cells(faulty, [CELL], NEURON, FP, tmp_path / "t", workers=4)
    assert [(f.path, f.kind) for f in r.failures] == [("graph.neff", "integrity")]
    assert "corrupt" in r.failures[0].message
    assert [k for k, *_ in faulty.ranges].count(key) == ATTEMPTS
    assert restored(tmp_path) == {"op.neff": b"small"}  # the damaged file never installed
    assert [p for p in (tmp_path / "t").rglob("*.tmp")] == []


# --- parts -----------------------------------------------------------------------------------

def test_a_corrupt_part_is_fetched_again_alone(tmp_path: Path) -> None:
    files = {"graph.neff": os.urandom(MiB + MiB // 2 + 5)}
    store, m = publish(tmp_path, files, packing=None,
                       parting=PartPolicy(part_bytes=1 * MiB, over=1 * MiB))
    key = blob_key(m.files[0].sha256)
    # The first read (part 1: one worker takes parts in order) has its middle byte flipped.
    faulty = FaultyStore(store, corrupt={key}, damaged_reads=1)
    r = restore_cells(faulty, [CELL], NEURON, FP, tmp_path / "t", workers=1)
    assert r.error() is None, r.failures
    assert restored(tmp_path) == files
    reads = [(start, length) for k, start, length in faulty.ranges if k == key]
    assert reads == [(0, MiB), (0, MiB), (MiB, MiB // 2 + 5)]  # part 1 again, alone


def test_a_part_corrupt_every_time_fails_the_file_alone(tmp_path: Path) -> None:
    files = {"graph.neff": os.urandom(3 * MiB), "op.neff": b"small"}
    store, m = publish(tmp_path, files, packing=None,
                       parting=PartPolicy(part_bytes=1 * MiB, over=1 * MiB))
    key = blob_key(next(f.sha256 for f in m.files if f.path == "graph.neff"))
    faulty = FaultyStore(store, corrupt={key})
    r = restore_cells(faulty, [CELL], NEURON, FP, tmp_path / "t", workers=4)
    assert [(f.path, f.kind) for f in r.failures] == [("graph.neff", "integrity")]
    assert "part 2 of 3" in r.failures[0].message
    reads = [(s, n) for k, s, n in faulty.ranges if k == key]
    assert reads.count((MiB, MiB)) == ATTEMPTS and reads.count((0, MiB)) == 1
    assert restored(tmp_path) == {"op.neff": b"small"}
    assert [p for p in (tmp_path / "t").rglob("*.tmp")] == []


# --- packs -----------------------------------------------------------------------------------

def packed(tmp_path: Path) -> tuple[LocalStore, Manifest, dict[str, bytes]]:
    files = small_files()
    store, m = publish(tmp_path, files, packing=SMALL_PACKS)
    assert len(m.packs) >= 2
    return store, m, files


def test_a_corrupt_member_comes_from_its_own_blob_not_its_pack(tmp_path: Path) -> None:
    store, m, files = packed(tmp_path)
    pack = max(m.packs, key=lambda p: len(p.members))
    key = pack_key(pack.sha256)
    hit = next(x for x in pack.members if x.offset <= pack.size // 2 < x.offset + x.size)
    faulty = FaultyStore(store, corrupt={key}, damaged_reads=2)  # the middle byte flipped
    r = restore_cells(faulty, [CELL], NEURON, FP, tmp_path / "t", workers=4)
    assert r.error() is None, r.failures
    assert restored(tmp_path) == files
    assert [(s, n) for k, s, n in faulty.ranges if k == key] == [(0, pack.size)]  # once
    sha = hashlib.sha256(store.read(key, hit.offset, hit.size)).hexdigest()
    assert [k for k, _, _ in faulty.ranges if k == blob_key(sha)] == [blob_key(sha)]


def test_a_corrupt_member_without_its_blob_is_read_again_alone(tmp_path: Path) -> None:
    store, m, files = packed(tmp_path)
    pack = max(m.packs, key=lambda p: len(p.members))
    key = pack_key(pack.sha256)
    hit = next(x for x in pack.members if x.offset <= pack.size // 2 < x.offset + x.size)
    store.delete(blob_key(hashlib.sha256(store.read(key, hit.offset, hit.size)).hexdigest()))
    faulty = FaultyStore(store, corrupt={key}, damaged_reads=2)  # the middle byte flipped
    r = restore_cells(faulty, [CELL], NEURON, FP, tmp_path / "t", workers=4)
    assert r.error() is None, r.failures
    assert restored(tmp_path) == files
    reads = [(s, n) for k, s, n in faulty.ranges if k == key]
    assert reads[0] == (0, pack.size)  # the run: the whole pack, once
    assert reads[1:] == [(hit.offset, hit.size)] * 2  # then the bad member alone, till intact


def test_a_pack_read_that_ends_early_goes_on_from_the_first_missing_member(
        tmp_path: Path) -> None:
    store, m, files = packed(tmp_path)
    pack = max(m.packs, key=lambda p: len(p.members))
    key = pack_key(pack.sha256)
    cut = pack.members[len(pack.members) // 2]
    faulty = FaultyStore(store, truncate={key: cut.offset + 10}, damaged_reads=1)
    r = restore_cells(faulty, [CELL], NEURON, FP, tmp_path / "t", workers=4)
    assert r.error() is None, r.failures
    assert restored(tmp_path) == files
    reads = [(s, n) for k, s, n in faulty.ranges if k == key]
    assert reads == [(0, pack.size), (cut.offset, pack.size - cut.offset)]


def test_a_pack_that_keeps_ending_early_fails_only_what_it_never_delivered(
        tmp_path: Path) -> None:
    store, m, files = packed(tmp_path)
    pack = max(m.packs, key=lambda p: len(p.members))
    key = pack_key(pack.sha256)
    cut = pack.members[len(pack.members) // 2]
    faulty = FaultyStore(store, truncate={key: cut.offset + 10})  # at rest: every read
    r = restore_cells(faulty, [CELL], NEURON, FP, tmp_path / "t", workers=4)
    lost = {f.sha256 for f in pack.members[len(pack.members) // 2:]}
    failed = {f.path for f in r.failures}
    assert failed == {f.path for f in m.files if f.sha256 in lost}
    assert {f.kind for f in r.failures} == {"integrity"}
    assert [k for k, *_ in faulty.ranges].count(key) == ATTEMPTS
    assert restored(tmp_path) == {p: d for p, d in files.items() if p not in failed}


# --- a store call that hangs ------------------------------------------------------------------

class HangingStore(LocalStore):
    """Opens of ``key`` block until ``release`` is set (a server that stops answering)."""

    def __init__(self, root: Path, key: str) -> None:
        super().__init__(root)
        self.key, self.release, self.done = key, threading.Event(), threading.Event()

    def open(self, key: str, start: int = 0, length: int | None = None) -> BinaryIO:
        if key != self.key:
            return super().open(key, start, length)
        self.release.wait(30)
        try:
            return super().open(key, start, length)
        finally:
            self.done.set()  # the abandoned worker has its answer now


def test_a_hung_store_call_is_not_waited_for_past_the_deadline(tmp_path: Path) -> None:
    files = {"graph.neff": os.urandom(200 * KiB), **small_files(12)}
    store, m = publish(tmp_path, files, packing=None)
    hung = next(f for f in m.files if f.path == "graph.neff")
    slow = HangingStore(tmp_path / "store", blob_key(hung.sha256))
    try:
        deadline = time.monotonic() + 1.0
        r = restore_cells(slow, [CELL], NEURON, FP, tmp_path / "t", workers=4,
                          deadline=deadline)
        returned = time.monotonic()
    finally:
        slow.release.set()
    assert slow.done.wait(5)
    time.sleep(0.2)  # let the abandoned worker act on its late answer: it must write nothing
    assert returned - deadline < 1.0  # the bound; not the 30 s the call would take
    assert [(f.path, f.kind) for f in r.failures] == [("graph.neff", "deadline")]
    assert r.deadline_hit
    assert {p: d for p, d in files.items() if p != "graph.neff"} == restored(tmp_path)
