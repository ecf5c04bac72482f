"""gc planning (pure), the grace floor, and gc runs against a local store racing a publish."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from neffcache.backends import NEURON
from neffcache.errors import IntegrityError, UsageError
from neffcache.fingerprint import build_fingerprint
from neffcache.hashing import sha256_bytes
from neffcache.lifecycle import gc as gc_module
from neffcache.lifecycle.gc import (
    Intent,
    apply_gc,
    check_grace,
    collect_gc,
    collect_uploads,
    manifest_all_references,
    plan_gc,
    plan_packs,
    plan_uploads,
)
from neffcache.matrix import Cell
from neffcache.precompile.intents import GRACE_FLOOR_SECONDS, REFRESH_SECONDS
from neffcache.precompile.packing import PackPolicy
from neffcache.precompile.publish import publish_entry
from neffcache.restore.run import restore_cells
from neffcache.store import blob_key
from neffcache.store.base import PACKS, Upload, pack_key
from neffcache.store.local import LocalStore
from tests.support.lifecycle import manifest_references
from tests.support.slow_store import SlowStore
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


def test_a_manifest_seen_at_the_first_listing_protects_every_later_batch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A manifest written after planning names a blob of the last batch: gc keeps it though
    the listings between found nothing new (each batch is checked against every listing)."""
    monkeypatch.setattr(gc_module, "_BATCH", 1)
    store = LocalStore(tmp_path / "store")
    for sha in (A, B, C):
        store.put(blob_key(sha), io.BytesIO(sha.encode()))
    plan, seen_m, seen_i = collect_gc(store, now=0.0)
    assert plan.delete == tuple(blob_key(s) for s in (A, B, C))
    store.put("manifests/" + "e" * 64 + ".json", io.BytesIO(
        b'{"schema_version": 1, "files": [{"sha256": "%s"}]}' % C.encode()))
    result = apply_gc(store, plan, (seen_m, seen_i), recheck=1e9)
    assert result.deleted == (blob_key(A), blob_key(B))
    assert result.kept_on_recheck == (blob_key(C),) and store.has(blob_key(C))


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


# --- the grace floor, the re-check before each delete, a publish in progress ----------------

def test_a_grace_below_the_floor_is_refused_unless_forced() -> None:
    with pytest.raises(UsageError, match="600 s floor") as caught:
        check_grace(0, force=False)
    assert "--force" in (caught.value.hint or "")
    check_grace(GRACE_FLOOR_SECONDS, force=False)
    check_grace(0, force=True)
    assert REFRESH_SECONDS * 4 <= GRACE_FLOOR_SECONDS  # several renewals fit in the floor


def test_a_delete_cleared_too_long_ago_waits_for_the_next_listing(tmp_path: Path) -> None:
    """A publish whose intent appears while a batch is being deleted keeps the blobs that were
    not deleted yet: a delete issued long after its clearance goes back for a fresh listing."""
    store = LocalStore(tmp_path / "store")
    for sha in (A, B, C, D):
        store.put(blob_key(sha), io.BytesIO(sha.encode()))
    plan, seen_m, seen_i = collect_gc(store, now=0.0)
    assert plan.delete == tuple(blob_key(s) for s in (A, B, C, D))
    ticks = iter(range(1000))
    original = store.delete

    def delete(key: str) -> None:
        original(key)
        if key == blob_key(A):  # a publish starts meanwhile and will skip C, which exists
            store.put("pending/" + "f" * 64 + ".1.json",
                      io.BytesIO(b'{"created_at": 0, "blobs": ["%s"]}' % C.encode()))

    store.delete = delete  # type: ignore[method-assign]
    result = apply_gc(store, plan, (seen_m, seen_i), workers=1, recheck=0.5,
                      clock=lambda: float(next(ticks)))  # every reading one second later
    assert result.kept_on_recheck == (blob_key(C),)
    assert set(result.deleted) == {blob_key(A), blob_key(B), blob_key(D)}
    assert store.has(blob_key(C)) and not store.has(blob_key(B))


