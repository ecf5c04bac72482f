"""Helpers for tests that run neffcache's workers against the torch_neuronx TEST DOUBLE:
the double on the workers' PYTHONPATH, a matrix of double pipelines, the double's record."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.torch_neuronx_double import PATH as DOUBLE_PATH
from tests.support.torch_neuronx_double import PIPELINE_CLASS, RECORD_VAR

NEURON_VARS = ("TORCH_NEURONX_NEFF_CACHE_DIR", "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR",
               "TORCH_NEURONX_HLO_CACHE_DIR", "TORCH_NEURONX_COMPILE_ONLY",
               "NEURON_PLATFORM_TARGET_OVERRIDE", "NEURON_CC_FLAGS", "NEFFCACHE_INSTANCE_TYPE")


def use_double(monkeypatch: pytest.MonkeyPatch, record: Path, *extra_paths: Path) -> None:
    """Workers (subprocesses) import the double; the test process never does."""
    paths = [str(DOUBLE_PATH), *map(str, extra_paths)]
    paths += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    monkeypatch.setenv(RECORD_VAR, str(record))
    for var in NEURON_VARS:
        monkeypatch.delenv(var, raising=False)


def write_matrix(tmp: Path, pipelines: list[dict[str, Any]], name: str = "matrix.toml") -> Path:
    lines = ['name = "double"', 'backend = "neuron"', ""]
    for p in pipelines:
        model = tmp / p["name"]
        model.mkdir(exist_ok=True)
        (model / "config.json").write_text(json.dumps(p.get("config", {})))
        lines += ["[[pipelines]]", f'name = "{p["name"]}"', f'class = "{PIPELINE_CLASS}"',
                  f'model = "./{p["name"]}"',
                  f'modes = {json.dumps(p.get("modes", ["compile"]))}',
                  f'shapes = {json.dumps(p.get("shapes", ["64x64"]))}',
                  f'tp_degrees = {json.dumps(p.get("tp", [1]))}', ""]
    path = tmp / name
    path.write_text("\n".join(lines))
    return path


def records(path: Path, event: str | None = None) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in rows if event is None or r["event"] == event]
