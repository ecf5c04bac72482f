"""TEST DOUBLE — a pipeline class that "compiles" through the torch_neuronx double.

Shaped like a Diffusers pipeline as far as neffcache's worker uses one: ``from_pretrained``,
``.to(device)``, components with ``.compile(...)`` / ``.compile_repeated_blocks(...)``, and a
call taking height/width/num_images_per_prompt. The model directory's ``config.json`` may say
``{"fail": "msg"}``, ``{"crash": true}`` or ``{"sleep": seconds}`` to misbehave in the call.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import torch_neuronx


class _Component:
    def __init__(self, name: str) -> None:
        self.name = name
        self.compiled: tuple[str, dict[str, Any]] | None = None

    def compile(self, **kwargs: Any) -> None:
        self.compiled = ("compile", kwargs)
        torch_neuronx.record({"event": "compile-call", "component": self.name,
                              "method": "compile", "kwargs": kwargs})

    def compile_repeated_blocks(self, **kwargs: Any) -> None:
        self.compiled = ("compile_repeated_blocks", kwargs)
        torch_neuronx.record({"event": "compile-call", "component": self.name,
                              "method": "compile_repeated_blocks", "kwargs": kwargs})


class DoubleNeuronPipeline:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.device = "cpu"
        self.transformer = _Component("transformer")
        self.vae = _Component("vae")

    @classmethod
    def from_pretrained(cls, path: str, **kwargs: Any) -> DoubleNeuronPipeline:
        config = json.loads(Path(path, "config.json").read_text(encoding="utf-8"))
        torch_neuronx.record({"event": "from_pretrained", "path": str(path),
                              "kwargs": {k: str(v) for k, v in kwargs.items()}})
        return cls(config)

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
            if comp.compiled:
                method, args = comp.compiled
                torch_neuronx.compile_graph(f"{comp.name}/{method}/{sorted(args.items())}/{shape}")
            else:  # eager: one NEFF per op, compiled on first use
                for op in ("matmul", "softmax"):
                    torch_neuronx.compile_graph(f"{comp.name}/eager/{op}/{shape}")
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