def test_without_the_time_bound_that_blob_would_go(tmp_path: Path) -> None:
    """The same race with a bound no batch reaches: the test above can fail."""
    store = LocalStore(tmp_path / "store")
    for sha in (A, C):
        store.put(blob_key(sha), io.BytesIO(sha.encode()))
    plan, seen_m, seen_i = collect_gc(store, now=0.0)
    original = store.delete

    def delete(key: str) -> None:
        original(key)
        if key == blob_key(A):
            store.put("pending/" + "f" * 64 + ".1.json",
                      io.BytesIO(b'{"created_at": 0, "blobs": ["%s"]}' % C.encode()))

    store.delete = delete  # type: ignore[method-assign]
    result = apply_gc(store, plan, (seen_m, seen_i), workers=1, recheck=1e9)
    assert set(result.deleted) == {blob_key(A), blob_key(C)}


def test_gc_keeps_a_blob_a_publish_in_progress_decided_to_skip(tmp_path: Path) -> None:
    """gc plans before the publish starts (the blob is an orphan then); the publish writes its
    intent, finds the blob present and skips it; gc's batch, which comes after, must keep it."""
    src = make_neff_cache(tmp_path / "src", seed=9, count=6, large=0)
    orphan = sorted(src.files.values())[0]
    inner = LocalStore(tmp_path / "store")
    inner.put(blob_key(sha256_bytes(orphan)), io.BytesIO(orphan))  # left by a crashed publish
    plan, seen_m, seen_i = collect_gc(inner, now=0.0)
    assert plan.delete == (blob_key(sha256_bytes(orphan)),)
    results = []

    def gc_now(key: str, found: bool) -> None:
        if found and key == blob_key(sha256_bytes(orphan)) and not results:
            assert list(inner.list("pending/")), "the intent must be written before this check"
            results.append(apply_gc(inner, plan, (seen_m, seen_i)))

    store = SlowStore(inner, delay=0, on_has=gc_now)
    fp = build_fingerprint("neuron", {"target": "trn2"})
    cell = Cell("p", "diffusers:P", "m", "main", "bfloat16", "eager", (), 64, 64, 1, 1)
    r = publish_entry(store, cell, fp, NEURON, {"neff": src.root}, packing=None)
    assert r.blobs_skipped >= 1 and results
    assert results[0].deleted == () and results[0].kept_on_recheck == plan.delete
    restored = restore_cells(inner, [cell], NEURON, fp, tmp_path / "t")
    assert restored.error() is None


# --- multipart uploads ---------------------------------------------------------------------

def test_plan_uploads_aborts_old_ones_no_publish_needs() -> None:
    old, young = 1000.0, 4990.0
    uploads = [Upload(blob_key(A), "1", old),  # crashed publish: abort
               Upload(blob_key(B), "2", young),  # started within the grace: leave
               Upload(blob_key(C), "3", old),  # a fresh intent names C: spare
               Upload(pack_key(D), "4", old),  # a pack, while a publish runs: spare
               Upload("manifests/x.json", "5", old)]  # not neffcache's multipart: unknown
    intents = [Intent("pending/fresh", 4990.0, frozenset({C})),
               Intent("pending/stale", 0.0, frozenset({A}))]
    plan = plan_uploads(uploads, intents, now=5000.0, grace=3600)
    assert [u.upload_id for u in plan.abort] == ["1"]
    assert [u.upload_id for u in plan.spared] == ["3", "4"]
    assert [u.upload_id for u in plan.unknown] == ["5"] and plan.listed == 5
    quiet = plan_uploads(uploads, intents[1:], now=5000.0, grace=3600)
    assert [u.upload_id for u in quiet.abort] == ["1", "3", "4"]
    assert plan.to_json()["abort"][0] == {"key": blob_key(A), "upload_id": "1",
                                          "initiated": "1970-01-01T00:16:40Z"}


def test_a_local_store_has_no_uploads(tmp_path: Path) -> None:
    assert collect_uploads(LocalStore(tmp_path / "store"), now=0.0) is None
