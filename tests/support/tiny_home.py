"""Shared, once-per-session compile work for the compile tests (each cold compile is ~45 s).

``shared_tiny_model`` builds the tiny pipeline once; ``session_demo`` runs ``neffcache demo
--json`` once, from an empty NEFFCACHE_HOME, and hands every caller the same home (its store
then holds both demo cells) and the same result. Callers must not change what is in that
home's store; they restore from it into their own directories.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# Stable timings and no Hub; a demo run sets the first two itself too.
ENV = {"OMP_NUM_THREADS": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1", "HF_HUB_OFFLINE": "1"}
_AMBIENT = ("NEFFCACHE_STORE", "NEFFCACHE_INDEX", "NEFFCACHE_CONFIG")


@dataclass(frozen=True)
class Cli:
    code: int
    doc: Any
    stdout: str
    stderr: str


def run_cli(home: Path, *args: str, timeout: float = 1200) -> Cli:
    """``python -m neffcache.cli ARGS`` with NEFFCACHE_HOME=home and no ambient settings."""
    env = {**os.environ, **ENV, "NEFFCACHE_HOME": str(home)}
    for var in _AMBIENT:
        env.pop(var, None)
    proc = subprocess.run([sys.executable, "-m", "neffcache.cli", *args], env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    doc = None
    if "--json" in args and proc.stdout.strip():
        doc = json.loads(proc.stdout)
    return Cli(proc.returncode, doc, proc.stdout, proc.stderr)


def shared_tiny_model(factory: pytest.TempPathFactory) -> Path:
    from neffcache.demo.tiny_pipeline import build_tiny_flux2_klein

    return build_tiny_flux2_klein(factory.getbasetemp() / "shared-tiny-flux2-klein")


_DEMO: dict[str, tuple[Path, Cli]] = {}


def session_demo(factory: pytest.TempPathFactory) -> tuple[Path, Cli]:
    """(home, result) of one ``neffcache demo --json`` from an empty home, run once."""
    key = str(factory.getbasetemp())
    if key not in _DEMO:
        home = factory.getbasetemp() / "session-demo-home"
        _DEMO[key] = (home, run_cli(home, "demo", "--json"))
    return _DEMO[key]
