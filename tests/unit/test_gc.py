"""gc planning (pure) and a gc run against a local store racing a publish."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from neffcache.backends import NEURON
from neffcache.errors import IntegrityError
from neffcache.fingerprint import build_fingerprint
from neffcache.gc import Intent, apply_gc, collect_gc, manifest_references, plan_gc
from neffcache.matrix import Cell
from neffcache.publish import publish_entry
from neffcache.store import blob_key
from neffcache.store.local import LocalStore

A, B, C, D = ("a" * 64, "b" * 64, "c" * 64, "d" * 64)


def test_plan_deletes_only_unreferenced_and_unprotected() -> None:
    keys = [blob_key(s) for s in (A, B, C, D)] + ["blobs/sha256/zz/junk"]
    intents = [Intent("pending/fresh", 4990.0, frozenset({C})),
               Intent("pending/stale", 0.0, frozenset({D})),
               Intent("pending/unreadable", None, frozenset())]
    plan = plan_gc(keys, {A}, intents, now=5000.0, grace=3600)
    assert plan.delete == (blob_key(B), blob_key(D))
    assert plan.spared == (blob_key(C),)
    assert plan.stale_intents == ("pending/stale",)
    assert plan.unknown == ("blobs/sha256/zz/junk",)
    assert plan.blobs == 4 and plan.referenced == 1


def test_references_are_read_leniently_but_unreadable_manifests_stop_gc() -> None:
    hostile = b'{"schema_version": 1, "files": [{"path": "../x", "sha256": "%s"}]}' % A.encode()
    assert manifest_references(hostile, "m") == {A}
    with pytest.raises(IntegrityError, match="unreadable manifest"):
        manifest_references(b"{", "manifests/k.json")
    with pytest.raises(IntegrityError, match="schema_version 9"):
        manifest_references(b'{"schema_version": 9, "files": []}', "manifests/k.json")


def test_gc_spares_blobs_of_a_manifest_written_after_planning(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    src = tmp_path / "src"
    src.mkdir()
    (src / "x.neff").write_bytes(b"kept")
    store.put(blob_key(A), io.BytesIO(b"orphan"))
    plan, seen_m, seen_i = collect_gc(store, now=0.0)
    assert plan.delete == (blob_key(A),)
    # Between planning and deleting, a publish lands and a new manifest names the orphan:
    # gc must read what appeared since it planned and keep that blob.
    fp = build_fingerprint("neuron", {"target": "trn2"})
    cell = Cell("p", "diffusers:P", "m", "main", "bfloat16", "eager", (), 64, 64, 1, 1)
    publish_entry(store, cell, fp, NEURON, {"neff": src})
    store.put("manifests/" + "e" * 64 + ".json", io.BytesIO(
        b'{"schema_version": 1, "files": [{"sha256": "%s"}]}' % A.encode()))
    result = apply_gc(store, plan, (seen_m, seen_i))
    assert result.deleted == () and result.kept_on_recheck == (blob_key(A),)
    assert store.has(blob_key(A))
