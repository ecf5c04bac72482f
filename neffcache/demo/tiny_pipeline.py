"""A tiny random-weight ``Flux2KleinPipeline`` (~8 MB, deterministic), built with no download."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from neffcache.errors import UsageError

MARKER_NAME = ".neffcache-tiny-pipeline.json"
BUILD_VERSION = 1  # bump when the architecture below changes

_TEXT_HIDDEN, _TEXT_LAYERS = 32, 28  # 28 layers: hidden_states[9], [18] and [27] exist
_OUT_LAYERS = (9, 18, 27)
_VAE_BLOCKS = (16, 32, 32, 32)  # 4 blocks -> 2**(4-1) = 8x spatial scale factor
_VAE_LATENT_CHANNELS = 4
_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>")
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
    return (Path(out_dir) / MARKER_NAME).is_file()


def build_tiny_flux2_klein(out_dir: Path, *, seed: int = 0) -> Path:
    """Build the pipeline into ``out_dir`` (idempotent; renamed into place, so never half
    built). UsageError if ``out_dir`` holds anything else."""
    out_dir = Path(out_dir)
    if _check_existing(out_dir, seed):
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        _save_pipeline(_make_pipeline(seed), tmp)
        with open(tmp / MARKER_NAME, "w", encoding="utf-8") as fh:
            json.dump(_marker_payload(seed), fh, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        _move_into_place(tmp, out_dir, seed)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone once renamed into place
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
        raise UsageError(f"{out_dir}: holds a tiny pipeline built with {found}, expected "
                         f"{_marker_payload(seed)}; choose another directory or remove it")
    if out_dir.is_dir() and not any(out_dir.iterdir()):
        return False
    raise UsageError(f"{out_dir}: exists and is not a tiny pipeline build (no {MARKER_NAME}); "
                     "choose another directory or remove it")


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
    from diffusers import (
        AutoencoderKLFlux2,
        FlowMatchEulerDiscreteScheduler,
        Flux2KleinPipeline,
        Flux2Transformer2DModel,
    )
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = _make_tokenizer()
    n = len(_VAE_BLOCKS)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        text_encoder = Qwen3ForCausalLM(Qwen3Config(
            vocab_size=len(tokenizer), hidden_size=_TEXT_HIDDEN, intermediate_size=64,
            num_hidden_layers=_TEXT_LAYERS, num_attention_heads=2, num_key_value_heads=1,
            head_dim=16, max_position_embeddings=1024, max_window_layers=_TEXT_LAYERS,
            tie_word_embeddings=True, pad_token_id=0, eos_token_id=0))
        torch.manual_seed(seed + 1)
        vae = AutoencoderKLFlux2(
            in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * n,
            up_block_types=("UpDecoderBlock2D",) * n, block_out_channels=_VAE_BLOCKS,
            layers_per_block=1, latent_channels=_VAE_LATENT_CHANNELS, norm_num_groups=8,
            sample_size=64)
        torch.manual_seed(seed + 2)
        # 2 double + 2 single blocks; inner dim = heads * head_dim; RoPE axes sum to head_dim
        transformer = Flux2Transformer2DModel(
            patch_size=1, in_channels=4 * _VAE_LATENT_CHANNELS, num_layers=2,
            num_single_layers=2, attention_head_dim=32, num_attention_heads=4,
            joint_attention_dim=len(_OUT_LAYERS) * _TEXT_HIDDEN, timestep_guidance_channels=256,
            axes_dims_rope=(8, 8, 8, 8), guidance_embeds=False)
    return Flux2KleinPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae,
                              text_encoder=text_encoder, tokenizer=tokenizer,
                              transformer=transformer, is_distilled=True)


def _make_tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast  # type: ignore[attr-defined]  # lazy v5 alias

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, min_frequency=1,
                                  special_tokens=list(_SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    bpe.train_from_iterator(list(_CORPUS), trainer=trainer)
    model = json.loads(bpe.to_str())["model"]
    vocab: dict[str, int] = dict(model["vocab"])
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    tokenizer = Qwen2TokenizerFast(vocab=vocab, merges=merges, model_max_length=512,
                                   additional_special_tokens=list(_SPECIAL_TOKENS[1:]))
    tokenizer.chat_template = _CHAT_TEMPLATE
    return tokenizer


def _save_pipeline(pipe: Any, directory: Path) -> None:
    pipe.save_pretrained(str(directory), safe_serialization=True)
