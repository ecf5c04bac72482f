"""apply_copy between stores, and verify --local's re-hash of a restored directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from neffcache.backends import get_backend
from neffcache.errors import IntegrityError
from neffcache.lifecycle.copy import apply_copy
from neffcache.lifecycle.entry_select import read_manifests, select_entry_keys
from neffcache.lifecycle.verify_local import verify_local
from neffcache.restore.run import restore_cells
from neffcache.restore.state import load_state
from neffcache.store import blob_key
from tests.support.lifecycle import cell, publish_synthetic, sdk_fingerprint
from tests.support.memory_store import MemoryStore

FP = sdk_fingerprint("2.19")


def test_copy_is_idempotent_and_copies_each_blob_once(tmp_path: Path) -> None:
    src = MemoryStore()
    for i, h in enumerate((64, 128)):
        publish_synthetic(src, cell(h), FP, tmp_path / str(h), seed=i)
    manifests = read_manifests(src, select_entry_keys(src, [cell(64), cell(128)]))
    dst = MemoryStore()
    first = apply_copy(src, dst, manifests)
    assert first.entries_copied == 2
    assert first.blobs_copied == len(list(src.list("blobs/")))
    again = apply_copy(src, dst, manifests)
    assert (again.entries_copied, again.blobs_copied, again.entries_present) == (0, 0, 2)
    assert select_entry_keys(dst, None) == select_entry_keys(src, None)


def test_a_corrupt_source_blob_is_never_committed(tmp_path: Path) -> None:
    src = MemoryStore()
    result = publish_synthetic(src, cell(64), FP, tmp_path / "c", seed=3)
    victim = result.manifest.files[0].sha256
    data = bytearray(src.objects[blob_key(victim)])
    data[0] ^= 1
    src.objects[blob_key(victim)] = bytes(data)
    dst = MemoryStore()
    with pytest.raises(IntegrityError):
        apply_copy(src, dst, [result.manifest])
    assert not dst.has(blob_key(victim)) and not list(dst.list("manifests/"))


def test_verify_local_finds_a_flipped_bit_and_forgets_its_state(tmp_path: Path) -> None:
    store = MemoryStore()
    publish_synthetic(store, cell(64), FP, tmp_path / "c", seed=5)
    target = tmp_path / "restored"
    r = restore_cells(store, [cell(64)], get_backend("neuron"), FP, target)
    assert r.error() is None
    assert verify_local(target).problems == ()
    victim = sorted((target / "neff").rglob("*.neff"))[0]
    st = victim.stat()
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x10
    victim.write_bytes(data)
    import os

    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))  # damage below the metadata
    report = verify_local(target)
    assert [p.kind for p in report.problems] == ["sha256"]
    assert report.error() is not None
    rel = victim.relative_to(target / "neff").as_posix()
    assert ("neff", rel) not in load_state({"neff": str(target / "neff")})
    again = restore_cells(store, [cell(64)], get_backend("neuron"), FP, target)
    assert again.files_fetched == 1 and verify_local(target).problems == ()


def test_verify_local_is_clean_after_a_restore_that_missed_a_cell(tmp_path: Path) -> None:
    """The restore's record of missing entries (missing.json) lives beside the manifest
    copies; it is not a manifest and not damage."""
    store = MemoryStore()
    publish_synthetic(store, cell(64), FP, tmp_path / "c", seed=6)
    target = tmp_path / "restored"
    r = restore_cells(store, [cell(64), cell(128)], get_backend("neuron"), FP, target)
    assert r.resolution.missing and (target / ".neffcache-entries" / "missing.json").is_file()
    report = verify_local(target)
    assert report.problems == () and report.entries == 1


def test_verify_local_waits_for_a_restore_running_in_the_directory(tmp_path: Path) -> None:
    """Forgetting a damaged file's state rewrites the state file: under the restore lock."""
    import threading

    from neffcache.restore.fs import lock_destination

    store = MemoryStore()
    publish_synthetic(store, cell(64), FP, tmp_path / "c", seed=7)
    target = tmp_path / "restored"
    assert restore_cells(store, [cell(64)], get_backend("neuron"), FP, target).error() is None
    victim = sorted((target / "neff").rglob("*.neff"))[0]
    victim.write_bytes(b"damaged")
    done = threading.Event()
    with lock_destination(str(target)):
        t = threading.Thread(target=lambda: (verify_local(target), done.set()))
        t.start()
        assert not done.wait(0.5)  # held: verify waits before touching the state file
    t.join(10)
    assert done.is_set()
    rel = victim.relative_to(target / "neff").as_posix()
    assert ("neff", rel) not in load_state({"neff": str(target / "neff")})
