"""plan_publish and publish_entry against a local store in a temp dir (fast, no network)."""

from __future__ import annotations

import io
import json
import os
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from neffcache.backends import INDUCTOR, NEURON
from neffcache.errors import IntegrityError, StoppedError, UsageError
from neffcache.fingerprint import build_fingerprint
from neffcache.hashing import VerifyingReader, sha256_bytes
from neffcache.manifest import decode_manifest, entry_key
from neffcache.matrix import Cell
from neffcache.precompile import publish as publish_module
from neffcache.precompile.publish import hash_workers, plan_publish, publish_entry
from neffcache.store import blob_key, manifest_key
from neffcache.store.base import (
    BLOBS,
    CELLS,
    DAMAGED,
    MANIFESTS,
    PACKS,
    PENDING,
    cell_pointer_key,
)
from neffcache.store.local import LocalStore
from tests.support.faulty_store import FaultyStore
from tests.support.slow_store import SlowStore
from tests.support.synthetic import make_neff_cache

FP = build_fingerprint("neuron", {"target": "trn2"})


def cell(h: int = 64) -> Cell:
    return Cell("p", "diffusers:P", "m", "main", "bfloat16", "compile", ("transformer",),
                h, h, 1, 1)


def test_plan_skips_droppings_and_symlinks(tmp_path: Path) -> None:
    cache = make_neff_cache(tmp_path / "neff", seed=3, count=30, large=0)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_bytes(b"no")
    os.symlink(tmp_path / "outside", tmp_path / "neff" / "linkdir")
    os.symlink(tmp_path / "outside" / "secret", tmp_path / "neff" / "link.neff")
    (tmp_path / "neff" / "ab" / "cd").mkdir(parents=True, exist_ok=True)
    (tmp_path / "neff" / "ab" / "cd" / "k.neff.lock").write_bytes(b"")
    (tmp_path / "neff" / "exe.neff").write_bytes(b"x")
    os.chmod(tmp_path / "neff" / "exe.neff", 0o755)
    files = plan_publish(NEURON, {"neff": tmp_path / "neff"})
    got = {f.path: f for f in files}
    assert set(got) == set(cache.files) | {"exe.neff"}
    assert got["exe.neff"].mode == 0o755
    for rel, data in cache.files.items():
        assert got[rel].sha256 == sha256_bytes(data) and got[rel].size == len(data)
    assert [(f.root, f.path) for f in files] == sorted((f.root, f.path) for f in files)


def test_plan_follows_capture_globs(tmp_path: Path) -> None:
    tmp = tmp_path / "tmpdir"
    (tmp / "torchinductor_u" / "precompiled_headers").mkdir(parents=True)
    (tmp / "torchinductor_u" / "precompiled_headers" / "h.gch").write_bytes(b"pch")
    (tmp / "torchinductor_u" / "other").mkdir()
    (tmp / "torchinductor_u" / "other" / "x").write_bytes(b"no")
    (tmp / "unrelated").mkdir()
    (tmp / "unrelated" / "y").write_bytes(b"no")
    files = plan_publish(INDUCTOR, {"pch": tmp})
    assert [f.path for f in files] == ["torchinductor_u/precompiled_headers/h.gch"]


