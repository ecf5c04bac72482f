"""TEST DOUBLE — not TorchNeuron. A stand-in for ``torch_neuronx`` used by neffcache's tests.

Reads its cache variables once, at import, as the real package does (so they must be set
before it is imported), records what it saw, and writes NEFF files in TorchNeuron's layout.
See ``tests/support/torch_neuronx_double/__init__.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

IS_TEST_DOUBLE = True
_VARS = ("TORCH_NEURONX_NEFF_CACHE_DIR", "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR",
         "TORCH_NEURONX_HLO_CACHE_DIR", "NEURON_PLATFORM_TARGET_OVERRIDE", "NEURON_CC_FLAGS")

# Read once, at import: a variable set later is not seen (the behaviour neffcache relies on).
NEFF_CACHE_DIR = Path(os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR", "/tmp/neff_cache"))
LOCK_DIR = Path(os.environ.get("TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR", "/tmp/local_cache"))
HLO_CACHE_DIR = (Path(os.environ["TORCH_NEURONX_HLO_CACHE_DIR"])
                 if os.environ.get("TORCH_NEURONX_HLO_CACHE_DIR") else None)


def record(event: dict[str, Any]) -> None:
    path = os.environ.get("TORCH_NEURONX_DOUBLE_RECORD")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"pid": os.getpid(), **event}, sort_keys=True) + "\n")


record({"event": "import", "env": {v: os.environ.get(v) for v in _VARS},
        "torch_imported_first": "torch" in sys.modules})


def _neff_bytes(material: str) -> bytes:
    return b"NEFF\x00double\x00" + hashlib.sha256(material.encode()).digest() * 64


def compile_graph(material: str) -> tuple[Path, bool]:
    """'Compile' a graph: return (neff path, True if it was already cached)."""
    key = hashlib.sha256(material.encode()).hexdigest()[:32]
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    lock = LOCK_DIR / f"{key}.lock"
    lock.touch()
    path = NEFF_CACHE_DIR / key[:2] / key[2:4] / f"{key}.neff"
    if path.is_file() and path.stat().st_size > 0:
        record({"event": "hit", "key": key})
        return path, True
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{key}.neff.{os.getpid()}.tmp")
    tmp.write_bytes(_neff_bytes(material))
    os.replace(tmp, path)
    # A concurrent writer that crashed mid-write leaves its temp file behind.
    stray = path.with_name(f"{key}.neff.99999.tmp")
    stray.write_bytes(b"partial")
    if HLO_CACHE_DIR is not None:
        HLO_CACHE_DIR.mkdir(parents=True, exist_ok=True)
        (HLO_CACHE_DIR / f"{key}.hlo.pb").write_bytes(b"HLO" + material.encode())
    record({"event": "compile", "key": key, "neff": str(path), "lock": str(lock),
            "stray_tmp": str(stray)})
    return path, False


def compile_kernel(name: str) -> tuple[Path, bool]:
    """A kernel NEFF: ``<dir>/<sha256>/<sha256>.neff``."""
    digest = hashlib.sha256(f"kernel:{name}".encode()).hexdigest()
    path = NEFF_CACHE_DIR / digest / f"{digest}.neff"
    if path.is_file():
        return path, True
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{digest}.neff.{os.getpid()}.tmp")
    tmp.write_bytes(_neff_bytes(name))
    os.replace(tmp, path)
    record({"event": "compile-kernel", "name": name, "neff": str(path)})
    return path, False
