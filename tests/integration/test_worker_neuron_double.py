"""The worker and `neffcache precompile` on the neuron backend, with the torch_neuronx TEST DOUBLE.

The double (tests/support/torch_neuronx_double) is on PYTHONPATH for worker subprocesses
only. It reads its cache variables at import, as TorchNeuron does, records what it saw, and
writes NEFFs in TorchNeuron's layout plus a lock file and a stray temp file. These tests show
the variables are set before the import and that only NEFF/HLO files are captured.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from neffcache.cli import run
from neffcache.manifest import decode_manifest
from neffcache.store import open_store
from tests.support.torch_neuronx_double import PATH as DOUBLE_PATH
from tests.support.torch_neuronx_double import PIPELINE_CLASS, RECORD_VAR

NEFF_PATH = re.compile(r"^([0-9a-f]{2})/([0-9a-f]{2})/([0-9a-f]{32})\.neff$")
KERNEL_PATH = re.compile(r"^([0-9a-f]{64})/([0-9a-f]{64})\.neff$")


def _matrix(tmp: Path, pipelines: list[dict[str, Any]]) -> Path:
    lines = ['name = "double"', 'backend = "neuron"', ""]
    for p in pipelines:
        model = tmp / p["name"]
        model.mkdir()
        (model / "config.json").write_text(json.dumps(p.get("config", {})))
        lines += ["[[pipelines]]", f'name = "{p["name"]}"',
                  f'class = "{p.get("class", PIPELINE_CLASS)}"', f'model = "./{p["name"]}"',
                  f'modes = {json.dumps(p.get("modes", ["compile"]))}',
                  f'shapes = {json.dumps(p.get("shapes", ["64x64"]))}', ""]
    path = tmp / "matrix.toml"
    path.write_text("\n".join(lines))
    return path


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def double_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, neffcache_home: Path) -> Path:
    """PYTHONPATH (inherited by workers only) gets the double; returns the record file."""
    record = tmp_path / "double-record.jsonl"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(DOUBLE_PATH)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    monkeypatch.setenv(RECORD_VAR, str(record))
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    for var in ("TORCH_NEURONX_NEFF_CACHE_DIR", "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR",
                "TORCH_NEURONX_HLO_CACHE_DIR"):
        monkeypatch.delenv(var, raising=False)
    return record


def _precompile(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = run(["precompile", *args, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def _manifests(home: Path) -> list[Any]:
    store = open_store(str(home / "store"))
    return [decode_manifest(store.read(k)) for k in store.list("manifests/")]


def test_env_is_set_before_import_and_only_neffs_are_captured(
        tmp_path: Path, double_env: Path, neffcache_home: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    matrix = _matrix(tmp_path, [{"name": "klein", "modes": ["compile", "regional"]}])
    code, doc = _precompile(capsys, str(matrix), "--verify")
    assert code == 0, doc
    assert [c["status"] for c in doc["cells"]] == ["published", "published"]
    # Verify: each entry restored into a new directory, warmed in a fresh process: no NEFF
    # was compiled again (the double found every key) and no file appeared.
    assert [c["verify"]["status"] for c in doc["cells"]] == ["hit", "hit"]
    from neffcache.index import open_index

    with open_index(f"sqlite:///{neffcache_home / 'index.db'}", auto_upgrade=False) as ix:
        assert [e.verified_status for e in ix.entries()] == ["hit", "hit"]

    events = _records(double_env)
    imports = [e for e in events if e["event"] == "import"]
    assert len(imports) == 4  # two warm-ups + two verifications, one process each
    for e in imports:
        env = e["env"]
        assert env["TORCH_NEURONX_NEFF_CACHE_DIR"].endswith("/neff")
        assert env["TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR"].endswith("/neff-locks")
        assert env["TORCH_NEURONX_HLO_CACHE_DIR"].endswith("/hlo")
        assert Path(env["TORCH_NEURONX_NEFF_CACHE_DIR"]).parent == \
            Path(env["TORCH_NEURONX_HLO_CACHE_DIR"]).parent
    calls = [(e["method"], e["kwargs"]) for e in events if e["event"] == "compile-call"]
    args = {"backend": "neuron", "fullgraph": True, "dynamic": False}
    assert ("compile", args) in calls and ("compile_repeated_blocks", args) in calls
    compiles = [e for e in events if e["event"] == "compile"]
    # per cell: the compiled transformer + 2 eager vae ops; the verifications compiled none
    assert len(compiles) == 6
    assert len([e for e in events if e["event"] == "hit"]) == 6

    manifests = _manifests(neffcache_home)
    assert len(manifests) == 2
    for m in manifests:
        roots = {f.root for f in m.files}
        assert roots == {"neff", "hlo"}
        neffs = [f.path for f in m.files if f.root == "neff"]
        assert sum(bool(NEFF_PATH.match(p)) for p in neffs) == 3
        assert sum(bool(KERNEL_PATH.match(p)) for p in neffs) == 1
        assert all(NEFF_PATH.match(p) or KERNEL_PATH.match(p) for p in neffs)
        for f in m.files:  # locks live in the lock dir (scratch) and temp files are dropped
            assert not f.path.endswith((".tmp", ".lock")) and "lock" not in f.path
        for p in neffs:
            m2 = NEFF_PATH.match(p)
            if m2:
                assert m2.group(3)[:2] == m2.group(1) and m2.group(3)[2:4] == m2.group(2)
    # The double did leave temp files and locks behind in the worker's roots.
    assert all(e["stray_tmp"].endswith(".tmp") for e in compiles)
    assert all("/neff-locks/" in e["lock"] for e in compiles)


def test_rerun_does_nothing(tmp_path: Path, double_env: Path, neffcache_home: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    matrix = _matrix(tmp_path, [{"name": "klein", "shapes": ["64x64", "96x128"]}])
    code, first = _precompile(capsys, str(matrix))
    assert code == 0 and first["counts"]["published"] == 2
    imports = len([e for e in _records(double_env) if e["event"] == "import"])
    code, again = _precompile(capsys, str(matrix))
    assert code == 0
    assert again["counts"] == {"published": 0, "exists": 0, "skipped": 2, "failed": 0,
                               "refused": 0}
    assert again["run_id"] is None  # no run started: nothing to do
    assert len([e for e in _records(double_env) if e["event"] == "import"]) == imports
    # A new, empty index over the same store: still nothing to warm, and the index learns
    # the entries from the store, so coverage says ready.
    (neffcache_home / "index.db").unlink()
    code, fresh = _precompile(capsys, str(matrix))
    assert code == 0 and fresh["counts"]["skipped"] == 2
    assert run(["coverage", str(matrix), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["status"] for r in rows] == ["ready", "ready"]
    # --force warms again; the entries are immutable, so they stand unchanged
    code, forced = _precompile(capsys, str(matrix), "--force", "--cells", "*64x64*")
    assert code == 0 and forced["counts"]["exists"] == 1
    # precompile registered the declared matrix, so coverage is known without the file
    assert run(["matrix", "ls", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    matrices = listed if isinstance(listed, list) else listed["matrices"]
    assert any(m["cells"] == 2 for m in matrices)


def test_failed_crashed_and_timed_out_cells_are_recorded_never_published(
        tmp_path: Path, double_env: Path, neffcache_home: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    matrix = _matrix(tmp_path, [
        {"name": "broken", "class": "no_such_module_anywhere:Pipeline"},
        {"name": "raises", "config": {"fail": "out of device memory (double)"}},
        {"name": "crashes", "config": {"crash": True}},
        {"name": "hangs", "config": {"sleep": 600}},
        {"name": "fine"},
    ])
    code, doc = _precompile(capsys, str(matrix), "--timeout", "25", "--workers", "2")
    assert code == 1
    by_name = {c["cell_id"].split("/")[0]: c for c in doc["cells"]}
    assert by_name["fine"]["status"] == "published"  # the others did not stop it
    for name in ("broken", "raises", "crashes", "hangs"):
        assert by_name[name]["status"] == "failed", name
    assert by_name["broken"]["exit_status"] == 1
    assert "no_such_module_anywhere" in by_name["broken"]["error"]
    assert "out of device memory (double)" in by_name["raises"]["log_tail"]
    assert by_name["crashes"]["exit_status"] not in (0, None)
    assert by_name["hangs"]["exit_status"] == 124
    assert "timed out" in by_name["hangs"]["error"]

    # Nothing but the good cell was published (the crashed one had written NEFFs already).
    assert [m.cell.pipeline for m in _manifests(neffcache_home)] == ["fine"]
    # The index knows each failure with its exit status and log tail.
    capsys.readouterr()
    assert run(["coverage", str(matrix), "--json"]) == 0
    rows = {r["cell_id"].split("/")[0]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["fine"]["status"] == "ready"
    assert rows["hangs"]["status"] == "failed" and rows["hangs"]["exit_status"] == 124
    assert "timed out" in rows["hangs"]["log_tail"]
    assert "Traceback" in rows["raises"]["log_tail"]
    assert "no_such_module_anywhere" in rows["broken"]["log_tail"]
