"""The warm-up worker: ``python -m neffcache.worker --spec FILE`` warms one cell in its own process.

The parent (neffcache.launch) creates the cell's cache roots and starts this process with
every cache variable already in its environment; the worker checks that, and only then
imports torch and the backend's modules (TorchNeuron reads its variables at import). It
loads the declared pipeline class with ``from_pretrained`` (model, revision, dtype), moves
it to the backend's device, compiles the declared components per mode, makes one call at
the cell's shape and batch, and writes a JSON result: seconds, compile counters, C++
compiler outputs, and the capturable files before and after (neffcache.hit_check judges
them). Any failure exits non-zero with the traceback on stderr; the parent keeps the log.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neffcache.backends import Backend, cache_environment, compile_call, get_backend, root_dirs
from neffcache.errors import UsageError, WorkerError
from neffcache.matrix import Cell

SPEC_SCHEMA = 1
RESULT_SCHEMA = 1
DEFAULT_PROMPT = "a photo of a small cactus with a happy face"


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """Everything a worker needs, passed as a JSON file (never through the environment)."""

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


def launch_command(spec_path: str | Path, cell: Cell, backend: Backend,
                   python: str = sys.executable) -> list[str]:
    """The command line that runs a worker for ``cell``.

    tp == 1: one process. tp > 1 on neuron: one process per NeuronCore under torchrun on this
    node (the hook a later change fleshes out: the worker then needs
    ``dist.init_process_group("neuron")``, a DeviceMesh and ``TensorParallelConfig`` passed
    to the transformer's ``from_pretrained``; ranks share the cache roots, TorchNeuron locks
    per key). The worker refuses tp > 1 until then, so such cells fail visibly.
    """
    worker = ["-m", "neffcache.worker", "--spec", str(spec_path)]
    if cell.tp > 1 and backend.name == "neuron":
        return [python, "-m", "torch.distributed.run", "--standalone",
                f"--nproc_per_node={cell.tp}", *worker]
    return [python, *worker]


def build_call_kwargs(cell: Cell, steps: int, call_kwargs: Mapping[str, Any],
                      generator: Any = None) -> dict[str, Any]:
    """Pipeline call arguments: defaults, then the matrix's call_kwargs, then the cell's shape
    and batch (which always win: they are what the cell is)."""
    kwargs: dict[str, Any] = {"prompt": DEFAULT_PROMPT, "num_inference_steps": steps}
    kwargs.update(call_kwargs)
    kwargs.update(height=cell.height, width=cell.width, num_images_per_prompt=cell.batch)
    if generator is not None:
        kwargs["generator"] = generator
    return kwargs


# --- inside the worker process ------------------------------------------------------------

def check_environment(backend: Backend, base: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The cache variables must already point at this cell's roots; returns what was seen."""
    expected = cache_environment(backend, base)
    seen = {var: environ.get(var, "") for var in expected}
    wrong = {v: seen[v] for v, path in expected.items() if seen[v] != path}
    if wrong:
        var = sorted(wrong)[0]
        raise WorkerError(f"worker environment: {var}={wrong[var]!r}, expected "
                          f"{expected[var]!r} (the parent must set it before start)")
    return seen


class CompileProbe:
    """Records C++ compiler outputs (by wrapping inductor's CppBuilder.build) and reads
    torch._dynamo's counters. Imports torch: create it only after the environment is set."""

    def __init__(self, dirs: Mapping[str, str]) -> None:
        self._dirs = dirs
        self.outputs: list[str] = []
        self.instrumented = False
        try:
            from torch._inductor import cpp_builder
        except ImportError:
            return
        original = getattr(getattr(cpp_builder, "CppBuilder", None), "build", None)
        if original is None:
            return
        probe = self

        def build(builder: Any, *args: Any, **kwargs: Any) -> Any:
            probe.outputs.append(probe._relative(str(builder.get_target_file_path())))
            return original(builder, *args, **kwargs)

        cpp_builder.CppBuilder.build = build  # type: ignore[method-assign,assignment]
        self.instrumented = True

    def _relative(self, path: str) -> str:
        for name, top in self._dirs.items():
            if path.startswith(top.rstrip("/") + "/"):
                return f"{name}/{path[len(top.rstrip('/')) + 1:]}"
        return Path(path).name

    def snapshot(self) -> dict[str, Any]:
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


