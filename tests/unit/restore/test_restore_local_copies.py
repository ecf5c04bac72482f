"""The local manifest copies a restore keeps (``neffcache.restore.local.ManifestCopies``): the
store's bytes as they came, kept only once they decoded as the entry's manifest; a damaged or
untrusted read leaves no copy and no temp file behind."""

from __future__ import annotations

import os
from pathlib import Path

from neffcache.backends import NEURON
from neffcache.fingerprint import build_fingerprint
from neffcache.manifest import Manifest
from neffcache.matrix import Cell
from neffcache.precompile.publish import publish_entry
from neffcache.restore.local import LOCAL_ENTRIES, local_manifest_path
from neffcache.restore.run import restore_cells
from neffcache.signing import generate_signing_key
from neffcache.store import manifest_key
from neffcache.store.local import LocalStore
from tests.support.faulty_store import FaultyStore

FP = build_fingerprint("neuron", {"target": "trn2"})
CELL = Cell("p", "diffusers:P", "m", "main", "bfloat16", "compile", ("transformer",),
            64, 64, 1, 1)


def publish(tmp_path: Path) -> tuple[LocalStore, Manifest]:
    root = tmp_path / "src"
    root.mkdir()
    for i in range(5):
        (root / f"op{i}.neff").write_bytes(os.urandom(500 + i))
    store = LocalStore(tmp_path / "store")
    return store, publish_entry(store, CELL, FP, NEURON, {"neff": root}).manifest


def entries(target: Path) -> list[str]:
    return sorted(os.listdir(target / LOCAL_ENTRIES))


def test_the_copy_is_the_stores_bytes_and_no_temp_is_left(tmp_path: Path) -> None:
    store, m = publish(tmp_path)
    target = tmp_path / "t"
    result = restore_cells(store, [CELL], NEURON, FP, target)
    assert result.files_fetched == 5
    stored = store.read(manifest_key(m.entry_key))
    assert local_manifest_path(target, m.entry_key).read_bytes() == stored
    assert entries(target) == sorted([f"{m.entry_key}.json", "lock"])


def test_a_manifest_damaged_on_the_way_keeps_the_intact_read(tmp_path: Path) -> None:
    store, m = publish(tmp_path)
    key = manifest_key(m.entry_key)
    faulty = FaultyStore(store, corrupt={key}, damaged_reads=1)
    target = tmp_path / "t"
    result = restore_cells(faulty, [CELL], NEURON, FP, target)
    assert result.files_fetched == 5
    assert [k for op, k in faulty.calls if op == "read"].count(key) == 2
    assert local_manifest_path(target, m.entry_key).read_bytes() == store.read(key)
    assert entries(target) == sorted([f"{m.entry_key}.json", "lock"])


def test_a_manifest_damaged_at_rest_leaves_no_copy(tmp_path: Path) -> None:
    store, m = publish(tmp_path)
    faulty = FaultyStore(store, corrupt={manifest_key(m.entry_key)})
    target = tmp_path / "t"
    result = restore_cells(faulty, [CELL], NEURON, FP, target)
    assert [f.kind for f in result.resolution.failed] == ["integrity"]
    assert entries(target) == ["lock"]


def test_an_untrusted_manifest_leaves_no_copy(tmp_path: Path) -> None:
    store, m = publish(tmp_path)  # unsigned
    target = tmp_path / "t"
    trusted = [generate_signing_key()[1].public]
    result = restore_cells(store, [CELL], NEURON, FP, target, trusted=trusted)
    assert result.files_fetched == 0
    assert [f.kind for f in result.resolution.failed] == ["integrity"]
    assert entries(target) == ["lock"]
