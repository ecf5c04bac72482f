"""gc planning (pure) and a gc run against a local store racing a publish."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from neffcache.backends import NEURON
from neffcache.errors import IntegrityError
from neffcache.fingerprint import build_fingerprint
from neffcache.lifecycle.gc import (
    Intent,
    apply_gc,
    collect_gc,
    manifest_all_references,
    manifest_references,
    plan_gc,
    plan_packs,
)
from neffcache.matrix import Cell
from neffcache.precompile.packing import PackPolicy
from neffcache.precompile.publish import publish_entry
from neffcache.restore.run import restore_cells
from neffcache.store import blob_key
from neffcache.store.base import PACKS, pack_key
from neffcache.store.local import LocalStore
from tests.support.synthetic import make_neff_cache

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


# --- packs ---------------------------------------------------------------------------------

def test_plan_packs_deletes_unreferenced_only_when_no_publish_is_in_progress() -> None:
    keys = [pack_key(s) for s in (A, B, C)] + ["packs/zz/junk"]
    quiet = plan_packs(keys, {A}, [Intent("pending/stale", 0.0, frozenset())],
                       now=5000.0, grace=3600)
    assert quiet == ((pack_key(B), pack_key(C)), (), 3, ("packs/zz/junk",))
    for busy in (Intent("pending/fresh", 4990.0, frozenset()),
                 Intent("pending/unreadable", None, frozenset())):
        delete, spared, _, _ = plan_packs(keys, {A}, [busy], now=5000.0, grace=3600)
        assert delete == () and spared == (pack_key(B), pack_key(C))


def test_pack_references_are_read_leniently() -> None:
    doc = (b'{"schema_version": 1, "files": [{"sha256": "%s"}], "packs": '
           b'[{"sha256": "%s", "size": 1, "members": []}, {"sha256": "nope"}, 7]}'
           % (A.encode(), B.encode()))
    assert manifest_all_references(doc, "m") == ({A}, {B})
    assert manifest_all_references(b'{"schema_version": 1, "files": [], "packs": 3}', "m") == \
        (set(), set())


def published_with_packs(tmp_path: Path) -> tuple[LocalStore, Cell, dict[str, bytes]]:
    store = LocalStore(tmp_path / "store")
    cache = make_neff_cache(tmp_path / "src", seed=7, count=30)
    fp = build_fingerprint("neuron", {"target": "trn2"})
    cell = Cell("p", "diffusers:P", "m", "main", "bfloat16", "eager", (), 64, 64, 1, 1)
    publish_entry(store, cell, fp, NEURON, {"neff": cache.root},
                  packing=PackPolicy(min_files=1, min_bytes=1))
    assert list(store.list(PACKS)), "the fixture must publish packs"
    return store, cell, cache.files


def test_gc_deletes_orphan_packs_and_keeps_referenced_ones(tmp_path: Path) -> None:
    store, cell, files = published_with_packs(tmp_path)
    kept = set(store.list(PACKS))
    store.put(pack_key(D), io.BytesIO(b"left by a crashed publish"))
    plan, seen_m, seen_i = collect_gc(store, now=1e10)
    assert plan.delete_packs == (pack_key(D),) and plan.delete == ()
    result = apply_gc(store, plan, (seen_m, seen_i))
    assert result.deleted_packs == (pack_key(D),)
    assert set(store.list(PACKS)) == kept
    fp = build_fingerprint("neuron", {"target": "trn2"})
    r = restore_cells(store, [cell], NEURON, fp, tmp_path / "t")
    assert r.error() is None and r.files_fetched == len(files)


def test_gc_keeps_packs_when_a_publish_starts_while_it_runs(tmp_path: Path) -> None:
    store, _, _ = published_with_packs(tmp_path)
    store.put(pack_key(D), io.BytesIO(b"maybe the new publish's pack"))
    plan, seen_m, seen_i = collect_gc(store, now=1e10)
    assert plan.delete_packs == (pack_key(D),)
    store.put("pending/" + "f" * 64 + ".1.json",
              io.BytesIO(b'{"created_at": 1e10, "blobs": []}'))
    result = apply_gc(store, plan, (seen_m, seen_i))
    assert result.deleted_packs == () and store.has(pack_key(D))
