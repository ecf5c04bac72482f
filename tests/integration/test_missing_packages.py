"""A backend whose interpreter lacks what it needs (torch; torch-neuronx for neuron) is refused
at fingerprint time (exit 2, naming the interpreter and the package) by push, capture and
precompile, unless --allow-missing-packages (or NEFFCACHE_ALLOW_MISSING_PACKAGES=1)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from neffcache.cli import run
from neffcache.errors import UsageError
from neffcache.fingerprint import build_fingerprint, check_publishable, missing_distributions

INDUCTOR_MATRIX = """
backend = "inductor"
[[pipelines]]
name = "tiny"
class = "diffusers:Flux2KleinPipeline"
model = "/models/tiny-flux2-klein"
mode = "compile"
shapes = ["64x64"]
"""
NEURON_MATRIX = INDUCTOR_MATRIX.replace('"inductor"', '"neuron"')
CELL = "tiny/compile/64x64/b1/tp1"


@pytest.fixture(autouse=True)
def _refusing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEFFCACHE_ALLOW_MISSING_PACKAGES", raising=False)  # tests/conftest.py
    monkeypatch.setenv("NEFFCACHE_INSTANCE_TYPE", "trn2.48xlarge")


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = run(list(args))
    return code, capsys.readouterr().err


def _bare_python(tmp_path: Path) -> Path:
    """This interpreter without its site-packages (python -S): no torch at all."""
    wrapper = tmp_path / "bare" / "python"
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!/bin/sh\nunset PYTHONPATH\nexec {shlex.quote(sys.executable)} -S "
                       f"\"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def _cache(tmp_path: Path, root: str) -> Path:
    d = tmp_path / "cache" / root / "ab"
    d.mkdir(parents=True)
    (d / "file.bin").write_bytes(b"x" * 100)
    return tmp_path / "cache"


def test_check_publishable_names_what_is_missing() -> None:
    fp = build_fingerprint("neuron", {"version.torch": "2.9.0", "version.torch-neuronx": "absent",
                                      "target": "trn2"})
    assert missing_distributions(fp) == ("torch-neuronx",)
    with pytest.raises(UsageError, match="/opt/venv/bin/python: has no torch-neuronx") as exc:
        check_publishable(fp, "/opt/venv/bin/python")
    assert exc.value.hint is not None and "--allow-missing-packages" in exc.value.hint
    check_publishable(fp, "/opt/venv/bin/python", allow_missing=True)
    check_publishable(fp, "/x", environ={"NEFFCACHE_ALLOW_MISSING_PACKAGES": "1"})
    ok = build_fingerprint("inductor", {"version.torch": "2.9.0"})
    assert missing_distributions(ok) == ()
    check_publishable(ok, "/x")
    bare = build_fingerprint("inductor", {"version.torch": "absent"})
    assert missing_distributions(bare) == ("torch",)


def test_push_with_a_python_without_torch_is_refused_unless_allowed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], neffcache_home: Path) -> None:
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(INDUCTOR_MATRIX)
    cache = _cache(tmp_path, "inductor")
    python = _bare_python(tmp_path)
    push = ["push", "--matrix", str(matrix), "--cell", CELL, "--root",
            f"inductor={cache / 'inductor'}", "--python", str(python)]
    code, err = _cli(capsys, *push)
    assert code == 2, err
    assert f"python interpreter {python}: has no torch" in err and err.count("\n") <= 2
    assert "--allow-missing-packages" in err
    assert not list((neffcache_home / "store").glob("manifests/*.json"))
    code, err = _cli(capsys, *push, "--allow-missing-packages")
    assert code == 0, err
    assert len(list((neffcache_home / "store").glob("manifests/*.json"))) == 1


def test_neuron_without_torch_neuronx_is_refused_by_push_capture_and_precompile(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], neffcache_home: Path) -> None:
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(NEURON_MATRIX)
    cache = _cache(tmp_path, "neff")
    for args in (["push", "--matrix", str(matrix), "--cell", CELL, "--root",
                  f"neff={cache / 'neff'}"],
                 ["capture", str(matrix), "--cache", str(cache)],
                 ["precompile", str(matrix)]):
        code, err = _cli(capsys, *args)
        assert code == 2, (args[0], err)
        assert f"python interpreter {sys.executable}: has no torch-neuronx" in err, args[0]
    assert not list((neffcache_home / "store").glob("manifests/*.json"))
    code, err = _cli(capsys, "capture", str(matrix), "--cache", str(cache),
                     "--allow-missing-packages", "--dry-run")
    assert code == 0, err
