"""Progressive readiness: cells are planned and fetched in priority order, each announced (its
marker, the callback) the moment its last file is in place, never before; ``cell_ready`` reads
the marker and the entry's copy only; the restore hands its cache environment over even when it
raises."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

import neffcache
from neffcache.backends import NEURON
from neffcache.errors import UsageError
from neffcache.fingerprint import build_fingerprint
from neffcache.manifest import FileRecord, Manifest, decode_manifest
from neffcache.matrix import Cell
from neffcache.precompile.publish import publish_entry
from neffcache.restore.plan import BlobGet, plan_restore, unit_groups
from neffcache.restore.ready import Announcer, cell_ready, marker_path
from neffcache.restore.run import restore_cells
from neffcache.restore.session import prioritized
from neffcache.store import blob_key, manifest_key, pack_key
from neffcache.store.local import LocalStore
from tests.support.slow_store import SlowStore
from tests.support.synthetic import make_neff_cache

FP = build_fingerprint("neuron", {"target": "trn2"})
DIRS = {"neff": "/t/neff"}


def cell(size: int) -> Cell:
    return Cell("p", "diffusers:P", "m", "main", "bfloat16", "compile", ("transformer",),
                size, size, 1, 1)


def entry(size: int, *files: FileRecord) -> Manifest:
    return Manifest(cell=cell(size), fingerprint=FP, files=files)


def f(path: str, sha: str, size: int = 10) -> FileRecord:
    return FileRecord("neff", path, size, sha * 64, 0o644)


def test_the_plan_goes_cell_by_cell_and_a_shared_file_counts_for_the_first() -> None:
    a = entry(64, f("a1", "1"), f("shared", "5"))
    b = entry(128, f("b1", "2"), f("shared", "5"), f("b2", "3"))
    c = entry(192, f("c1", "4"))
    plan = plan_restore([c, b, a], DIRS, {("neff", "b2"): _present("3")})  # priority: c, b, a
    assert plan.waiting == (1, 2, 2)  # b2 is in place; `shared` is waited for by b and a
    order = [g.targets[0].path for u in plan.units for g in unit_groups(u)]
    assert order == ["c1", "b1", "shared", "a1"]  # `shared` is fetched for b, the first
    shared = next(g for g in plan.fetch if g.targets[0].path == "shared")
    assert shared.owners == ((1, 2),)
    assert all(isinstance(u, BlobGet) for u in plan.units)


def test_a_one_entry_plan_waits_for_each_file_to_fetch() -> None:
    a = entry(64, f("x", "1"), f("y", "1"), f("z", "2"))  # x and y: one blob, two paths
    plan = plan_restore([a], DIRS, {})
    assert plan.waiting == (3,)
    assert [g.owners for g in plan.fetch] == [((0,), (0,)), ((0,),)]


def _present(sha: str) -> object:
    from neffcache.restore.plan import PresentFile

    return PresentFile(10, sha * 64, 0o644)


def test_priority_globs_put_their_cells_first_in_their_order() -> None:
    cells = (cell(64), cell(128), cell(192), cell(256))
    got = prioritized(cells, ["*/256x256/*", "*/128x128/*"])
    assert [c.height for c in got] == [256, 128, 64, 192]
    assert prioritized(cells, []) == cells
    with pytest.raises(UsageError, match="--first .*matches no"):
        prioritized(cells, ["*/999x999/*"])


def test_cell_ready_reads_the_marker_and_the_entry_copy_only(tmp_path: Path) -> None:
    cid, key = "p/compile/64x64/b1/tp1", "ab" * 32
    (tmp_path / ".neffcache-entries").mkdir()
    assert not cell_ready(tmp_path, cid)
    Announcer(tmp_path, time.monotonic()).ready(cid, key)
    assert marker_path(tmp_path, cid).parent.name == "ready"
    assert json.loads(marker_path(tmp_path, cid).read_text()) == {"cell": cid, "entry_key": key}
    assert not cell_ready(tmp_path, cid)  # no copy of its manifest: evicted, or never restored
    (tmp_path / ".neffcache-entries" / f"{key}.json").write_text("{}")
    assert cell_ready(tmp_path, cid) and neffcache.cell_ready(str(tmp_path), cid)
    assert not cell_ready(tmp_path, "p/compile/128x128/b1/tp1")
    marker_path(tmp_path, cid).write_text(json.dumps({"cell": "other", "entry_key": key}))
    assert not cell_ready(tmp_path, cid)  # a marker names its own cell


def _publish(store: LocalStore, tmp_path: Path, sizes: list[int]) -> dict[str, Manifest]:
    out = {}
    for i, size in enumerate(sizes):
        cache = make_neff_cache(tmp_path / f"src{size}", seed=i, count=12, large=1,
                                large_size=(200 << 10, 300 << 10), duplicate_ratio=0,
                                droppings=False)
        r = publish_entry(store, cell(size), FP, NEURON, {"neff": cache.root})
        out[cell(size).id] = decode_manifest(store.read(manifest_key(r.manifest.entry_key)))
    return out


def _keys_of(m: Manifest) -> set[str]:
    """The store keys that hold an entry's bytes (its blobs and packs)."""
    return {blob_key(fr.sha256) for fr in m.files} | {pack_key(p.sha256) for p in m.packs}


