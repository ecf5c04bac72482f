"""The backend table: what differs between TorchNeuron and TorchInductor. Pure data."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from neffcache.backends import neuron_env
from neffcache.errors import UsageError

__all__ = ["BACKENDS", "INDUCTOR", "NEURON", "Backend", "CacheRoot", "cache_environment",
           "compile_call", "compile_only_refusal", "get_backend", "neuron_env",
           "register_backend", "root_dirs"]


@dataclass(frozen=True, slots=True)
class CacheRoot:
    """A directory a backend's compiler writes cache files into; ``capture`` globs (relative
    to it; empty: every file not ignored) keep only the compiler's subtree of a general one."""

    name: str
    env_var: str | None
    default: str
    capture: tuple[str, ...] = ()


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
    # modules the worker imports (after the cache environment is set) before loading a pipeline
    import_modules: tuple[str, ...] = ()
    # torch.distributed process-group backend for tensor-parallel cells (None: not supported)
    dist_backend: str | None = None
    # whether the worker records C++ compiler runs (inductor's CppBuilder) as compile evidence
    cpp_probe: bool = False
    # the module run as ``python -m MODULE --spec FILE`` to warm one cell
    worker_module: str = "neffcache.precompile.worker"

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

    def captures(self, root_name: str, rel_path: str) -> bool:
        """Whether a file at ``rel_path`` under a root belongs in an entry: not a lock or temp
        file (any path component), and inside the root's ``capture`` globs if it has any."""
        if any(self.is_ignored(part) for part in rel_path.split("/")):
            return False
        globs = self.root(root_name).capture
        return not globs or any(fnmatch.fnmatchcase(rel_path, g) for g in globs)


NEURON = Backend(
    name="neuron",
    device=neuron_env.DEVICE,
    compile_backend="neuron",
    roots=(
        CacheRoot("neff", neuron_env.NEFF_CACHE_DIR, neuron_env.NEFF_CACHE_DEFAULT),
        CacheRoot("hlo", neuron_env.HLO_CACHE_DIR, neuron_env.HLO_CACHE_DEFAULT),
    ),
    scratch=((neuron_env.NEFF_LOCK_DIR, "neff-locks"),),
    import_modules=("torch_neuronx",),
    dist_backend=neuron_env.DIST_BACKEND,
)

# Inductor's precompiled C++ headers live in <TMPDIR>/torchinductor_<user>/, outside its cache
# dir; without them the first call recompiles them (10.0 s instead of 5.3 s). Disabling them
# would change the FX graph keys.
INDUCTOR = Backend(
    name="inductor",
    device="cpu",
    compile_backend="inductor",
    roots=(
        CacheRoot("inductor", "TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor_root"),
        CacheRoot("pch", "TMPDIR", "/tmp",
                  capture=("torchinductor_*/precompiled_headers/*",)),
    ),
    # Inductor's temp files are `.<pid>.<tid>.tmp`; a "tmp*" glob would also drop the (rare)
    # base32 cache file whose name starts with "tmp".
    ignore=("*.lock", "*.tmp", ".*"),
    cpp_probe=True,
)

# How each mode compiles a component: the method called on it (None: eager, no compile call).
_COMPILE_METHODS = {"eager": None, "compile": "compile", "regional": "compile_repeated_blocks"}

BACKENDS: dict[str, Backend] = {b.name: b for b in (NEURON, INDUCTOR)}


def register_backend(backend: Backend) -> None:
    """Add a backend, or replace one of the same name (a test backend)."""
    BACKENDS[backend.name] = backend


def get_backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise UsageError(f"unknown backend {name!r} (expected one of {sorted(BACKENDS)})") from None


def compile_call(backend: Backend, mode: str) -> tuple[str, dict[str, object]] | None:
    """The method name and keyword arguments that compile a component in ``mode`` (None for
    eager): ``component.<method>(backend=..., fullgraph=True, dynamic=False)``."""
    if mode not in _COMPILE_METHODS:
        raise UsageError(f"unknown mode {mode!r} (expected one of {sorted(_COMPILE_METHODS)})")
    method = _COMPILE_METHODS[mode]
    return None if method is None else (method, {"backend": backend.compile_backend,
                                                 "fullgraph": True, "dynamic": False})


def compile_only_refusal(mode: str) -> str | None:
    """Why a cell in ``mode`` cannot be pre-compiled in compile-only mode (None: it can)."""
    return None if compile_call(NEURON, mode) is not None else (
        "eager cells compile each op the first time it runs on a NeuronCore, so their NEFFs "
        "only exist once ops run on a device; compile-only mode runs none")


def root_dirs(backend: Backend, base: str) -> dict[str, str]:
    """``{root name: <base>/<root name>}``."""
    return {r.name: f"{base.rstrip('/')}/{r.name}" for r in backend.roots}


def cache_environment(backend: Backend, base: str) -> dict[str, str]:
    """Variables to export so the backend's compiler uses the roots (and scratch) under base."""
    dirs = root_dirs(backend, base)
    return {**{r.env_var: dirs[r.name] for r in backend.roots if r.env_var},
            **{var: f"{base.rstrip('/')}/{sub}" for var, sub in backend.scratch}}
