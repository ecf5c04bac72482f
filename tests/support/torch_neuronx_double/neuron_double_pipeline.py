"""TEST DOUBLE — a pipeline class that "compiles" through the torch_neuronx double.

Shaped like a Diffusers pipeline as far as neffcache's worker uses one: ``load_config``
(model_index.json), ``from_pretrained`` (taking an already loaded ``transformer=``),
``.to(device)``, components with ``.compile(...)`` / ``.compile_repeated_blocks(...)``, and a
call taking height/width/num_images_per_prompt. ``DoubleTransformer.from_pretrained`` takes
diffusers' ``parallel_config=TensorParallelConfig(mesh=...)`` and records what it got. The
model directory's ``config.json`` may say ``{"fail": "msg"}``, ``{"crash": true}`` or
``{"sleep": seconds}`` to misbehave in the call.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import torch_neuronx

MODEL_INDEX = {"_class_name": "DoubleNeuronPipeline",
               "transformer": ["neuron_double_pipeline", "DoubleTransformer"],
               "vae": ["neuron_double_pipeline", "_Component"]}


class _Component:
    def __init__(self, name: str) -> None:
        self.name = name
        self.compiled: tuple[str, dict[str, Any]] | None = None
        self.tp = 1

    def compile(self, **kwargs: Any) -> None:
        self.compiled = ("compile", kwargs)
        torch_neuronx.record({"event": "compile-call", "component": self.name,
                              "method": "compile", "kwargs": kwargs})

    def compile_repeated_blocks(self, **kwargs: Any) -> None:
        self.compiled = ("compile_repeated_blocks", kwargs)
        torch_neuronx.record({"event": "compile-call", "component": self.name,
                              "method": "compile_repeated_blocks", "kwargs": kwargs})


class DoubleTransformer(_Component):
    @classmethod
    def from_pretrained(cls, path: str, *, subfolder: str | None = None,
                        parallel_config: Any = None, **kwargs: Any) -> DoubleTransformer:
        mesh = getattr(parallel_config, "mesh", None)
        torch_neuronx.record({
            "event": "transformer-from_pretrained", "path": str(path), "subfolder": subfolder,
            "parallel_config": type(parallel_config).__name__,
            "parallel_config_module": type(parallel_config).__module__,
            "mesh_device": getattr(mesh, "device_type", None),
            "mesh_size": mesh.size() if mesh is not None else None,
            "mesh_dims": list(getattr(mesh, "mesh_dim_names", None) or ()),
            "kwargs": {k: str(v) for k, v in kwargs.items()}})
        t = cls("transformer")
        t.tp = mesh.size() if mesh is not None else 1
        return t


class DoubleNeuronPipeline:
    def __init__(self, config: dict[str, Any], transformer: _Component | None = None) -> None:
        self.config = config
        self.device = "cpu"
        self.transformer = transformer or DoubleTransformer("transformer")
        self.vae = _Component("vae")

    @classmethod
    def load_config(cls, path: str, **kwargs: Any) -> dict[str, Any]:
        return dict(MODEL_INDEX)

    @classmethod
    def from_pretrained(cls, path: str, **kwargs: Any) -> DoubleNeuronPipeline:
        config = json.loads(Path(path, "config.json").read_text(encoding="utf-8"))
        transformer = kwargs.pop("transformer", None)
        torch_neuronx.record({"event": "from_pretrained", "path": str(path),
                              "transformer_given": transformer is not None,
                              "kwargs": {k: str(v) for k, v in kwargs.items()}})
        return cls(config, transformer)

    def to(self, device: str) -> DoubleNeuronPipeline:
        self.device = device
        return self

    def set_progress_bar_config(self, **kwargs: Any) -> None:
        pass

    def __call__(self, *, height: int, width: int, num_images_per_prompt: int,
                 num_inference_steps: int, **kwargs: Any) -> tuple[list[Any]]:
        if self.device != "neuron":
            raise RuntimeError(f"double pipeline called on device {self.device!r}, not 'neuron'")
        shape = f"{height}x{width}/b{num_images_per_prompt}"
        for comp in (self.transformer, self.vae):
            tp = f"/tp{comp.tp}" if comp.tp > 1 else ""
            if comp.compiled:
                method, args = comp.compiled
                torch_neuronx.compile_graph(
                    f"{comp.name}/{method}/{sorted(args.items())}/{shape}{tp}")
            else:  # eager: one NEFF per op, compiled the first time it runs on a device
                for op in ("matmul", "softmax"):
                    torch_neuronx.run_eager_op(f"{comp.name}/eager/{op}/{shape}{tp}")
        torch_neuronx.compile_kernel("flash_attention")
        if self.config.get("fail"):
            raise RuntimeError(str(self.config["fail"]))
        if self.config.get("crash"):
            os.abort()
        if self.config.get("sleep"):
            time.sleep(float(self.config["sleep"]))
        torch_neuronx.record({"event": "call", "shape": shape, "steps": num_inference_steps,
                              "kwargs": sorted(kwargs)})
        return ([],)