def test_plan_refuses_unknown_root_and_missing_dir(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no cache root 'inductor'"):
        plan_publish(NEURON, {"inductor": tmp_path})
    with pytest.raises(UsageError, match="not a directory"):
        plan_publish(NEURON, {"neff": tmp_path / "nope"})


def test_publish_uploads_each_blob_once_and_manifest_last(tmp_path: Path) -> None:
    cache = make_neff_cache(tmp_path / "neff", seed=1, count=60, large=1, duplicate_ratio=0.3)
    store = LocalStore(tmp_path / "store")
    r = publish_entry(store, cell(), FP, NEURON, {"neff": cache.root},
                      producer={"job": "ci-42"}, compile_seconds=12.5)
    assert r.created
    assert r.blobs_uploaded == cache.unique_contents and r.blobs_skipped == 0
    assert r.bytes_uploaded == sum(len(b) for b in set(cache.files.values()))
    assert len(list(store.list("blobs/"))) == cache.unique_contents
    assert list(store.list("pending/")) == []
    key = entry_key(cell(), FP)
    m = decode_manifest(store.read(manifest_key(key)), allowed_roots=NEURON.root_names)
    assert m == r.manifest and m.compile_seconds == 12.5
    producer = dict(m.producer)
    assert producer["job"] == "ci-42" and "host" in producer and "neffcache" in producer
    assert not any("SECRET" in k.upper() or "KEY" in k.upper() for k in producer)
    pointer = json.loads(store.read(cell_pointer_key(cell().key, FP.key)))
    assert pointer["entry_key"] == key

    before = store.read(manifest_key(key))
    again = publish_entry(store, cell(), FP, NEURON, {"neff": cache.root}, compile_seconds=1.0)
    assert not again.created and again.blobs_uploaded == 0
    assert again.manifest.entry_key == key
    assert store.read(manifest_key(key)) == before  # the first writer's manifest stands


def test_second_entry_reuses_shared_blobs(tmp_path: Path) -> None:
    cache = make_neff_cache(tmp_path / "neff", seed=2, count=20, large=0, duplicate_ratio=0)
    store = LocalStore(tmp_path / "store")
    publish_entry(store, cell(64), FP, NEURON, {"neff": cache.root})
    (cache.root / "extra.neff").write_bytes(b"only in the second entry")
    r = publish_entry(store, cell(128), FP, NEURON, {"neff": cache.root})
    assert (r.blobs_uploaded, r.blobs_skipped) == (1, 20)
    assert len(list(store.list("blobs/"))) == 21


def test_a_file_changed_after_planning_is_never_stored(tmp_path: Path) -> None:
    root = tmp_path / "neff"
    root.mkdir()
    (root / "a.neff").write_bytes(b"original")
    (root / "b.neff").write_bytes(b"fine")
    files = plan_publish(NEURON, {"neff": root})
    (root / "a.neff").write_bytes(b"CHANGED!")  # same size, different bytes
    store = LocalStore(tmp_path / "store")
    with pytest.raises(IntegrityError, match="changed while being uploaded"):
        publish_entry(store, cell(), FP, NEURON, {"neff": root}, files=files, workers=1)
    assert not store.has(blob_key(sha256_bytes(b"original")))
    assert not store.has(blob_key(sha256_bytes(b"CHANGED!")))
    assert list(store.list("manifests/")) == []
    assert list(store.list("pending/")) == []


def test_verifying_reader_hashes_each_byte_once_across_seeks() -> None:
    data = os.urandom(5000)
    r = VerifyingReader(io.BytesIO(data), size=len(data), sha256=sha256_bytes(data), name="x")
    assert r.read(3000) == data[:3000]
    r.seek(0)
    assert r.read() == data  # reads to EOF: verified there
    assert r.verified
    grow = VerifyingReader(io.BytesIO(data + b"!"), size=len(data), sha256=sha256_bytes(data),
                           name="x")
    with pytest.raises(IntegrityError, match="grew beyond"):
        grow.read()
    short = VerifyingReader(io.BytesIO(data[:10]), size=len(data), sha256=sha256_bytes(data),
                            name="x")
    with pytest.raises(IntegrityError, match="10 bytes read"):
        short.read()
    partial = VerifyingReader(io.BytesIO(data), size=len(data), sha256=sha256_bytes(data),
                              name="x")
    partial.read(100)
    partial.finish()
    assert partial.verified


def test_concurrent_publishes_of_one_entry_first_writer_wins(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    cache = make_neff_cache(tmp_path / "neff", seed=4, count=30, large=0)
    store = LocalStore(tmp_path / "store")
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(
            lambda i: publish_entry(store, cell(), FP, NEURON, {"neff": cache.root},
                                    compile_seconds=float(i)), range(4)))
    assert sum(r.created for r in results) == 1
    winner = next(r for r in results if r.created)
    stored = decode_manifest(store.read(manifest_key(entry_key(cell(), FP))))
    assert stored.compile_seconds == winner.manifest.compile_seconds
    assert len(list(store.list("blobs/"))) == cache.unique_contents
    assert list(store.list("pending/")) == []


def test_a_fresh_small_file_publish_costs_one_request_per_blob(tmp_path: Path) -> None:
    """A new entry's small blobs are put create-only at once: no probe before each (issue 22).
    The requests, by kind of object, are counted by a wrapping store."""
    cache = make_neff_cache(tmp_path / "neff", seed=4, count=300, large=0, duplicate_ratio=0.1)
    counted = FaultyStore(LocalStore(tmp_path / "store"))
    r = publish_entry(counted, cell(), FP, NEURON, {"neff": cache.root})
    assert r.created and r.blobs_uploaded == cache.unique_contents and len(r.manifest.packs) > 0
    kinds = Counter(f"{m} {k.split('/')[0]}" for m, k in counted.calls)
    assert kinds == Counter({"put blobs": cache.unique_contents, "put packs": len(r.manifest.packs),
                             "has manifests": 1, "put pending": 1, "delete pending": 1,
                             "put manifests": 1, "put cells": 1})


def test_a_new_entry_keeps_good_shared_blobs_and_rewrites_bad_ones(tmp_path: Path) -> None:
    """Put first, probe on refusal: a blob another entry left good is skipped; one of the wrong
    size or quarantined under damaged/ is rewritten with the right bytes, its mark dropped."""
    cache = make_neff_cache(tmp_path / "neff", seed=5, count=12, large=0, duplicate_ratio=0)
    store = LocalStore(tmp_path / "store")
    good, short, marked = sorted(set(cache.files.values()))[:3]
    for data in (good, marked):
        store.put(blob_key(sha256_bytes(data)), io.BytesIO(data))
    store.put(blob_key(sha256_bytes(short)), io.BytesIO(short[:-1]))
    store.put(DAMAGED + blob_key(sha256_bytes(marked)), io.BytesIO(b"found damaged"))
    r = publish_entry(store, cell(), FP, NEURON, {"neff": cache.root}, packing=None)
    assert (r.blobs_uploaded, r.blobs_skipped) == (cache.unique_contents - 1, 1)
    for data in (good, short, marked):
        assert store.read(blob_key(sha256_bytes(data))) == data
    assert list(store.list(DAMAGED)) == []


def test_hashing_threads_follow_the_cpus_not_the_uploads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(publish_module, "usable_cpus", lambda: 2)
    assert hash_workers(32) == 4  # uploads wait on the store; hashing is CPU work
    assert hash_workers(3) == 3
    assert hash_workers(0) == 1
    monkeypatch.setattr(publish_module, "usable_cpus", lambda: 64)
    assert hash_workers(32) == 32


def test_a_stopped_publish_writes_no_entry_and_a_rerun_uploads_only_what_is_missing(
        tmp_path: Path) -> None:
    """Stop set while uploads hang (a gated store lets 3 through): StoppedError at once, no
    manifest, pointer or intent (only blobs/packs, content-addressed); a rerun completes."""
    make_neff_cache(tmp_path / "neff", seed=11, count=200, large=1)
    inner = LocalStore(tmp_path / "store")
    gate = threading.Semaphore(3)
    slow = SlowStore(inner, prefixes=(BLOBS, PACKS), gate=gate)
    stop = threading.Event()
    raised: list[BaseException] = []

    def publish() -> None:
        try:
            publish_entry(slow, cell(), FP, NEURON, {"neff": tmp_path / "neff"}, stop=stop)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            raised.append(exc)

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while sum(k.startswith((BLOBS, PACKS)) for k in list(slow.puts)) < 5:
            assert time.monotonic() < deadline, "the uploads never started"
            time.sleep(0.01)
        stop.set()
        thread.join(timeout=5)
        assert not thread.is_alive(), "the publish did not stop"
        assert [type(e) for e in raised] == [StoppedError]
        assert [k for p in (MANIFESTS, CELLS, PENDING) for k in inner.list(p)] == []
        # the 3 uploads the gate let through end on their own; the others wait at the gate
        while len([*inner.list(BLOBS), *inner.list(PACKS)]) < 3:
            assert time.monotonic() < deadline, "the uploads let through never ended"
            time.sleep(0.01)
        blobs, packs = set(inner.list(BLOBS)), set(inner.list(PACKS))
        assert len(blobs) + len(packs) == 3
        result = publish_entry(inner, cell(), FP, NEURON, {"neff": tmp_path / "neff"})
    finally:
        gate.release(10_000)  # the abandoned uploads end (each writes a whole blob or pack)
    assert result.created and inner.has(manifest_key(result.manifest.entry_key))
    assert result.blobs_uploaded == len({f.sha256 for f in result.manifest.files}) - len(blobs)
    assert result.packs_uploaded == len(result.manifest.packs) - len(packs)
