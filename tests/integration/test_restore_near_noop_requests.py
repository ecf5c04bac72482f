"""A near-no-op restore costs store requests in proportion to what is missing, not to the
matrix (issue 22): with one local file deleted, a restore of a 20-cell and of a 200-cell matrix
makes the same few requests (the damaged cell's manifest and the one blob), counted by a
wrapping store and, on moto's S3, by a proxy on 127.0.0.1; after the never-built record
expires, only the never-built cells are asked again. Every result is checked byte for byte."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from neffcache.backends import NEURON
from neffcache.errors import exit_code_for
from neffcache.fingerprint import Fingerprint, build_fingerprint
from neffcache.manifest import entry_key
from neffcache.matrix import Cell
from neffcache.precompile.publish import publish_entry
from neffcache.restore.local import (
    LOCAL_ENTRIES,
    MISSING_FILE,
    MISSING_RECHECK_SECONDS,
    local_manifest_path,
    restore_local,
)
from neffcache.restore.outcome import RestoreResult
from neffcache.restore.run import restore_cells
from neffcache.store import MirroredStore, Store, manifest_key
from neffcache.store.local import LocalStore
from tests.support.faulty_store import FaultyStore
from tests.support.synthetic import read_tree

FP = build_fingerprint("neuron", {"target": "trn2"})
OTHER = build_fingerprint("neuron", {"target": "trn3"})


def cell(i: int) -> Cell:
    return Cell.from_json({"pipeline": f"p{i // 100}", "class": "diffusers:Flux2KleinPipeline",
                           "model": "/models/p", "revision": None, "dtype": "bfloat16",
                           "mode": "compile", "components": ["transformer"],
                           "height": 512 + 8 * (i % 100), "width": 512, "batch": 1, "tp": 1,
                           "backend": "neuron"})


def publish(store: Store, src: Path, c: Cell, fp: Fingerprint, n: int) -> None:
    """One entry of two files in the neff root: a NEFF of its own and a small metadata file."""
    root = src / str(n)
    (root / "ab" / "cd").mkdir(parents=True)
    (root / "ab" / "cd" / f"{c.key[:32]}.neff").write_bytes(c.key.encode() * (40 + n % 7))
    (root / "ab" / f"{c.key[:16]}.json").write_bytes(json.dumps({"n": n}).encode())
    publish_entry(store, c, fp, NEURON, {"neff": root}, workers=1)


def published(store: Store, src: Path, cells: Sequence[Cell],
              never: frozenset[int] | set[int] = frozenset()) -> dict[str, bytes]:
    """Publish every cell but ``never``; the tree a restore must leave, by relative path."""
    want: dict[str, bytes] = {}
    for i, c in enumerate(cells):
        if i not in never:
            publish(store, src, c, FP, i)
            want.update(read_tree(src / str(i)))
    return want


def restored(target: Path) -> dict[str, bytes]:
    """The restored neff tree, without neffcache's own state file."""
    return {p: b for p, b in read_tree(target / "neff").items() if not p.startswith(".neffcache")}


def the_requests(calls: Sequence[tuple[str, str]]) -> Counter[str]:
    """What a wrapping store was asked, by kind of object."""
    return Counter(f"{m} {k.split('/')[0]}" for m, k in calls)


def deleted_one(target: Path, want: dict[str, bytes], i: int) -> str:
    path = sorted(want)[i]
    (target / "neff" / path).unlink()
    return path


