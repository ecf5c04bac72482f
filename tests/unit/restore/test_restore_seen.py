"""A rerun holds the files the state file vouches for as paths (``seen.Present``), not as
records; the state file it writes must still vouch for exactly the files verified and durable:
the unchanged ones with their old records, never one this run wrote or re-hashed (issue 22)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from neffcache.backends import NEURON
from neffcache.fingerprint import build_fingerprint
from neffcache.matrix import Cell
from neffcache.precompile.publish import publish_entry
from neffcache.restore.fs import Roots, boot_id
from neffcache.restore.run import restore_cells
from neffcache.restore.scan import scan_present
from neffcache.restore.seen import Present, Vouched
from neffcache.restore.state import load_pending, load_state
from neffcache.store.local import LocalStore
from tests.support.synthetic import make_neff_cache

FP = build_fingerprint("neuron", {"target": "trn2"})
CELL = Cell("p", "diffusers:P", "m", "main", "bfloat16", "compile", ("transformer",),
            64, 64, 1, 1)


def _restored(tmp_path: Path) -> tuple[LocalStore, Path, dict[str, bytes]]:
    """An entry restored twice into ``tmp_path/t`` (the rerun syncs: all files durable)."""
    cache = make_neff_cache(tmp_path / "src", seed=3, count=30, large=0, droppings=False)
    store = LocalStore(tmp_path / "store")
    publish_entry(store, CELL, FP, NEURON, {"neff": cache.root})
    target = tmp_path / "t"
    for _ in range(2):
        assert restore_cells(store, [CELL], NEURON, FP, target, workers=2).error() is None
    dirs = {"neff": str(target / "neff")}
    assert set(load_state(dirs)) == {("neff", p) for p in cache.files}
    return store, target, cache.files


def _vouches_exactly(root: Path, expected: set[str]) -> None:
    """The state file vouches for ``expected`` paths, each with its file's stat and bytes."""
    state = load_state({"neff": str(root)})
    assert {p for _, p in state} == expected
    for (_, path), rec in state.items():
        st = os.lstat(root / path)
        assert rec.matches(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino), path
        assert hashlib.sha256((root / path).read_bytes()).hexdigest() == rec.sha256, path


def test_a_rerun_with_one_file_deleted_restores_it_and_vouches_only_for_the_others(
        tmp_path: Path) -> None:
    store, target, files = _restored(tmp_path)
    root = target / "neff"
    gone = sorted(files)[0]
    (root / gone).unlink()
    result = restore_cells(store, [CELL], NEURON, FP, target, workers=2)
    assert result.error() is None and result.files_fetched == 1
    assert (root / gone).read_bytes() == files[gone]
    _vouches_exactly(root, set(files) - {gone})  # the new one is not synced: pending
    assert set(load_pending({"neff": str(root)})) == {("neff", gone)}
    assert {b for b, _ in load_pending({"neff": str(root)}).values()} == {boot_id()}


def test_a_changed_file_is_rehashed_refetched_and_no_longer_vouched_for(tmp_path: Path) -> None:
    store, target, files = _restored(tmp_path)
    root = target / "neff"
    changed, touched = sorted(files)[1], sorted(files)[2]
    data = files[changed]
    (root / changed).write_bytes(bytes([data[0] ^ 1]) + data[1:])  # same size, other bytes
    os.utime(root / touched, ns=(1, 1))  # same bytes, other times: hashed, found valid
    result = restore_cells(store, [CELL], NEURON, FP, target, workers=2)
    assert result.error() is None and result.files_fetched == 1
    assert (root / changed).read_bytes() == data
    _vouches_exactly(root, set(files) - {changed, touched})
    pending = load_pending({"neff": str(root)})
    assert set(pending) == {("neff", changed), ("neff", touched)}
    assert pending[("neff", touched)][1].mtime_ns == 1  # its hash was taken now


def test_scan_holds_vouched_files_as_paths_and_hashes_the_rest(tmp_path: Path) -> None:
    _store, target, files = _restored(tmp_path)
    root = target / "neff"
    state = load_state({"neff": str(root)})
    same, touched = sorted(files)[:2]
    os.utime(root / touched, ns=(5, 5))
    wanted = {("neff", p): (len(b),) for p, b in files.items()}
    with Roots({"neff": str(root)}, create=False) as roots:
        present, records = scan_present(roots, wanted, state, workers=2)
    assert present.seen == {"neff": set(files) - {touched}} and set(present.odd) == {
        ("neff", touched)}
    assert set(records) == {("neff", touched)} and records[("neff", touched)].mtime_ns == 5
    sha = hashlib.sha256(files[same]).hexdigest()
    assert present[("neff", same)].sha256 == sha == state[("neff", same)].sha256
    assert present[("neff", touched)].sha256 == hashlib.sha256(files[touched]).hexdigest()
    assert len(present) == len(files) and ("neff", "nope") not in present
    # the vouched view: seen files not written anew, with the record they matched
    view = Vouched(present, {("neff", same): records[("neff", touched)]}, {})
    assert ("neff", same) not in view and ("neff", touched) not in view
    assert len(view) == len(files) - 2 and all(view[k] == state[k] for k in view)


def test_present_keep_and_merge_need_the_same_records() -> None:
    a, b = Present({}), Present({})
    a.see(("r", "x"))
    assert a.keep({("r", "x"): 1}, {}).holds(("r", "x"))
    assert not a.keep({("r", "x"): 1}, {("r", "x"): 1}).holds(("r", "x"))
    assert a.merge(Present(a.against)).holds(("r", "x"))
    with pytest.raises(ValueError, match="different records"):
        a.merge(b)
