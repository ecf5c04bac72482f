"""Every exit-5 hint is a command that, run as printed, shows the difference: a restore under
``--python`` whose cell has an entry only for another fingerprint prints ``neffcache
fingerprint --explain KEY --python PATH --store URL``, and that command names the field."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from neffcache.cli import run

MATRIX = """
backend = "inductor"
[[pipelines]]
name = "tiny"
class = "diffusers:Flux2KleinPipeline"
model = "/models/tiny-flux2-klein"
mode = "compile"
shapes = ["64x64"]
"""
CELL = "tiny/compile/64x64/b1/tp1"
SERVICE_TORCH = "0.0.1+service"


def service_python(tmp_path: Path) -> Path:
    """An interpreter (this one, behind a wrapper in a directory with spaces) whose package
    metadata says torch SERVICE_TORCH: a fake dist-info first on its sys.path."""
    site = tmp_path / "service site"
    info = site / f"torch-{SERVICE_TORCH}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\n"
                                   f"Version: {SERVICE_TORCH}\n\n", encoding="utf-8")
    wrapper = tmp_path / "service bin" / "python"
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(site))} "
                       f"exec {shlex.quote(sys.executable)} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def test_the_exit_5_hint_run_as_printed_names_the_differing_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(MATRIX)
    cache = tmp_path / "inductor"
    (cache / "fxgraph").mkdir(parents=True)
    (cache / "fxgraph" / "graph.py").write_bytes(b"x" * 100)
    store = str(tmp_path / "other store")
    # Built with neffcache's own interpreter (its torch), into a store given by flag.
    code = run(["push", "--matrix", str(matrix), "--cell", CELL, "--root",
                f"inductor={cache}", "--store", store])
    assert code == 0, capsys.readouterr().err
    python = service_python(tmp_path)

    capsys.readouterr()
    code = run(["restore", str(matrix), "--to", str(tmp_path / "out"), "--store", store,
                "--python", str(python)])
    err = capsys.readouterr().err
    assert code == 5, err
    hint = next(line for line in err.splitlines() if line.startswith("Hint: "))
    argv = shlex.split(hint[len("Hint: "):])
    assert argv[:3] == ["neffcache", "fingerprint", "--explain"]
    assert argv[argv.index("--python") + 1] == str(python)

    code = run([*argv[1:], "--json"])  # the hint, run as printed (as JSON, to read it)
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert doc["match"] is False and doc["python"] == str(python)
    assert ("version.torch", SERVICE_TORCH) in {(d["field"], d["here"])
                                                for d in doc["differences"]}
    code = run(argv[1:])
    assert code == 0 and "field(s) differ" in capsys.readouterr().out
