"""A host whose neuron target is unknown neither publishes nor restores (exit 5), and says how
to fix it; an entry is never published under an 'unknown' target."""

from __future__ import annotations

from pathlib import Path

import pytest

from neffcache.cli import run

MATRIX = """
backend = "neuron"
[[pipelines]]
name = "klein"
class = "diffusers:Flux2KleinPipeline"
model = "black-forest-labs/FLUX.2-klein-4B"
mode = "compile"
shapes = ["1024x1024"]
"""
CELL = "klein/compile/1024x1024/b1/tp1"


@pytest.fixture
def unknown_target(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE", raising=False)
    monkeypatch.setenv("NEFFCACHE_INSTANCE_TYPE", "m7i.2xlarge")  # not a Trainium instance
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(MATRIX)
    neff = tmp_path / "neff" / "ab" / "cd"
    neff.mkdir(parents=True)
    (neff / ("abcd" + "1" * 28 + ".neff")).write_bytes(b"x" * 100)
    return matrix


def test_push_refuses_an_unknown_target(unknown_target: Path, tmp_path: Path,
                                        neffcache_home: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    code = run(["push", "--matrix", str(unknown_target), "--cell", CELL,
                "--root", f"neff={tmp_path / 'neff'}"])
    err = capsys.readouterr().err
    assert code == 5, err
    assert "target" in err and "NEURON_PLATFORM_TARGET_OVERRIDE" in err
    assert not list((neffcache_home / "store").glob("manifests/*.json"))


def test_restore_refuses_an_unknown_target_but_still_prints_the_env(
        unknown_target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = run(["restore", str(unknown_target), "--to", str(tmp_path / "cache"), "--print-env"])
    out, err = capsys.readouterr()
    assert code == 5, err
    assert "target" in err
    # the boot hook still gets a cache dir for the service to compile into just in time
    assert f"TORCH_NEURONX_NEFF_CACHE_DIR={tmp_path / 'cache' / 'neff'}" in out