def near_noop_calls(tmp: Path, n: int) -> tuple[list[tuple[str, str]], RestoreResult]:
    """A full restore of ``n`` cells, one local file deleted, then the restore counted."""
    store = LocalStore(tmp / "store")
    cells = [cell(i) for i in range(n)]
    want = published(store, tmp / "src", cells)
    target = tmp / "cache"
    assert restore_cells(store, cells, NEURON, FP, target, workers=4).exit_code == 0
    deleted_one(target, want, n // 2)
    assert restore_local(cells, NEURON, FP, target, store_url=store.url) is None
    counted = FaultyStore(store)
    result = restore_cells(counted, cells, NEURON, FP, target, workers=4)
    assert restored(target) == want
    assert (result.exit_code, result.files_fetched) == (0, 1)
    assert len(result.restored) == n and result.files_skipped == 2 * n - 1
    return counted.calls, result


def test_one_deleted_file_costs_the_same_requests_on_20_and_200_cells(tmp_path: Path) -> None:
    small, _ = near_noop_calls(tmp_path / "20", 20)
    large, _ = near_noop_calls(tmp_path / "200", 200)
    assert len(large) == len(small) <= 2, (the_requests(small), the_requests(large))
    kinds = the_requests(large)
    # the damaged cell's entry still in the store: one HEAD of its manifest, no GET
    assert kinds["has manifests"] == 1 and kinds["list cells"] == 0
    # the one file, as a blob GET or a ranged read of its pack: one request
    assert kinds["read blobs"] + kinds["open blobs"] + kinds["read packs"] \
        + kinds["open packs"] == 1


def test_a_damaged_or_foreign_local_copy_is_not_trusted(tmp_path: Path) -> None:
    """A local copy that fails its self-digest, or is another entry's, is ignored: that cell's
    manifest is read from the store (one request more), the others' are not."""
    store = LocalStore(tmp_path / "store")
    cells = [cell(i) for i in range(30)]
    want = published(store, tmp_path / "src", cells)
    target = tmp_path / "cache"
    assert restore_cells(store, cells, NEURON, FP, target, workers=4).exit_code == 0
    bad = local_manifest_path(target, entry_key(cells[3], FP))
    doc = json.loads(bad.read_bytes())
    doc["files"][0]["size"] += 1  # still well-formed JSON, but no longer its own digest
    bad.write_text(json.dumps(doc))
    foreign = local_manifest_path(target, entry_key(cells[5], FP))
    foreign.write_bytes(local_manifest_path(target, entry_key(cells[6], FP)).read_bytes())
    deleted_one(target, want, 0)
    counted = FaultyStore(store)
    result = restore_cells(counted, cells, NEURON, FP, target, workers=4)
    assert result.exit_code == 0 and restored(target) == want
    read = sorted(k for m, k in counted.calls if m == "read" and k.startswith("manifests/"))
    assert read == sorted(manifest_key(entry_key(cells[j], FP)) for j in (3, 5))
    asked = [k for m, k in counted.calls if m == "has"]  # the deleted file's cell: one HEAD
    assert len(asked) == 1 and asked[0] not in read
    assert len(counted.calls) == 2 + 1 + 1
    counted.calls.clear()  # the store's copies replaced the bad ones: nothing more to ask
    deleted_one(target, want, 0)
    assert restore_cells(counted, cells, NEURON, FP, target, workers=4).exit_code == 0
    assert [m for m, _ in counted.calls if m != "open" and m != "read"] == ["has"]
    assert len(counted.calls) == 2 and restored(target) == want


def test_an_entry_retired_from_the_store_is_not_restored_from_its_local_copy(
        tmp_path: Path) -> None:
    """Entries are immutable, but retire removes them: a cell with something to fetch reads
    its manifest from the store first, so a retired entry is reported missing (exit 3), as a
    store-only restore would say, and its local copy is dropped."""
    store = LocalStore(tmp_path / "store")
    cells = [cell(i) for i in range(10)]
    want = published(store, tmp_path / "src", cells)
    target = tmp_path / "cache"
    restore_cells(store, cells, NEURON, FP, target, workers=4)
    gone = entry_key(cells[0], FP)
    store.delete(manifest_key(gone))
    deleted = [p for p in sorted(want) if cells[0].key[:16] in p][0]
    (target / "neff" / deleted).unlink()
    counted = FaultyStore(store)
    result = restore_cells(counted, cells, NEURON, FP, target, workers=4)
    assert [c.id for c in result.resolution.missing] == [cells[0].id]
    assert exit_code_for(result.error()) == 3  # type: ignore[arg-type]
    assert the_requests(counted.calls) == Counter({"has manifests": 1, "list cells": 1})
    assert not local_manifest_path(target, gone).exists()


def test_an_expired_never_built_record_re_asks_only_those_cells(tmp_path: Path) -> None:
    """20 of 200 cells never built (one of them built for another target): once the record
    is older than MISSING_RECHECK_SECONDS, only those 20 are asked again (a manifest GET and
    a pointer LIST each, none for the 180 in place); one built meanwhile is restored."""
    store = LocalStore(tmp_path / "store")
    cells = [cell(i) for i in range(200)]
    never = set(range(0, 200, 10))
    want = published(store, tmp_path / "src", cells, never)
    publish(store, tmp_path / "src", cells[0], OTHER, -1)
    target = tmp_path / "cache"
    first = restore_cells(store, cells, NEURON, FP, target, workers=4)
    assert len(first.resolution.missing) == 20
    counted = FaultyStore(store)
    within = restore_cells(counted, cells, NEURON, FP, target, workers=4)  # a fresh record
    assert counted.calls == [] and len(within.resolution.missing) == 20
    assert dict(within.resolution.elsewhere) == {cells[0].id: (OTHER.key,)}
    assert exit_code_for(within.error()) == 3  # type: ignore[arg-type]

    record = target / LOCAL_ENTRIES / MISSING_FILE
    doc = json.loads(record.read_text())
    doc["checked_at"] -= MISSING_RECHECK_SECONDS + 1
    record.write_text(json.dumps(doc))
    publish(store, tmp_path / "src", cells[10], FP, 10)  # built since
    want.update(read_tree(tmp_path / "src" / "10"))
    assert restore_local(cells, NEURON, FP, target, store_url=store.url) is None
    counted.calls.clear()
    again = restore_cells(counted, cells, NEURON, FP, target, workers=4)
    kinds = the_requests(counted.calls)
    assert kinds["read manifests"] == 20 and kinds["list cells"] == 19
    assert len(counted.calls) == 20 + 19 + again.files_fetched  # no pack here: one GET a file
    assert len(again.resolution.missing) == 19 and again.files_fetched == 2
    assert dict(again.resolution.elsewhere) == {cells[0].id: (OTHER.key,)}
    assert restored(target) == want
    assert json.loads(record.read_text())["checked_at"] > doc["checked_at"] + 60


def test_a_near_noop_restore_through_mirrors_reads_only_what_is_missing(tmp_path: Path
                                                                        ) -> None:
    """The primary lost everything; the mirror has it: the deleted file's manifest and bytes
    come from the mirror, and nothing else is asked of either but one check."""
    primary, mirror = LocalStore(tmp_path / "primary"), LocalStore(tmp_path / "mirror")
    cells = [cell(i) for i in range(20)]
    want = published(mirror, tmp_path / "src", cells)
    target = tmp_path / "cache"
    assert restore_cells(mirror, cells, NEURON, FP, target, workers=4).exit_code == 0
    deleted_one(target, want, 7)
    a, b = FaultyStore(primary), FaultyStore(mirror)
    a.url, b.url = primary.url, mirror.url
    store = MirroredStore([a, b])
    result = restore_cells(store, cells, NEURON, FP, target, workers=4)
    assert result.exit_code == 0 and restored(target) == want
    # Each store is checked once, before its first use (a mirror only when it is needed).
    assert [m for m, _ in b.calls] in (["check", "has", "open"], ["check", "has", "read"])
    assert [m for m, _ in a.calls][0] == "check" and len(a.calls) == 3  # then missed both
    assert store.served() == {mirror.url: 1}  # the bytes (a HEAD serves nothing)


@pytest.mark.s3
def test_on_s3_one_deleted_file_costs_two_http_requests(s3_url: str,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """The same on moto's S3, every HTTP request counted by a proxy on 127.0.0.1."""
    from neffcache.store.s3 import S3Store
    from tests.support.faulty_proxy import FaultyProxy

    cells = [cell(i) for i in range(40)]
    target = Path(os.environ["NEFFCACHE_HOME"]) / "cache"
    src = target.parent / "src"
    want = published(S3Store.from_url(s3_url), src, cells)
    assert restore_cells(S3Store.from_url(s3_url), cells, NEURON, FP, target,
                         workers=4).exit_code == 0
    deleted_one(target, want, 11)
    with FaultyProxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        result = restore_cells(S3Store.from_url(s3_url), cells, NEURON, FP, target, workers=4)
    assert result.exit_code == 0 and restored(target) == want
    assert [m for m, *_ in proxy.log] == ["HEAD", "GET"], proxy.log
    assert sum("/manifests/" in p for _, p, *_ in proxy.log) == 1
