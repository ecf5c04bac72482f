"""A tensor-parallel cell (tp=2) warmed by two ranks under torchrun on CPU, with the
torch_neuronx TEST DOUBLE (its "neuron" process group is gloo underneath): both ranks share
one cache dir and lock dir, each graph is compiled once, and the cell yields one entry."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from neffcache.cli import run
from neffcache.manifest import decode_manifest
from neffcache.store import open_store
from tests.support.neuron_double import records, use_double, write_matrix

CELL = "klein/compile/64x64/b1/tp2"


def test_two_ranks_share_one_cache_and_compile_each_graph_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, neffcache_home: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    record = tmp_path / "record.jsonl"
    use_double(monkeypatch, record)
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    matrix = write_matrix(tmp_path, [{"name": "klein", "tp": [2]}])
    capsys.readouterr()
    code = run(["precompile", str(matrix), "--json", "--timeout", "120"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc
    assert [(c["cell_id"], c["status"]) for c in doc["cells"]] == [(CELL, "published")]

    imports = records(record, "import")
    assert sorted(i["env"]["RANK"] for i in imports) == ["0", "1"]
    assert {i["env"]["WORLD_SIZE"] for i in imports} == {"2"}
    # one cache dir and one lock dir for both ranks
    assert len({i["env"]["TORCH_NEURONX_NEFF_CACHE_DIR"] for i in imports}) == 1
    assert len({i["env"]["TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR"] for i in imports}) == 1

    loads = records(record, "transformer-from_pretrained")
    assert sorted(x["rank"] for x in loads) == ["0", "1"]
    for x in loads:  # diffusers' own TensorParallelConfig, on a 1-D "tp" mesh over neuron
        assert x["parallel_config"] == "TensorParallelConfig"
        assert x["parallel_config_module"].startswith("diffusers.")
        assert (x["mesh_device"], x["mesh_size"], x["mesh_dims"]) == ("neuron", 2, ["tp"])
        assert x["subfolder"] == "transformer"
    assert all(p["transformer_given"] for p in records(record, "from_pretrained"))

    compiled = Counter(c["key"] for c in records(record, "compile"))
    hits = Counter(h["key"] for h in records(record, "hit"))
    assert compiled and set(compiled.values()) == {1}  # every graph compiled exactly once
    assert set(hits) == set(compiled)  # ...and the other rank found it in the shared cache
    assert {c["rank"] for c in records(record, "compile")} <= {"0", "1"}

    store = open_store(str(neffcache_home / "store"))
    manifests = [decode_manifest(store.read(k)) for k in store.list("manifests/")]
    assert [m.cell.id for m in manifests] == [CELL]  # one entry for the cell
    neffs = [f.path for f in manifests[0].files if f.root == "neff"]
    assert len(neffs) == len(compiled) + 1  # the graphs and the kernel
    assert not any(p.endswith((".tmp", ".lock")) for p in neffs)
