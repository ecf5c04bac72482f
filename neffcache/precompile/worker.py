"""The warm-up worker: ``python -m neffcache.precompile.worker --spec FILE`` warms one cell."""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neffcache.backends import Backend, cache_environment, compile_call, get_backend, root_dirs
from neffcache.errors import UsageError, WorkerError
from neffcache.matrix import Cell

SPEC_SCHEMA = 1
PHASE_MARK = "neffcache worker: phase: "  # a line in the log: what the worker does now
RESULT_SCHEMA = 1
DEFAULT_PROMPT = "a photo of a small cactus with a happy face"


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """Everything a worker needs, as a JSON file (never through the environment)."""

    cell: Cell
    backend: str
    model: str  # a hub id, or an absolute local directory
    base: str  # the cache roots are <base>/<root name>
    result_path: str
    warmup_steps: int = 1
    call_kwargs: tuple[tuple[str, Any], ...] = ()
    seed: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SPEC_SCHEMA, "cell": self.cell.to_json(),
                "backend": self.backend, "model": self.model, "base": self.base,
                "result_path": self.result_path, "warmup_steps": self.warmup_steps,
                "call_kwargs": dict(self.call_kwargs), "seed": self.seed}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WorkerSpec:
        if data.get("schema_version") != SPEC_SCHEMA:
            raise UsageError(f"worker spec: schema_version {data.get('schema_version')!r} "
                             f"(expected {SPEC_SCHEMA})")
        try:
            return cls(cell=Cell.from_json(data["cell"]), backend=str(data["backend"]),
                       model=str(data["model"]), base=str(data["base"]),
                       result_path=str(data["result_path"]),
                       warmup_steps=int(data.get("warmup_steps", 1)),
                       call_kwargs=tuple(sorted(dict(data.get("call_kwargs") or {}).items())),
                       seed=int(data.get("seed", 0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"worker spec: malformed: {exc}") from None


TP_COMPONENT = "transformer"  # the component tensor-parallel cells shard
TP_MESH_DIM = "tp"


def torchrun_command(python: str, nproc: int, module: str, args: Sequence[str]) -> list[str]:
    """``torchrun --standalone --nproc_per_node=N -m MODULE ARGS`` as ``python -m
    torch.distributed.run``, so the ranks use the parent's Python. Pure."""
    if nproc < 1:
        raise UsageError(f"torchrun: --nproc_per_node must be >= 1, got {nproc}")
    return [python, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={nproc}", "-m", module, *args]


def launch_command(spec_path: str | Path, cell: Cell, backend: Backend,
                   python: str = sys.executable) -> list[str]:
    """tp ranks under torchrun for a tp > 1 cell on a backend with a distributed backend, else
    one process (which refuses a tp > 1 cell)."""
    args = ["--spec", str(spec_path)]
    if cell.tp > 1 and backend.dist_backend is not None:
        return torchrun_command(python, cell.tp, backend.worker_module, args)
    return [python, "-m", backend.worker_module, *args]


@dataclass(frozen=True, slots=True)
class Rank:
    """Where this process sits in a torchrun job (rank 0 of 1 without torchrun)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def leader(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Rank:
        try:
            return cls(int(environ.get("RANK", "0")), int(environ.get("WORLD_SIZE", "1")),
                       int(environ.get("LOCAL_RANK", "0")))
        except ValueError:
            raise WorkerError("RANK/WORLD_SIZE/LOCAL_RANK: expected integers (set by "
                              "torchrun)") from None


def check_rank(cell: Cell, backend: Backend, rank: Rank) -> None:
    """A tp > 1 cell needs a backend with a distributed backend and exactly tp ranks."""
    if cell.tp == 1 and rank.world_size == 1:
        return
    if backend.dist_backend is None:
        raise WorkerError(f"cell {cell.id}: tensor parallel (tp={cell.tp}) is not supported "
                          f"by the {backend.name} backend")
    if rank.world_size != cell.tp:
        raise WorkerError(f"cell {cell.id}: tp={cell.tp} but this job has WORLD_SIZE="
                          f"{rank.world_size} (launch with torchrun --nproc_per_node={cell.tp})")


def build_call_kwargs(cell: Cell, steps: int, call_kwargs: Mapping[str, Any],
                      generator: Any = None) -> dict[str, Any]:
    """Pipeline call arguments: defaults, the matrix's call_kwargs, then the cell's shape and
    batch (they always win: they are what the cell is)."""
    return {"prompt": DEFAULT_PROMPT, "num_inference_steps": steps, **call_kwargs,
            "height": cell.height, "width": cell.width, "num_images_per_prompt": cell.batch,
            **({} if generator is None else {"generator": generator})}


def check_environment(backend: Backend, base: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The cache variables must already point at this cell's roots (checked before torch is
    imported); returns what was seen."""
    expected = cache_environment(backend, base)
    seen = {var: environ.get(var, "") for var in expected}
    if wrong := sorted(v for v, path in expected.items() if seen[v] != path):
        var = wrong[0]
        raise WorkerError(f"worker environment: {var}={seen[var]!r}, expected "
                          f"{expected[var]!r} (the parent must set it before start)")
    return seen


class CompileProbe:
    """Records C++ compiler outputs (wrapping inductor's CppBuilder.build) and reads
    torch._dynamo's counters. May import torch: create it after the environment check."""

    def __init__(self, dirs: Mapping[str, str], cpp: bool = True) -> None:
        self._dirs = dirs
        self.outputs: list[str] = []
        self.instrumented = False
        if not cpp:
            return
        try:
            from torch._inductor import cpp_builder
        except ImportError:
            return
        original = getattr(getattr(cpp_builder, "CppBuilder", None), "build", None)
        if original is None:
            return

        def build(builder: Any, *args: Any, **kwargs: Any) -> Any:
            self.outputs.append(self._relative(str(builder.get_target_file_path())))
            return original(builder, *args, **kwargs)

        cpp_builder.CppBuilder.build = build  # type: ignore[method-assign,assignment]
        self.instrumented = True

    def _relative(self, path: str) -> str:
        for name, top in self._dirs.items():
            if path.startswith(top.rstrip("/") + "/"):
                return f"{name}/{path[len(top.rstrip('/')) + 1:]}"
        return Path(path).name

    def snapshot(self) -> dict[str, Any]:
        counters: Mapping[str, Any] = {}
        if "torch._dynamo" in sys.modules:  # not imported: nothing went through dynamo
            from torch._dynamo.utils import counters
        return {"counters": {g: {k: int(v) for k, v in c.items()} for g, c in counters.items()
                             if c},
                "cpp_outputs": list(self.outputs), "cpp_probe": self.instrumented}


def _dtype_kwarg() -> str:
    try:
        from diffusers.utils import deprecation_utils
    except ImportError:
        return "torch_dtype"
    return "dtype" if hasattr(deprecation_utils, "_resolve_dtype") else "torch_dtype"


def _import_class(spec: str, what: str) -> Any:
    module_name, _, class_name = spec.partition(":")
    try:
        return getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise WorkerError(f"{what} {spec!r}: cannot import: {exc}") from None


def init_tensor_parallel(backend: Backend, rank: Rank) -> Any:
    """Join the process group; a 1-D DeviceMesh over every rank."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    dist.init_process_group(backend=backend.dist_backend)
    return DeviceMesh(backend.device, list(range(rank.world_size)),
                      mesh_dim_names=(TP_MESH_DIM,))


def load_tp_transformer(cls: Any, spec: WorkerSpec, mesh: Any, location: Mapping[str, Any],
                        kwargs: Mapping[str, Any]) -> Any:
    """The pipeline's transformer (its class from model_index.json), sharded over ``mesh``."""
    from diffusers import TensorParallelConfig

    index = cls.load_config(spec.model, **location)
    entry = index.get(TP_COMPONENT) if isinstance(index, Mapping) else None
    if not isinstance(entry, (list, tuple)) or len(entry) != 2 or None in entry:
        raise WorkerError(f"cell {spec.cell.id}: tensor parallel shards the pipeline's "
                          f"{TP_COMPONENT!r}, and {spec.model} declares none in model_index.json")
    component_cls = _import_class(f"{entry[0]}:{entry[1]}", f"{TP_COMPONENT} class")
    return component_cls.from_pretrained(
        spec.model, subfolder=TP_COMPONENT, parallel_config=TensorParallelConfig(mesh=mesh),
        **location, **kwargs)


def load_pipeline(spec: WorkerSpec, backend: Backend, mesh: Any = None) -> Any:
    import torch

    cls = _import_class(spec.cell.pipeline_class, "pipeline class")
    kwargs: dict[str, Any] = {_dtype_kwarg(): getattr(torch, spec.cell.dtype)}
    location: dict[str, Any] = ({"local_files_only": True} if Path(spec.model).is_dir()
                                else {"revision": spec.cell.revision})
    if mesh is not None:
        kwargs[TP_COMPONENT] = load_tp_transformer(cls, spec, mesh, location, kwargs)
    pipe = cls.from_pretrained(spec.model, **location, **kwargs).to(backend.device)
    if hasattr(pipe, "set_progress_bar_config"):
        pipe.set_progress_bar_config(disable=True)
    return pipe


def compile_components(pipe: Any, cell: Cell, backend: Backend) -> list[str]:
    """Apply the mode's compile call to each declared component; returns what was called."""
    call = compile_call(backend, cell.mode)
    if call is None:
        return []
    method, kwargs = call
    done = []
    for name in cell.components:
        component = getattr(pipe, name, None)
        if component is None:
            raise WorkerError(f"cell {cell.id}: pipeline has no component {name!r}")
        getattr(component, method)(**kwargs)
        done.append(f"{name}.{method}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})")
    return done


def timed_call(pipe: Any, spec: WorkerSpec) -> float:
    import torch

    generator = torch.Generator(device="cpu").manual_seed(spec.seed)
    kwargs = build_call_kwargs(spec.cell, spec.warmup_steps, dict(spec.call_kwargs), generator)
    start = time.perf_counter()
    out = pipe(**kwargs)
    first = out[0] if isinstance(out, (tuple, list)) else getattr(out, "images", out)
    if isinstance(first, torch.Tensor):
        first.to("cpu")  # asynchronous devices: wait for the result
    return time.perf_counter() - start


def run(spec: WorkerSpec, rank: Rank | None = None) -> dict[str, Any]:
    """Warm one cell (one rank of it): the result document (rank 0's is complete, its scans of
    the shared roots included)."""
    from neffcache.precompile.capture import scan_roots

    started = time.perf_counter()
    backend = get_backend(spec.backend)
    rank = rank or Rank.from_environ(os.environ)
    check_rank(spec.cell, backend, rank)
    preloaded = sorted(m for m in ("torch", *backend.import_modules) if m in sys.modules)
    env_seen = check_environment(backend, spec.base, os.environ)
    dirs = root_dirs(backend, spec.base)
    for d in dirs.values():
        Path(d).mkdir(parents=True, exist_ok=True)
    before = scan_roots(backend, dirs) if rank.leader else ()
    probe = CompileProbe(dirs, cpp=backend.cpp_probe)  # after the environment check
    say_phase("importing", rank)
    for module in backend.import_modules:
        importlib.import_module(module)
    mesh = init_tensor_parallel(backend, rank) if spec.cell.tp > 1 else None
    try:
        _barrier(mesh)  # rank 0 has scanned "before": now anyone may compile
        t_import = time.perf_counter()
        say_phase("loading", rank)
        pipe = load_pipeline(spec, backend, mesh)
        compiled = compile_components(pipe, spec.cell, backend)
        t_load = time.perf_counter()
        say_phase("compiling", rank)  # the first call: compile + run
        seconds = timed_call(pipe, spec)
        activity = probe.snapshot()
        _barrier(mesh)  # every rank has written what it compiled
        after = scan_roots(backend, dirs) if rank.leader else ()
    finally:
        if mesh is not None:
            import torch.distributed as dist

            dist.destroy_process_group()
    return {
        "schema_version": RESULT_SCHEMA, "ok": True, "cell_id": spec.cell.id,
        "seconds": round(seconds, 3),
        "import_seconds": round(t_import - started, 3),
        "load_seconds": round(t_load - t_import, 3),
        "total_seconds": round(time.perf_counter() - started, 3),
        "compile_calls": compiled, "activity": activity,
        "environment": env_seen, "preloaded_modules": preloaded,
        "ranks": rank.world_size,
        "files_before": [[f.root, f.path, f.size, f.mtime_ns] for f in before],
        "files_after": [[f.root, f.path, f.size, f.mtime_ns] for f in after],
    }


def say_phase(phase: str, rank: Rank | None = None) -> None:
    """One ``PHASE_MARK`` line on stderr (rank 0 only), for the heartbeats."""
    if rank is None or rank.leader:
        print(f"{PHASE_MARK}{phase}", file=sys.stderr, flush=True)


def _barrier(mesh: Any) -> None:
    if mesh is not None:
        import torch.distributed as dist

        dist.barrier()


def write_result(path: str, doc: Mapping[str, Any]) -> None:
    tmp = f"{path}.part"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


@functools.cache
def die_with_parent() -> Callable[[], None] | None:
    """A call that makes the calling process get SIGKILL when its parent('s forking thread)
    dies (Linux ``prctl(PR_SET_PDEATHSIG)``), or None. Resolved once: the call only enters
    libc, so a child may make it between fork and exec."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        import signal

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError, ImportError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                      ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    kill = int(signal.SIGKILL)

    def set_pdeathsig() -> None:
        prctl(_PR_SET_PDEATHSIG, kill, 0, 0, 0)

    return set_pdeathsig


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def main(argv: Sequence[str] | None = None) -> int:
    # Under torchrun the parent is torchrun; for a single worker this repeats what launch did.
    if (guard := die_with_parent()) is not None:
        guard()
    parser = argparse.ArgumentParser(prog="python -m neffcache.precompile.worker",
                                     description="Warm one cell (started by neffcache).")
    parser.add_argument("--spec", required=True, help="JSON file describing the cell")
    args = parser.parse_args(argv)
    spec = WorkerSpec.from_json(json.loads(Path(args.spec).read_text(encoding="utf-8")))
    rank = Rank.from_environ(os.environ)
    try:
        doc = run(spec, rank)
    except BaseException as exc:  # noqa: BLE001 - reported, then re-raised as an exit status
        traceback.print_exc()
        if rank.leader:  # other ranks' failures show in the log and torchrun's exit status
            write_result(spec.result_path, {"schema_version": RESULT_SCHEMA, "ok": False,
                                            "cell_id": spec.cell.id,
                                            "error": f"{type(exc).__name__}: {exc}"})
        sys.stderr.flush()
        return 1
    if rank.leader:
        write_result(spec.result_path, doc)
    print(f"neffcache worker: {spec.cell.id}: rank {rank.rank}/{rank.world_size}: first call "
          f"{doc['seconds']:.2f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
