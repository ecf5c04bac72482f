"""TEST DOUBLE — not TorchNeuron. A stand-in for ``torch_neuronx`` used by neffcache's tests.

Reads its cache variables once, at import, as the real package does (so they must be set
before it is imported), records what it saw, and writes NEFF files in TorchNeuron's layout.
Like the real package, importing it registers the ``"neuron"`` device and the ``"neuron"``
``torch.distributed`` backend; here the device is a do-nothing Python backend and the
process group is gloo underneath, so tensor-parallel runs work on a CPU host.
See ``tests/support/torch_neuronx_double/__init__.py``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

IS_TEST_DOUBLE = True
_VARS = ("TORCH_NEURONX_NEFF_CACHE_DIR", "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR",
         "TORCH_NEURONX_HLO_CACHE_DIR", "NEURON_PLATFORM_TARGET_OVERRIDE", "NEURON_CC_FLAGS",
         "TORCH_NEURONX_COMPILE_ONLY", "RANK", "WORLD_SIZE")

# Read once, at import: a variable set later is not seen (the behaviour neffcache relies on).
NEFF_CACHE_DIR = Path(os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR", "/tmp/neff_cache"))
LOCK_DIR = Path(os.environ.get("TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR", "/tmp/local_cache"))
HLO_CACHE_DIR = (Path(os.environ["TORCH_NEURONX_HLO_CACHE_DIR"])
                 if os.environ.get("TORCH_NEURONX_HLO_CACHE_DIR") else None)
COMPILE_ONLY = os.environ.get("TORCH_NEURONX_COMPILE_ONLY") == "1"
TARGET = os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE")


def record(event: dict[str, Any]) -> None:
    path = os.environ.get("TORCH_NEURONX_DOUBLE_RECORD")
    if path:
        line = json.dumps({"pid": os.getpid(), "rank": os.environ.get("RANK"), **event},
                          sort_keys=True) + "\n"
        with open(path, "a", encoding="utf-8") as fh:  # one write per line: ranks append
            fh.write(line)


record({"event": "import", "env": {v: os.environ.get(v) for v in _VARS},
        "torch_imported_first": "torch" in sys.modules})


def _register_device_and_process_group() -> None:
    """The "neuron" device (a Python PrivateUse1 backend) and a gloo-backed "neuron"
    process-group backend, so `init_process_group(backend="neuron")` and
    `DeviceMesh("neuron", ...)` work without Trainium."""
    import torch
    import torch.distributed as dist
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    if torch._C._get_privateuse1_backend_name() != "neuron":
        _setup_privateuseone_for_python_backend(rename="neuron")

    def make_group(store: Any, rank: int, size: int, timeout: Any) -> Any:
        return dist.ProcessGroupGloo(store, rank, size, timeout)

    if "neuron" not in dist.Backend.backend_list:
        dist.Backend.register_backend("neuron", make_group, devices=["cpu", "neuron"])


_register_device_and_process_group()


def _neff_bytes(material: str) -> bytes:
    return b"NEFF\x00double\x00" + hashlib.sha256(material.encode()).digest() * 64


def compile_graph(material: str) -> tuple[Path, bool]:
    """'Compile' a graph: return (neff path, True if it was already cached). Holds an
    exclusive file lock per key in the lock dir while it looks and writes, as TorchNeuron
    does, so ranks sharing a cache dir compile each graph once."""
    key = hashlib.sha256(material.encode()).hexdigest()[:32]
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    lock = LOCK_DIR / f"{key}.lock"
    path = NEFF_CACHE_DIR / key[:2] / key[2:4] / f"{key}.neff"
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
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
            "stray_tmp": str(stray), "compile_only": COMPILE_ONLY, "target": TARGET})
    return path, False


def compile_kernel(name: str) -> tuple[Path, bool]:
    """A kernel NEFF: ``<dir>/<sha256>/<sha256>.neff``."""
    digest = hashlib.sha256(f"kernel:{name}".encode()).hexdigest()
    path = NEFF_CACHE_DIR / digest / f"{digest}.neff"
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    with open(LOCK_DIR / f"{digest}.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if path.is_file():
            return path, True
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{digest}.neff.{os.getpid()}.tmp")
        tmp.write_bytes(_neff_bytes(name))
        os.replace(tmp, path)
    record({"event": "compile-kernel", "name": name, "neff": str(path)})
    return path, False


def run_eager_op(material: str) -> tuple[Path, bool] | None:
    """An eager op: compiled the first time it runs on a NeuronCore. Compile-only mode has
    none, so the op leaves no NEFF (the double records that it ran without one)."""
    if COMPILE_ONLY:
        record({"event": "eager-op-without-device", "op": material})
        return None
    return compile_graph(material)
