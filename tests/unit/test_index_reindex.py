"""Rebuilding the index from a local store's manifests."""

from __future__ import annotations

import io
from pathlib import Path

from neffcache.index import open_index, reindex
from neffcache.index.reindex import plan_reindex
from neffcache.manifest import encode_manifest
from neffcache.store.base import manifest_key
from neffcache.store.local import LocalStore
from tests.unit.test_index_factories import make_cell, make_fingerprint, make_manifest


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
        assert ix.entry_keys() == {m.entry_key for m in good}
        cover = ix.coverage([m.cell for m in good], [fp])
        assert cover.counts(fp.key)["ready"] == 5
        (e,) = ix.entries(cell_glob=good[0].cell.id)
        assert e.store_url == store.url and e.file_count == 2

        again = reindex(ix, store)
        assert (again.added, again.already_indexed) == (0, 5)

        store.delete(manifest_key(good[1].entry_key))
        assert reindex(ix, store, prune=False).removed == 0
        assert good[1].entry_key in ix.entry_keys()
        pruned = reindex(ix, store)
        assert pruned.removed == 1 and good[1].entry_key not in ix.entry_keys()
        assert pruned.to_json()["removed"] == 1
