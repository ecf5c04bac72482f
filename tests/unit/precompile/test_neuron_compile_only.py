"""Compile-only pre-compilation (CPU-only CI): the variables it sets, and eager cells refused."""

from __future__ import annotations

import pytest

from neffcache.backends import neuron_env
from neffcache.errors import UsageError
from neffcache.fingerprint import build_fingerprint
from neffcache.matrix import Cell
from neffcache.precompile.plan import REFUSE, SKIP, WARM, plan_precompile
from neffcache.precompile.session import neuron_overrides, refuse_if_nothing_left

FP = build_fingerprint("neuron", {"target": "trn2"})


def _cell(mode: str, shape: int = 64) -> Cell:
    components = () if mode == "eager" else ("transformer",)
    return Cell("klein", "diffusers:Flux2KleinPipeline", "m", "main", "bfloat16", mode,
                components, shape, shape, 1, 1)


def test_compile_only_sets_the_mode_and_the_target() -> None:
    env = neuron_overrides("neuron", "trn2", True, {})
    assert env == {neuron_env.COMPILE_ONLY: "1", neuron_env.PLATFORM_TARGET: "trn2"}
    assert neuron_overrides("neuron", "trn3", False, {}) == {neuron_env.PLATFORM_TARGET: "trn3"}
    assert neuron_overrides("neuron", None, False, {}) == {}
    # the target may come from the environment already
    assert neuron_overrides("neuron", None, True, {neuron_env.PLATFORM_TARGET: "trn3"}) == \
        {neuron_env.COMPILE_ONLY: "1"}


def test_compile_only_without_a_target_or_on_inductor_is_refused() -> None:
    with pytest.raises(UsageError, match="--compile-only needs --target"):
        neuron_overrides("neuron", None, True, {})
    with pytest.raises(UsageError, match="neuron backend"):
        neuron_overrides("inductor", "trn2", True, {})


def test_plan_refuses_eager_cells_with_the_reason_only_in_compile_only_mode() -> None:
    cells = [_cell("eager"), _cell("compile"), _cell("regional")]
    plans = plan_precompile(cells, FP, set(), compile_only=True)
    assert [p.action for p in plans] == [REFUSE, WARM, WARM]
    assert "only exist once ops run on a" in (plans[0].reason or "")
    assert plans[0].reason.startswith("compile-only: eager cells")  # type: ignore[union-attr]
    assert [p.action for p in plan_precompile(cells, FP, set())] == [WARM, WARM, WARM]
    # a cell already in the store is skipped, whatever its mode
    ready = {plans[0].entry_key}
    assert plan_precompile(cells, FP, ready, compile_only=True)[0].action == SKIP


def test_every_selected_cell_refused_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="all 2 selected cells are refused"):
        refuse_if_nothing_left([_cell("eager"), _cell("eager", 128)], True)
    refuse_if_nothing_left([_cell("eager"), _cell("compile")], True)
    refuse_if_nothing_left([_cell("eager")], False)