def test_cells_are_announced_in_the_requested_order_before_the_last_is_fetched(
        tmp_path: Path) -> None:
    sizes = [64, 128, 192, 256]
    manifests = _publish(LocalStore(tmp_path / "store"), tmp_path, sizes)
    store = SlowStore(LocalStore(tmp_path / "store"), read_delay=0.02)
    order = [cell(256), cell(64), cell(128), cell(192)]  # `--first '*/256x256/*'`
    seen: list[tuple[str, list[str]]] = []  # (cell, the keys read when it was announced)

    def on_ready(cid: str) -> None:
        seen.append((cid, list(store.reads)))

    out = tmp_path / "out"
    r = restore_cells(store, order, NEURON, FP, out, workers=1,
                      announcer=Announcer(out, time.monotonic(), on_ready))
    assert r.error() is None
    assert [c for c, _ in seen] == [c.id for c in order]
    last = _keys_of(manifests[order[-1].id])
    first_reads = set(seen[0][1])
    assert first_reads & _keys_of(manifests[order[0].id])  # its own bytes were read ...
    assert first_reads.isdisjoint(last)  # ... and none of the last's
    assert all(cell_ready(out, c.id) for c in order)


def test_a_cell_to_change_loses_its_marker_before_anything_is_installed(
        tmp_path: Path) -> None:
    """A restore that will change a cell removes its marker first: a run stopped by its
    deadline before that cell is done leaves it unannounced (and the files it left behind
    are whatever is in place, never served as ready)."""
    manifests = _publish(LocalStore(tmp_path / "store"), tmp_path, [64, 128])
    store = LocalStore(tmp_path / "store")
    out = tmp_path / "out"
    cells = [cell(64), cell(128)]
    assert restore_cells(store, cells, NEURON, FP, out,
                         announcer=Announcer(out, time.monotonic())).error() is None
    victim = manifests[cell(128).id].files[0]
    (out / "neff" / victim.path).write_bytes(b"damaged")
    slow = SlowStore(store, read_delay=10)
    r = restore_cells(slow, cells, NEURON, FP, out, deadline=time.monotonic() + 1.0,
                      announcer=Announcer(out, time.monotonic()))
    assert r.deadline_hit
    assert cell_ready(out, cell(64).id)  # in place all along: announced again
    assert not cell_ready(out, cell(128).id)


MATRIX = """\
backend = "neuron"
name = "down"
[[pipelines]]
name = "tiny"
class = "diffusers:Flux2KleinPipeline"
model = "/models/tiny"
mode = "compile"
shapes = ["64x64"]
"""


def test_a_restore_that_raises_hands_over_the_cache_environment(tmp_path: Path) -> None:
    """The README's service start with the store down (a closed loopback port): restore
    raises, and the error carries the variables that point the runtime at the cache."""
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(MATRIX)
    seen: dict[str, str] = {}
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "x",
           "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with pytest.raises(neffcache.NeffcacheError) as caught:
            neffcache.restore(neffcache.RestoreRequest(
                matrix=matrix, to=tmp_path / "cache", store="s3://bucket/neff", deadline=8,
                fingerprint=FP, report_to="none", on_environment=seen.update))
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert caught.value.environment == seen
    assert caught.value.environment["TORCH_NEURONX_NEFF_CACHE_DIR"] == str(tmp_path / "cache/neff")
