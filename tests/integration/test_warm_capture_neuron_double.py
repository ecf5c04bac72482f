"""After boot, with the torch_neuronx TEST DOUBLE: `warm` finds the cell whose entry was
missing (it compiled: exit 3 with --strict), `capture` back-fills what it compiled (never the
double's stray .tmp files or locks) as that cell's entry, and a fresh instance restoring the
matrix is then warm for every cell."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from neffcache.cli import run
from tests.support.neuron_double import records, use_double, write_matrix

SMALL, LARGE = "klein/compile/64x64/b1/tp1", "klein/compile/96x96/b1/tp1"
WIDE, HUGE = "klein/compile/64x128/b1/tp1", "klein/compile/128x128/b1/tp1"


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    capsys.readouterr()
    code = run(list(args))
    out = capsys.readouterr()
    doc = json.loads(out.out) if "--json" in args and out.out.strip() else out.out
    return code, doc, out.err


def test_warm_reports_the_miss_and_capture_backfills_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, neffcache_home: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    record = tmp_path / "record.jsonl"
    use_double(monkeypatch, record)
    monkeypatch.setenv("NEFFCACHE_INSTANCE_TYPE", "trn2.48xlarge")
    matrix = write_matrix(tmp_path, [{"name": "klein", "shapes": ["64x64", "96x96"]}])
    wider = write_matrix(tmp_path, [{"name": "klein", "shapes": [
        "64x64", "96x96", "64x128", "128x128"]}], "wider.toml")
    code, _, err = _cli(capsys, "precompile", str(matrix), "--cells", SMALL)
    assert code == 0, err

    # The instance: the 96x96 cell has no entry yet.
    cache = tmp_path / "instance" / "cache"
    code, _, _ = _cli(capsys, "restore", str(matrix), "--to", str(cache))
    assert code == 3
    code, doc, err = _cli(capsys, "warm", str(matrix), "--cache", str(cache), "--strict",
                          "--json")
    assert code == 3, err
    assert "compiled against" in err and "Hint: neffcache capture" in err
    status = {c["cell_id"]: c["status"] for c in doc["cells"]}
    assert status == {SMALL: "hit", LARGE: "compiled"}
    assert doc["counts"] == {"hit": 1, "compiled": 1, "failed": 0}
    reasons = {c["cell_id"]: c["compiled"]["reasons"] for c in doc["cells"]}
    assert reasons[SMALL] == [] and "new file(s)" in reasons[LARGE][0]
    imports = records(record, "import")[-2:]  # the two warm workers used the restored dir
    assert {i["env"]["TORCH_NEURONX_NEFF_CACHE_DIR"] for i in imports} == {str(cache / "neff")}
    # without --strict a miss is reported, not an error
    code, _, _ = _cli(capsys, "warm", str(matrix), "--cache", str(cache), "--cells", SMALL)
    assert code == 0

    # The double left a stray .tmp per compiled graph and a lock per key; none is captured.
    stray = list(cache.rglob("*.tmp"))
    assert stray and list((cache / "neff-locks").glob("*.lock"))
    code, doc, err = _cli(capsys, "capture", str(matrix), "--cache", str(cache), "--dry-run",
                          "--json")
    assert code == 0 and doc["action"] == "publish" and doc["cell_id"] == LARGE
    assert "created" not in doc  # dry run
    code, doc, err = _cli(capsys, "capture", str(matrix), "--cache", str(cache), "--json")
    assert code == 0, err
    assert (doc["action"], doc["cell_id"], doc["created"]) == ("publish", LARGE, True)
    assert doc["indexed"] is True
    from neffcache.manifest import decode_manifest
    from neffcache.store import open_store

    store = open_store(str(neffcache_home / "store"))
    backfilled = decode_manifest(store.read(f"manifests/{doc['entry_key']}.json"))
    paths = [f"{f.root}/{f.path}" for f in backfilled.files]
    assert len(paths) == doc["new_files"] > 0
    assert not any(p.endswith((".tmp", ".lock")) or "/." in p for p in paths)
    assert dict(backfilled.producer)["tool"] == "neffcache capture"
    # A second capture finds nothing new: every file is in an entry now.
    code, doc, _ = _cli(capsys, "capture", str(matrix), "--cache", str(cache), "--json")
    assert code == 0 and doc["action"] == "nothing"
    # Two cells without an entry: the files cannot be told apart, so --cell is required.
    (cache / "neff" / "zz").mkdir()
    (cache / "neff" / "zz" / "runtime.neff").write_bytes(b"NEFF runtime")
    code, _, err = _cli(capsys, "capture", str(wider), "--cache", str(cache))
    assert code == 2 and "2 cells have no entry" in err and "--cell" in err
    code, doc, _ = _cli(capsys, "capture", str(wider), "--cache", str(cache), "--cell", SMALL,
                        "--json")
    assert code == 0 and doc["action"] == "exists"  # entries are immutable: nothing published
    code, doc, _ = _cli(capsys, "capture", str(wider), "--cache", str(cache), "--cell", WIDE,
                        "--json")
    assert (code, doc["action"], doc["new_files"], doc["created"]) == (0, "publish", 1, True)

    # A fresh instance restores the whole matrix, back-fill included: nothing compiles.
    fresh = tmp_path / "fresh" / "cache"
    code, _, _ = _cli(capsys, "restore", str(matrix), "--to", str(fresh))
    assert code == 0
    code, doc, err = _cli(capsys, "warm", str(matrix), "--cache", str(fresh), "--cells", LARGE,
                          "--strict", "--json")
    assert code == 0, err
    assert doc["counts"] == {"hit": 1, "compiled": 0, "failed": 0}
    from neffcache.index import open_index

    with open_index(f"sqlite:///{neffcache_home / 'index.db'}", auto_upgrade=False) as ix:
        verified = {e.cell_id: e.verified_status for e in ix.entries()}
    assert verified[LARGE] == "hit" and verified[SMALL] == "hit"
