"""The backend table: what differs between TorchNeuron and TorchInductor, and nothing else.

Each backend names the cache roots its compiler writes (captured into entries and restored),
the variables that point the compiler at them, scratch directories that must be writable but
are never captured (lock dirs), the torch device and the ``torch.compile`` backend string.
Pure data: no torch import here.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from neffcache.backends import neuron_env
from neffcache.errors import UsageError


@dataclass(frozen=True, slots=True)
class CacheRoot:
    """A directory a backend's compiler writes cache files into."""

    name: str
    env_var: str | None
    default: str


@dataclass(frozen=True, slots=True)
class Backend:
    name: str
    device: str
    compile_backend: str
    roots: tuple[CacheRoot, ...]
    # env var -> subdirectory name; writable scratch space, never captured
    scratch: tuple[tuple[str, str], ...] = ()
    # glob patterns (on the file name) never captured: locks and temp files
    ignore: tuple[str, ...] = ("*.lock", "*.tmp", "*.tmp.*", "tmp*", ".*")

    @property
    def root_names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.roots)

    def root(self, name: str) -> CacheRoot:
        for r in self.roots:
            if r.name == name:
                return r
        raise UsageError(f"backend {self.name!r} has no cache root {name!r} "
                         f"(expected one of {list(self.root_names)})")

    def is_ignored(self, file_name: str) -> bool:
        return any(fnmatch.fnmatchcase(file_name, p) for p in self.ignore)


NEURON = Backend(
    name="neuron",
    device="neuron",
    compile_backend="neuron",
    roots=(
        CacheRoot("neff", neuron_env.NEFF_CACHE_DIR, neuron_env.NEFF_CACHE_DEFAULT),
        CacheRoot("hlo", neuron_env.HLO_CACHE_DIR, "/tmp/neuron_hlo_cache"),
    ),
    scratch=((neuron_env.NEFF_LOCK_DIR, "neff-locks"),),
)

INDUCTOR = Backend(
    name="inductor",
    device="cpu",
    compile_backend="inductor",
    roots=(
        CacheRoot("inductor", "TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor_root"),
    ),
)

BACKENDS: dict[str, Backend] = {b.name: b for b in (NEURON, INDUCTOR)}


def get_backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise UsageError(f"unknown backend {name!r} (expected one of {sorted(BACKENDS)})") from None


def root_dirs(backend: Backend, base: str) -> dict[str, str]:
    """Where each cache root lives under a base directory: ``<base>/<root name>``."""
    return {r.name: f"{base.rstrip('/')}/{r.name}" for r in backend.roots}


def cache_environment(backend: Backend, base: str) -> dict[str, str]:
    """Variables to export so the backend's compiler uses the roots (and scratch) under base."""
    env = {r.env_var: path for r in backend.roots if r.env_var
           for path in [root_dirs(backend, base)[r.name]]}
    for var, sub in backend.scratch:
        env[var] = f"{base.rstrip('/')}/{sub}"
    return env
