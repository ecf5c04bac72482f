"""``prune``: a destination that held fingerprint A, then B, goes back to B's files alone; a
file both want stays; the state file and manifest copies stay consistent; a running restore's
lock is respected; nothing is removed without consent or in a dry run."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from neffcache.backends import get_backend
from neffcache.errors import NeffcacheError, UsageError
from neffcache.fingerprint import Fingerprint
from neffcache.manifest import entry_key
from neffcache.matrix_io import load_matrix
from neffcache.precompile.publish import publish_entry
from neffcache.restore import (
    LOCAL_ENTRIES,
    STATE_FILE,
    PruneRequest,
    lock_destination,
    prune,
    restore_cells,
)
from neffcache.restore.local import restore_local
from neffcache.restore.ready import cell_ready, marker_path, write_marker
from neffcache.store import open_store
from tests.e2e.conftest import MATRIX
from tests.support.lifecycle import sdk_fingerprint

A, B = sdk_fingerprint("2.20.0"), sdk_fingerprint("2.21.0")


@pytest.fixture
def world(tmp_path: Path) -> dict:
    """A store with one cell's entry under A (shared + a1 + a2) and under B (shared + b1),
    both restored into one destination, A first."""
    (tmp_path / "matrix.toml").write_text(MATRIX)
    m = load_matrix(tmp_path / "matrix.toml")
    cell = m.cells[0]
    store = open_store(str(tmp_path / "store"), create=True)
    backend = get_backend("neuron")
    trees = {A: {"ab/shared.neff": b"both", "ab/cd/a1.neff": b"a" * 5000, "ef/a2.neff": b"a2"},
             B: {"ab/shared.neff": b"both", "ab/cd/b1.neff": b"b" * 300}}
    for fp, files in trees.items():
        root = tmp_path / f"src-{fp.key[:6]}"
        for rel, data in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
        publish_entry(store, cell, fp, backend, {"neff": root})
    out = tmp_path / "out"
    for fp in (A, B):
        assert restore_cells(store, [cell], backend, fp, out).exit_code == 0
    return {"out": out, "matrix": tmp_path / "matrix.toml", "cell": cell, "backend": backend}


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_a_dry_run_plans_and_touches_nothing(world: dict) -> None:
    out = world["out"]
    before = files_under(out)
    r = prune(PruneRequest(to=out, matrix=world["matrix"], fingerprint=B, dry_run=True))
    assert r.dry_run and r.exit_code == 0
    assert [p.entry_key for p in r.pruned] == [entry_key(world["cell"], A)]
    assert r.kept == (entry_key(world["cell"], B),)
    assert {(root, path) for root, path, _ in r.remove} == {("neff", "ab/cd/a1.neff"),
                                                           ("neff", "ef/a2.neff")}
    assert r.bytes_to_remove == 5002 and r.shared == 1
    assert files_under(out) == before


def test_prune_keeps_b_and_what_b_shares(world: dict) -> None:
    out, cell = world["out"], world["cell"]
    r = prune(PruneRequest(to=out, matrix=world["matrix"], fingerprint=B, confirmed=True))
    assert not r.dry_run and r.removed == 2 and r.bytes_removed == 5002 and r.skipped == 0
    assert files_under(out / "neff") == {"ab/shared.neff", "ab/cd/b1.neff", STATE_FILE}
    assert not (out / "neff/ef").exists()  # left empty: gone
    state = json.loads((out / "neff" / STATE_FILE).read_text())
    rows = set(state["files"]) | {p for rows in state.get("pending", {}).values() for p in rows}
    assert rows == {"ab/shared.neff", "ab/cd/b1.neff"}
    copies = {p.name for p in (out / LOCAL_ENTRIES).glob("*.json")}
    assert copies == {f"{entry_key(cell, B)}.json"}
    # B is still whole, judged store-free, and a second prune has nothing to do
    assert restore_local([cell], world["backend"], B, out, store_url="x") is not None
    again = prune(PruneRequest(to=out, matrix=world["matrix"], fingerprint=B, confirmed=True))
    assert again.pruned == () and again.removed == 0


def test_a_pruned_entrys_cell_is_no_longer_ready(world: dict) -> None:
    """A marker that names a pruned entry goes (before its files); one naming a kept entry
    stays."""
    out, cell = world["out"], world["cell"]
    write_marker(out, cell.id, entry_key(cell, A))
    write_marker(out, "other/cell", entry_key(cell, B))
    assert cell_ready(out, cell.id)
    prune(PruneRequest(to=out, matrix=world["matrix"], fingerprint=B, confirmed=True))
    assert not cell_ready(out, cell.id) and not marker_path(out, cell.id).exists()
    assert cell_ready(out, "other/cell")


def test_a_changed_file_is_left_alone(world: dict) -> None:
    out = world["out"]
    (out / "neff/ef/a2.neff").write_bytes(b"recompiled at run time, other size")
    r = prune(PruneRequest(to=out, matrix=world["matrix"], fingerprint=B, confirmed=True))
    assert r.removed == 1 and r.skipped == 1
    assert (out / "neff/ef/a2.neff").exists()


def test_no_consent_removes_nothing(world: dict) -> None:
    out = world["out"]
    before = files_under(out)
    with pytest.raises(UsageError, match="refusing without consent"):
        prune(PruneRequest(to=out, matrix=world["matrix"], fingerprint=B))
    declined = prune(PruneRequest(to=out, matrix=world["matrix"], fingerprint=B,
                                  confirm=lambda preview: False))
    assert declined.dry_run and files_under(out) == before


def test_a_running_restore_is_never_touched(world: dict) -> None:
    out = world["out"]
    before = files_under(out)
    with lock_destination(str(out), deadline=time.monotonic(), who="restore"):
        with pytest.raises(NeffcacheError, match="a restore is running there"):
            prune(PruneRequest(to=out, matrix=world["matrix"], fingerprint=B, confirmed=True))
    assert files_under(out) == before


def test_a_symlinked_directory_is_not_followed(world: dict, tmp_path: Path) -> None:
    out = world["out"]
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a2.neff").write_bytes(b"a2")  # A's file's name and size, outside DIR
    (out / "neff/ef/a2.neff").unlink()
    (out / "neff/ef").rmdir()
    (out / "neff/ef").symlink_to(outside)
    r = prune(PruneRequest(to=out, matrix=world["matrix"], fingerprint=B, confirmed=True))
    assert (outside / "a2.neff").read_bytes() == b"a2" and r.skipped == 1


def test_not_a_destination(tmp_path: Path) -> None:
    (tmp_path / "matrix.toml").write_text(MATRIX)
    with pytest.raises(UsageError, match="not a restore destination"):
        prune(PruneRequest(to=tmp_path / "nothing", matrix=tmp_path / "matrix.toml",
                           fingerprint=Fingerprint.from_json(A.to_json())))


def test_an_unknown_target_prunes_nothing(world: dict) -> None:
    from neffcache.errors import FingerprintMismatchError
    from neffcache.fingerprint import build_fingerprint

    unknown = build_fingerprint("neuron", {"target": "unknown", "lnc": "2"})
    before = files_under(world["out"])
    with pytest.raises(FingerprintMismatchError):
        prune(PruneRequest(to=world["out"], matrix=world["matrix"], fingerprint=unknown,
                           confirmed=True))
    assert files_under(world["out"]) == before
