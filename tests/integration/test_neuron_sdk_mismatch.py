"""Compile-only pre-compilation on a CPU-only CI host, then an instance with another
neuronx-cc: restore refuses (exit 5) and `fingerprint --explain` names the field and both
versions. Package versions come from the double's FAKE dist metadata; workers use the
torch_neuronx TEST DOUBLE."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from neffcache.cli import run
from tests.support.neuron_double import records, use_double, write_matrix
from tests.support.torch_neuronx_double import write_fake_distributions

COMPILE_CELL = "klein/compile/64x64/b1/tp1"
EAGER_CELL = "klein/eager/64x64/b1/tp1"


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    capsys.readouterr()
    code = run(list(args))
    out = capsys.readouterr()
    doc = json.loads(out.out) if "--json" in args and out.out.strip() else out.out
    return code, doc, out.err


def _use_sdk(monkeypatch: pytest.MonkeyPatch, path: Path, original: list[str]) -> None:
    """This process sees one fake Neuron SDK (importlib.metadata reads sys.path)."""
    monkeypatch.setattr(sys, "path", [str(path), *original])
    importlib.invalidate_caches()


def test_compile_only_entry_from_ci_restores_only_with_the_same_compiler(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    original = list(sys.path)
    sdk_ci = write_fake_distributions(tmp_path / "sdk-ci", {
        "torch-neuronx": "2.9.0+double", "neuronx-cc": "2.21.33+double"})
    sdk_new = write_fake_distributions(tmp_path / "sdk-new", {
        "torch-neuronx": "2.9.0+double", "neuronx-cc": "2.22.10+double"})
    record = tmp_path / "record.jsonl"
    use_double(monkeypatch, record)
    matrix = write_matrix(tmp_path, [{"name": "klein", "modes": ["compile", "eager"]}])

    # --- the CI host: no Trainium, so no target unless told -------------------------------
    _use_sdk(monkeypatch, sdk_ci, original)
    monkeypatch.setenv("NEFFCACHE_INSTANCE_TYPE", "c7i.4xlarge")
    code, _, err = _cli(capsys, "precompile", str(matrix))
    assert code == 5 and "'target' is unknown" in err and "c7i.4xlarge" in err
    code, _, err = _cli(capsys, "precompile", str(matrix), "--compile-only")
    assert code == 2 and "--compile-only needs --target" in err
    code, _, err = _cli(capsys, "precompile", str(matrix), "--cells", EAGER_CELL,
                        "--compile-only", "--target", "trn2")
    assert code == 2 and "only exist once ops run on a" in err
    assert records(record) == []  # nothing was started for any of these

    code, doc, _ = _cli(capsys, "precompile", str(matrix), "--compile-only", "--target", "trn2",
                        "--json")
    assert code == 0, doc
    by_id = {c["cell_id"]: c for c in doc["cells"]}
    assert by_id[COMPILE_CELL]["status"] == "published"
    assert by_id[EAGER_CELL]["status"] == "refused"
    assert "NEFFs only exist once ops run on a" in by_id[EAGER_CELL]["error"]
    assert doc["counts"]["refused"] == 1 and doc["counts"]["failed"] == 0
    imports = records(record, "import")
    assert len(imports) == 1  # only the compile cell ran, in one worker
    assert imports[0]["env"]["TORCH_NEURONX_COMPILE_ONLY"] == "1"
    assert imports[0]["env"]["NEURON_PLATFORM_TARGET_OVERRIDE"] == "trn2"
    compiles = records(record, "compile")
    assert compiles and all(c["compile_only"] and c["target"] == "trn2" for c in compiles)
    # the parts left eager (the VAE here) leave no NEFF without a device
    assert len(records(record, "eager-op-without-device")) == 2
    entry_key = by_id[COMPILE_CELL]["entry_key"]

    # --- a trn2 instance with a newer compiler: refused, and explained ---------------------
    monkeypatch.setenv("NEFFCACHE_INSTANCE_TYPE", "trn2.48xlarge")
    _use_sdk(monkeypatch, sdk_new, original)
    code, doc, err = _cli(capsys, "restore", str(matrix), "--cells", COMPILE_CELL,
                          "--to", str(tmp_path / "instance-a"), "--json")
    assert code == 5, err
    assert doc["cells_restored"] == [] and list(doc["cells_elsewhere"]) == [COMPILE_CELL]
    assert f"Hint: neffcache fingerprint --explain {entry_key}" in err
    assert not list((tmp_path / "instance-a").rglob("*.neff"))

    code, doc, _ = _cli(capsys, "fingerprint", "--explain", entry_key[:12], "--json")
    assert code == 0 and doc["match"] is False
    assert [(d["field"], d["here"], d["there"]) for d in doc["differences"]] == \
        [("version.neuronx-cc", "2.22.10+double", "2.21.33+double")]
    assert "compiler" in doc["differences"][0]["note"]
    code, text, _ = _cli(capsys, "fingerprint", "--explain", entry_key)
    assert code == 0
    assert "1 field(s) differ, so this entry would not be used here" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("version.neuronx-cc"))
    assert "2.22.10+double" in line and "2.21.33+double" in line
    assert line.index("2.22.10+double") < line.index("2.21.33+double")  # this host, entry

    # --- the same instance with CI's compiler: the compile-only entry is used -------------
    _use_sdk(monkeypatch, sdk_ci, original)
    code, doc, err = _cli(capsys, "restore", str(matrix), "--cells", COMPILE_CELL,
                          "--to", str(tmp_path / "instance-b"), "--json")
    assert code == 0, err
    assert doc["cells_restored"] == [COMPILE_CELL]
    assert len(list((tmp_path / "instance-b" / "neff").rglob("*.neff"))) == \
        len(compiles) + 1  # the graphs and the kernel
