"""Rebuilding the index from a local store's manifests."""

from __future__ import annotations

import importlib
import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from neffcache.index import Index, open_index
from neffcache.index.reindex import reindex, stale_keys
from neffcache.manifest import encode_manifest
from neffcache.store.base import manifest_key
from neffcache.store.local import LocalStore
from tests.support.coverage import coverage_of
from tests.support.plans import plan_reindex
from tests.unit.test_index_factories import make_cell, make_fingerprint, make_manifest

reindex_mod = importlib.import_module("neffcache.index.reindex")


def all_keys(ix: Index) -> set[str]:
    return {k for page in ix.entry_key_pages() for k in page}


def put(store: LocalStore, key: str, data: bytes) -> None:
    store.put(key, io.BytesIO(data), if_absent=False)


def test_plan_reindex_separates_manifests_from_strays() -> None:
    wanted, stray = plan_reindex(["manifests/b.json", "manifests/a.json", "manifests/x/y.json",
                                  "manifests/readme.txt"])
    assert wanted == [("manifests/a.json", "a"), ("manifests/b.json", "b")]
    assert stray == ["manifests/readme.txt", "manifests/x/y.json"]


def test_reindex_rebuilds_entries_and_reports_invalid_manifests(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    fp = make_fingerprint()
    good = [make_manifest(make_cell(n), fp) for n in range(5)]
    for m in good:
        put(store, manifest_key(m.entry_key), encode_manifest(m))
    put(store, manifest_key("f" * 64), b"{not json")
    put(store, manifest_key("e" * 64), encode_manifest(good[0]))  # right content, wrong name

    with open_index(f"sqlite:///{tmp_path / 'index.db'}", auto_upgrade=True) as ix:
        seen: list[tuple[int, int]] = []
        result = reindex(ix, store, progress=lambda d, t: seen.append((d, t)))
        assert (result.scanned, result.added, result.already_indexed, result.removed) == (
            7, 5, 0, 0)
        reasons = sorted(i.reason for i in result.invalid)
        assert len(reasons) == 2
        assert "not the one its name says" in reasons[0]
        assert "not valid JSON" in reasons[1]
        assert seen[-1] == (7, 7)
        assert all_keys(ix) == {m.entry_key for m in good}
        cover = coverage_of(ix, [m.cell for m in good], [fp])
        assert cover.counts(fp.key)["ready"] == 5
        (e,) = ix.entries(cell_glob=good[0].cell.id)
        assert e.store_url == store.url and e.file_count == 2

        again = reindex(ix, store)
        assert (again.added, again.already_indexed) == (0, 5)

        store.delete(manifest_key(good[1].entry_key))
        assert reindex(ix, store, prune=False).removed == 0
        assert good[1].entry_key in all_keys(ix)
        pruned = reindex(ix, store)
        assert pruned.removed == 1 and good[1].entry_key not in all_keys(ix)
        assert pruned.to_json()["removed"] == 1


def test_stale_keys_are_those_not_found() -> None:
    assert stale_keys(["a", "b", "c", "d"], ["b", "d", "e"]) == ["a", "c"]
    assert stale_keys(["a"], []) == ["a"]
    assert stale_keys([], ["a"]) == []
    assert stale_keys(["d", "a", "c"], ["a", "b", "c"]) == ["d"]  # any page order
    assert stale_keys(["b"], ["a", "c"]) == ["b"]


def test_prune_walks_the_index_a_page_at_a_time_and_removes_in_batches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalStore(tmp_path / "store")
    fp = make_fingerprint()
    ms = [make_manifest(make_cell(n), fp) for n in range(23)]
    kept = ms[::3]  # the store keeps every third entry's manifest
    for m in kept:
        put(store, manifest_key(m.entry_key), encode_manifest(m))
    removes: list[int] = []
    with open_index(f"sqlite:///{tmp_path / 'index.db'}", auto_upgrade=True) as ix:
        ix.record_entries(ms, store.url)
        pages = list(ix.entry_key_pages(size=4))
        assert [len(p) for p in pages] == [4, 4, 4, 4, 4, 3]
        assert [k for p in pages for k in p] == sorted(m.entry_key for m in ms)
        real_pages, real_remove = ix.entry_key_pages, ix.remove_entries
        monkeypatch.setattr(ix, "entry_key_pages", lambda: real_pages(size=4))
        monkeypatch.setattr(ix, "remove_entries",
                            lambda keys: removes.append(len(keys)) or real_remove(keys))
        monkeypatch.setattr(reindex_mod, "REMOVE_BATCH", 5)
        result = reindex(ix, store)
        assert all_keys(ix) == {m.entry_key for m in kept}
        cover = coverage_of(ix, [m.cell for m in ms], [fp])
    assert result.removed == len(ms) - len(kept) == sum(removes)
    assert len(removes) > 1 and max(removes) < 5 + 4  # a batch, never everything at once
    assert cover.counts(fp.key)["ready"] == len(kept)  # the aggregates followed


def test_an_entry_published_while_the_store_is_read_is_not_pruned(tmp_path: Path) -> None:
    fp = make_fingerprint()
    old, late = make_manifest(make_cell(1), fp), make_manifest(make_cell(2), fp)
    gone = make_manifest(make_cell(3), fp)

    with open_index(f"sqlite:///{tmp_path / 'index.db'}", auto_upgrade=True) as ix:

        class LateStore(LocalStore):
            def list(self, prefix: str) -> Iterator[str]:
                listed = sorted(super().list(prefix))
                # Another host publishes and indexes an entry once the listing is taken.
                put(self, manifest_key(late.entry_key), encode_manifest(late))
                ix.record_entry(late, self.url)
                return iter(listed)

        store = LateStore(tmp_path / "store")
        put(store, manifest_key(old.entry_key), encode_manifest(old))
        ix.record_entries([old, gone], store.url)  # gone's manifest is not in the store
        result = reindex(ix, store)
        assert result.removed == 1
        assert all_keys(ix) == {old.entry_key, late.entry_key}
