"""Load a Diffusers pipeline and time one call on it (the tiny pipeline's tests; the package
itself warms cells in its workers). torch and diffusers are imported inside the functions; the
call is timed including the copy of its output to the CPU."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from neffcache.errors import UsageError

__all__ = ["WARM_PROMPT", "WARM_SEED", "load_pipeline", "timed_call", "warm_call"]

WARM_PROMPT = "a tiny test"
WARM_SEED = 0
_DTYPES = ("float32", "bfloat16", "float16")


def load_pipeline(model_path: str | Path, dtype: str = "float32", device: str = "cpu") -> Any:
    """``DiffusionPipeline.from_pretrained(model_path)`` in ``dtype``, moved to ``device`` (a
    local directory is loaded with ``local_files_only=True``)."""
    if dtype not in _DTYPES:
        raise UsageError(f"dtype: {dtype!r} is not one of {', '.join(_DTYPES)}")
    import torch
    from diffusers import DiffusionPipeline

    local = Path(model_path).is_dir()
    pipe = DiffusionPipeline.from_pretrained(
        str(model_path), **{_dtype_kwarg(): getattr(torch, dtype)}, local_files_only=local)
    pipe = pipe.to(device)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _dtype_kwarg() -> str:
    """``dtype`` where Diffusers accepts it (newer releases deprecate ``torch_dtype``)."""
    try:
        from diffusers.utils import deprecation_utils
    except ImportError:
        return "torch_dtype"
    return "dtype" if hasattr(deprecation_utils, "_resolve_dtype") else "torch_dtype"


def timed_call(pipe: Any, height: int, width: int, batch: int, steps: int = 1) -> tuple[float, Any]:
    """One pipeline call: ``(seconds, output)``, the output the latents on the CPU."""
    import torch

    generator = torch.Generator(device="cpu").manual_seed(WARM_SEED)
    start = time.perf_counter()
    result = pipe(prompt=WARM_PROMPT, height=height, width=width, num_images_per_prompt=batch,
                  num_inference_steps=steps, guidance_scale=1.0, generator=generator,
                  output_type="latent", return_dict=False)[0]
    output = result.to("cpu") if isinstance(result, torch.Tensor) else result
    return time.perf_counter() - start, output


def warm_call(pipe: Any, height: int, width: int, batch: int, steps: int = 1) -> float:
    """One warm-up call at ``height`` x ``width`` with ``batch`` images; returns seconds."""
    seconds, _ = timed_call(pipe, height, width, batch, steps)
    return seconds
