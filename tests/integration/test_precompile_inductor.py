"""Real compiles: the tiny Flux2Klein precompiled with inductor (the session's demo run), restored
into a new directory, and a fresh process compiles nothing (new files, compile counters, C++
compiles) — while the same check does see a compile when the precompiled headers are missing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from neffcache.backends import get_backend
from neffcache.manifest import decode_manifest
from neffcache.matrix_io import load_matrix
from neffcache.precompile.warm import warm_restored
from neffcache.store import open_store
from tests.support.tiny_home import ENV, run_cli, session_demo

pytest.importorskip("diffusers")
pytestmark = pytest.mark.compile

CELL = "tiny-flux2-klein/compile/64x64/b1/tp1"


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The session's demo run (two cells cold-compiled and published) and its matrix."""
    home, demo = session_demo(tmp_path_factory)
    assert demo.code == 0, demo.stderr[-3000:]
    return {"home": home, "matrix": home / "demo" / "matrix.toml", "demo": demo.doc}


def _cli(setup: dict, *args: str) -> Any:
    return run_cli(setup["home"], *args, "--json")


def _manifest_keys(setup: dict) -> list[str]:
    return sorted(open_store(str(setup["home"] / "store")).list("manifests/"))


def test_precompile_publishes_inductor_cache_and_precompiled_headers(setup: dict) -> None:
    cell = next(c for c in setup["demo"]["precompile"]["cells"] if c["cell_id"] == CELL)
    assert cell["status"] == "published" and cell["files"] > 0
    store = open_store(str(setup["home"] / "store"))
    (manifest,) = [m for m in (decode_manifest(store.read(k)) for k in _manifest_keys(setup))
                   if m.cell.id == CELL]
    assert {f.root for f in manifest.files} == {"inductor", "pch"}
    assert any(f.path.endswith(".h.gch") for f in manifest.files if f.root == "pch")
    assert any(f.path.endswith(".so") for f in manifest.files if f.root == "inductor")
    assert not [f for f in manifest.files if f.path.endswith((".lock", ".tmp"))]
    assert manifest.compile_seconds == cell["seconds"]


def _restore(setup: dict, target: Path) -> dict[str, Any]:
    r = _cli(setup, "restore", str(setup["matrix"]), "--to", str(target), "--cells", CELL)
    assert r.code == 0, r.stderr
    return r.doc


def _warm(setup: dict, target: Path, workdir: Path) -> Any:
    matrix = load_matrix(setup["matrix"])
    (cell,) = [c for c in matrix.cells if c.id == CELL]
    return warm_restored(matrix, cell, get_backend("inductor"), target, workdir,
                         environ={**os.environ, **ENV}, timeout=600)


def test_restore_cli_then_a_fresh_process_compiles_nothing(setup: dict, tmp_path: Path) -> None:
    target = tmp_path / "instance"
    doc = _restore(setup, target)
    assert doc["cells_restored"] == [CELL]
    assert doc["environment"]["TORCHINDUCTOR_CACHE_DIR"] == str(target / "inductor")
    outcome = _warm(setup, target, tmp_path / "run")
    assert outcome.ok, outcome.log_tail
    verdict = outcome.verdict()
    assert not verdict.compiled, verdict.reasons
    assert verdict.new_files == 0 and verdict.cpp_compiles == 0
    assert dict(verdict.hits)["inductor.fxgraph_cache_hit"] >= 1
    assert outcome.result["activity"]["cpp_probe"] is True  # the C++ probe was in place


def test_the_check_sees_the_compile_when_precompiled_headers_are_missing(
        setup: dict, tmp_path: Path) -> None:
    target = tmp_path / "instance"
    _restore(setup, target)
    shutil.rmtree(target / "pch")
    outcome = _warm(setup, target, tmp_path / "run")
    assert outcome.ok, outcome.log_tail
    verdict = outcome.verdict()
    assert verdict.compiled
    assert any("C++ compile" in r and ".gch" in r for r in verdict.reasons), verdict.reasons
    assert verdict.new_files >= 1


def test_rerun_does_nothing(setup: dict) -> None:
    before = _manifest_keys(setup)
    r = _cli(setup, "precompile", str(setup["matrix"]))
    assert r.code == 0, r.stderr
    assert r.doc["counts"] == {"published": 0, "exists": 0, "skipped": 2, "failed": 0,
                               "refused": 0}
    assert r.doc["run_id"] is None
    assert _manifest_keys(setup) == before


def test_a_broken_pipeline_class_is_a_failed_cell_and_no_entry(setup: dict,
                                                                tmp_path: Path) -> None:
    model = setup["home"] / "demo" / "tiny-flux2-klein"
    text = (setup["matrix"].read_text()
            .replace("diffusers:Flux2KleinPipeline", "diffusers:NoSuchPipeline")
            .replace('"./tiny-flux2-klein"', f'"{model}"')
            .replace('name = "neffcache-demo"', 'name = "broken-demo"'))  # a matrix of its own
    assert 'name = "broken-demo"' in text
    broken = tmp_path / "broken-matrix.toml"
    broken.write_text(text)
    before = _manifest_keys(setup)
    r = _cli(setup, "precompile", str(broken), "--cells", "*64x64*")
    assert r.code == 1
    assert "1 of 1 cells failed" in r.stderr
    (cell,) = r.doc["cells"]
    assert cell["status"] == "failed" and cell["exit_status"] == 1
    assert "NoSuchPipeline" in cell["error"] and "Traceback" in cell["log_tail"]
    assert _manifest_keys(setup) == before
    (row,) = _cli(setup, "coverage", str(broken), "--cells", "*64x64*").doc["rows"]
    assert row["status"] == "failed" and "NoSuchPipeline" in row["log_tail"]