def load_pipeline(spec: WorkerSpec, backend: Backend) -> Any:
    import torch

    module_name, _, class_name = spec.cell.pipeline_class.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise WorkerError(f"pipeline class {spec.cell.pipeline_class!r}: cannot import: "
                          f"{exc}") from None
    kwargs: dict[str, Any] = {_dtype_kwarg(): getattr(torch, spec.cell.dtype)}
    if Path(spec.model).is_dir():
        kwargs["local_files_only"] = True
    else:
        kwargs["revision"] = spec.cell.revision
    pipe = cls.from_pretrained(spec.model, **kwargs)
    pipe = pipe.to(backend.device)
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


def run(spec: WorkerSpec) -> dict[str, Any]:
    """Warm one cell in this process and return the result document."""
    from neffcache.capture import scan_roots

    started = time.perf_counter()
    backend = get_backend(spec.backend)
    if spec.cell.tp > 1:
        raise WorkerError(f"cell {spec.cell.id}: tensor-parallel warm-up (tp={spec.cell.tp}) "
                          "is not implemented yet")
    preloaded = sorted(m for m in ("torch", *backend.import_modules) if m in sys.modules)
    env_seen = check_environment(backend, spec.base, os.environ)
    dirs = root_dirs(backend, spec.base)
    for d in dirs.values():
        Path(d).mkdir(parents=True, exist_ok=True)
    before = scan_roots(backend, dirs)
    probe = CompileProbe(dirs)  # imports torch, after the environment check
    for module in backend.import_modules:
        importlib.import_module(module)
    t_import = time.perf_counter()
    pipe = load_pipeline(spec, backend)
    compiled = compile_components(pipe, spec.cell, backend)
    t_load = time.perf_counter()
    seconds = timed_call(pipe, spec)
    activity = probe.snapshot()
    after = scan_roots(backend, dirs)
    return {
        "schema_version": RESULT_SCHEMA, "ok": True, "cell_id": spec.cell.id,
        "seconds": round(seconds, 3),
        "import_seconds": round(t_import - started, 3),
        "load_seconds": round(t_load - t_import, 3),
        "total_seconds": round(time.perf_counter() - started, 3),
        "compile_calls": compiled, "activity": activity,
        "environment": env_seen, "preloaded_modules": preloaded,
        "files_before": [[f.root, f.path, f.size, f.mtime_ns] for f in before],
        "files_after": [[f.root, f.path, f.size, f.mtime_ns] for f in after],
    }


def write_result(path: str, doc: Mapping[str, Any]) -> None:
    tmp = f"{path}.part"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m neffcache.worker",
                                     description="Warm one cell (started by neffcache).")
    parser.add_argument("--spec", required=True, help="JSON file describing the cell")
    args = parser.parse_args(argv)
    spec = WorkerSpec.from_json(json.loads(Path(args.spec).read_text(encoding="utf-8")))
    try:
        doc = run(spec)
    except BaseException as exc:  # noqa: BLE001 - reported, then re-raised as an exit status
        traceback.print_exc()
        write_result(spec.result_path, {"schema_version": RESULT_SCHEMA, "ok": False,
                                        "cell_id": spec.cell.id,
                                        "error": f"{type(exc).__name__}: {exc}"})
        sys.stderr.flush()
        return 1
    write_result(spec.result_path, doc)
    print(f"neffcache worker: {spec.cell.id}: first call {doc['seconds']:.2f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
