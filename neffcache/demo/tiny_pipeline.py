"""Build a tiny random-weight ``Flux2KleinPipeline`` locally, with no Hub download.

The demo and the integration tests need a real Diffusers pipeline that compiles with
TorchInductor on a CPU in well under a minute. This module builds one from scratch:

- ``FlowMatchEulerDiscreteScheduler`` (default config);
- ``AutoencoderKLFlux2`` with 4 blocks, so the real 8x VAE scale factor holds;
- ``Qwen3ForCausalLM`` with 28 tiny layers, because the pipeline reads hidden states
  ``text_encoder_out_layers=(9, 18, 27)`` by default;
- ``Qwen2TokenizerFast`` from a byte-level BPE trained with ``tokenizers`` on a few
  sentences, with a minimal chat template that understands ``enable_thinking``;
- ``Flux2Transformer2DModel`` with 2 double + 2 single blocks,
  ``joint_attention_dim = 3 x text hidden size`` and ``in_channels = 4 x VAE latent channels``.

The result (about 8 MB, float32 safetensors) is deterministic for a seed and is written
to a temp directory next to the target, then renamed into place; a marker file written
last makes :func:`build_tiny_flux2_klein` idempotent. torch, diffusers, transformers and
tokenizers are imported inside the functions so that importing this module stays cheap.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from neffcache.errors import UsageError

__all__ = ["MARKER_NAME", "BUILD_VERSION", "build_tiny_flux2_klein", "is_complete_build"]

#: Written last into a finished build; its presence means "complete".
MARKER_NAME = ".neffcache-tiny-pipeline.json"
#: Bump when the architecture below changes, so old builds are not mistaken for new ones.
BUILD_VERSION = 1

# Text encoder (Qwen3): 28 layers so that hidden_states[9], [18] and [27] exist.
_TEXT_HIDDEN = 32
_TEXT_LAYERS = 28
_TEXT_HEADS = 2
_TEXT_KV_HEADS = 1
_TEXT_HEAD_DIM = 16
_TEXT_INTERMEDIATE = 64
_OUT_LAYERS = (9, 18, 27)

# VAE: 4 blocks -> 2**(4-1) = 8x spatial scale factor, as in the real model.
_VAE_BLOCKS = (16, 32, 32, 32)
_VAE_LATENT_CHANNELS = 4
_VAE_GROUPS = 8

# Transformer: inner dim = heads * head_dim; RoPE axes must sum to head_dim.
_DIT_HEADS = 4
_DIT_HEAD_DIM = 32
_DIT_ROPE_AXES = (8, 8, 8, 8)
_DIT_DOUBLE = 2
_DIT_SINGLE = 2

_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>")
_BPE_VOCAB_SIZE = 512
_CORPUS = (
    "a tiny test",
    "A small cactus with a happy face in the Sahara desert.",
    "A photo of a cat sitting on a red chair next to a window.",
    "An astronaut riding a horse on the moon, digital art.",
    "A watercolor painting of a lighthouse at sunset over calm water.",
    "Neural networks compile once and run many times on Trainium.",
    "The quick brown fox jumps over the lazy dog 0123456789.",
)

# Minimal Qwen3-style chat template. ``enable_thinking=False`` (what Flux2Klein passes)
# inserts an empty think block, as Qwen3's own template does.
_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}"
    "<think>\n\n</think>\n\n"
    "{% endif %}"
    "{% endif %}"
)


def is_complete_build(out_dir: Path) -> bool:
    """True if ``out_dir`` holds a finished build (its marker file exists)."""
    return (Path(out_dir) / MARKER_NAME).is_file()


def build_tiny_flux2_klein(out_dir: Path, *, seed: int = 0) -> Path:
    """Build the tiny pipeline and ``save_pretrained`` it to ``out_dir``; return ``out_dir``.

    Idempotent: if ``out_dir`` already holds a complete build for ``seed`` it is returned
    untouched. The build happens in a temp directory next to ``out_dir`` and is renamed
    into place, so a crash never leaves a half-built ``out_dir``. Raises
    :class:`~neffcache.errors.UsageError` if ``out_dir`` holds something else (a build
    for another seed or version, or any non-empty directory without the marker).
    """
    out_dir = Path(out_dir)
    if _check_existing(out_dir, seed):
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        _save_pipeline(_make_pipeline(seed), tmp)
        _write_marker(tmp, seed)
        _move_into_place(tmp, out_dir, seed)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def _marker_payload(seed: int) -> dict[str, Any]:
    return {"builder": "neffcache.demo.tiny_pipeline", "version": BUILD_VERSION, "seed": seed}


def _check_existing(out_dir: Path, seed: int) -> bool:
    """True if ``out_dir`` is a complete matching build; False if absent or empty."""
    if not out_dir.exists():
        return False
    if is_complete_build(out_dir):
        try:
            found = json.loads((out_dir / MARKER_NAME).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            found = None
        if found == _marker_payload(seed):
            return True
        raise UsageError(
            f"{out_dir}: holds a tiny pipeline built with {found}, "
            f"expected {_marker_payload(seed)}; choose another directory or remove it"
        )
    if out_dir.is_dir() and not any(out_dir.iterdir()):
        return False
    raise UsageError(
        f"{out_dir}: exists and is not a tiny pipeline build (no {MARKER_NAME}); "
        "choose another directory or remove it"
    )


def _write_marker(directory: Path, seed: int) -> None:
    path = directory / MARKER_NAME
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(_marker_payload(seed), fh, sort_keys=True)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())


def _move_into_place(tmp: Path, out_dir: Path, seed: int) -> None:
    """Rename ``tmp`` to ``out_dir``; if another builder won the race, keep theirs."""
    if out_dir.is_dir() and not any(out_dir.iterdir()):
        out_dir.rmdir()
    os.chmod(tmp, 0o755)  # mkdtemp makes it 0700
    try:
        os.rename(tmp, out_dir)
    except OSError:
        if _check_existing(out_dir, seed):  # a concurrent build finished first
            return
        raise
    dir_fd = os.open(out_dir.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _make_pipeline(seed: int) -> Any:
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, Flux2KleinPipeline

    tokenizer = _make_tokenizer()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        text_encoder = _make_text_encoder(len(tokenizer))
        torch.manual_seed(seed + 1)
        vae = _make_vae()
        torch.manual_seed(seed + 2)
        transformer = _make_transformer()
    return Flux2KleinPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
        is_distilled=True,
    )


def _make_tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast  # type: ignore[attr-defined]  # lazy v5 alias

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=_BPE_VOCAB_SIZE,
        min_frequency=1,
        special_tokens=list(_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(list(_CORPUS), trainer=trainer)
    model = json.loads(bpe.to_str())["model"]
    vocab: dict[str, int] = dict(model["vocab"])
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    tokenizer = Qwen2TokenizerFast(
        vocab=vocab,
        merges=merges,
        additional_special_tokens=list(_SPECIAL_TOKENS[1:]),
        model_max_length=512,
    )
    tokenizer.chat_template = _CHAT_TEMPLATE
    return tokenizer


def _make_text_encoder(vocab_size: int) -> Any:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=_TEXT_HIDDEN,
        intermediate_size=_TEXT_INTERMEDIATE,
        num_hidden_layers=_TEXT_LAYERS,
        num_attention_heads=_TEXT_HEADS,
        num_key_value_heads=_TEXT_KV_HEADS,
        head_dim=_TEXT_HEAD_DIM,
        max_position_embeddings=1024,
        max_window_layers=_TEXT_LAYERS,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=0,
    )
    return Qwen3ForCausalLM(config)


def _make_vae() -> Any:
    from diffusers import AutoencoderKLFlux2

    n = len(_VAE_BLOCKS)
    return AutoencoderKLFlux2(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * n,
        up_block_types=("UpDecoderBlock2D",) * n,
        block_out_channels=_VAE_BLOCKS,
        layers_per_block=1,
        latent_channels=_VAE_LATENT_CHANNELS,
        norm_num_groups=_VAE_GROUPS,
        sample_size=64,
    )


def _make_transformer() -> Any:
    from diffusers import Flux2Transformer2DModel

    return Flux2Transformer2DModel(
        patch_size=1,
        in_channels=4 * _VAE_LATENT_CHANNELS,
        num_layers=_DIT_DOUBLE,
        num_single_layers=_DIT_SINGLE,
        attention_head_dim=_DIT_HEAD_DIM,
        num_attention_heads=_DIT_HEADS,
        joint_attention_dim=len(_OUT_LAYERS) * _TEXT_HIDDEN,
        timestep_guidance_channels=256,
        axes_dims_rope=_DIT_ROPE_AXES,
        guidance_embeds=False,
    )


def _save_pipeline(pipe: Any, directory: Path) -> None:
    pipe.save_pretrained(str(directory), safe_serialization=True)
