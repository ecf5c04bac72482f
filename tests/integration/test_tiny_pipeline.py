"""The tiny Flux2Klein pipeline builds locally, deterministically and idempotently, and runs.

Eager only (no torch.compile) so the module stays well under 30 s on two CPU cores.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("diffusers")
pytest.importorskip("transformers")

from neffcache.demo import tiny_pipeline  # noqa: E402
from neffcache.demo.tiny_pipeline import (  # noqa: E402
    MARKER_NAME,
    build_tiny_flux2_klein,
    is_complete_build,
)
from neffcache.errors import UsageError  # noqa: E402
from tests.support.warmup import load_pipeline, timed_call, warm_call  # noqa: E402

pytestmark = pytest.mark.compile


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_HUB_OFFLINE", "1")
    try:
        yield build_tiny_flux2_klein(tmp_path_factory.mktemp("tiny") / "flux2-klein", seed=0)
    finally:
        mp.undo()


def test_build_is_complete_small_and_left_no_temp_dir(built: Path) -> None:
    assert is_complete_build(built)
    assert (built / "model_index.json").is_file()
    size = sum(p.stat().st_size for p in built.rglob("*") if p.is_file())
    assert 2_000_000 < size < 20_000_000
    assert [p.name for p in built.parent.iterdir()] == [built.name]


def test_rebuild_is_a_no_op(built: Path) -> None:
    before = {p: p.stat().st_mtime_ns for p in built.rglob("*")}
    assert build_tiny_flux2_klein(built, seed=0) == built
    assert {p: p.stat().st_mtime_ns for p in built.rglob("*")} == before


def test_same_seed_gives_same_bytes(built: Path, tmp_path: Path) -> None:
    again = build_tiny_flux2_klein(tmp_path / "again", seed=0)
    assert _digests(again) == _digests(built)


def test_refuses_a_directory_it_did_not_build(built: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="seed"):
        build_tiny_flux2_klein(built, seed=1)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("user data")
    with pytest.raises(UsageError, match=MARKER_NAME):
        build_tiny_flux2_klein(foreign)
    assert (foreign / "keep.txt").read_text() == "user data"


def test_a_crash_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(pipe: object, directory: Path) -> None:
        (directory / "half-written").write_text("x")
        raise RuntimeError("disk full")

    monkeypatch.setattr(tiny_pipeline, "_save_pipeline", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        build_tiny_flux2_klein(tmp_path / "model")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("height", "width", "batch"), [(32, 32, 1), (64, 96, 2)])
def test_eager_call_returns_latents_of_the_requested_shape(
    built: Path, height: int, width: int, batch: int
) -> None:
    pipe = load_pipeline(built, dtype="float32", device="cpu")
    seconds, latents = timed_call(pipe, height, width, batch)
    factor = pipe.vae_scale_factor
    assert factor == 8
    assert tuple(latents.shape) == (
        batch,
        pipe.vae.config.latent_channels,
        height // factor,
        width // factor,
    )
    assert seconds > 0
    assert warm_call(pipe, height, width, batch) > 0
