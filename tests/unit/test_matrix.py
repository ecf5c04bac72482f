"""Matrix parsing and expansion (pure): errors name the field, keys are stable, shards split."""

from __future__ import annotations

import pytest

from neffcache.errors import MatrixError, UsageError
from neffcache.matrix import Cell, parse_matrix, select_cells, shard_cells

BASE = """
backend = "neuron"
[[pipelines]]
name = "flux2-klein"
class = "diffusers:Flux2KleinPipeline"
model = "black-forest-labs/FLUX.2-klein"
modes = ["compile", "eager"]
shapes = ["1024x1024", "512x768"]
batch_sizes = [1, 2]
tp_degrees = [1, 4]
"""


def test_expands_every_combination_in_declared_order() -> None:
    m = parse_matrix(BASE)
    assert m.backend == "neuron"
    assert len(m.cells) == 2 * 2 * 2 * 2
    assert m.cells[0].id == "flux2-klein/compile/1024x1024/b1/tp1"
    assert m.cells[-1].id == "flux2-klein/eager/512x768/b2/tp4"
    assert all(c.components == () for c in m.cells if c.mode == "eager")
    assert all(c.components == ("transformer",) for c in m.cells if c.mode == "compile")


@pytest.mark.parametrize("replace, by, field", [
    ('shapes = ["1024x1024", "512x768"]', 'shapes = ["1024x1001"]', ".shapes:"),
    ('shapes = ["1024x1024", "512x768"]', 'shapes = ["big"]', ".shapes:"),
    ('modes = ["compile", "eager"]', 'modes = ["fast"]', ".mode:"),
    ('batch_sizes = [1, 2]', 'batch_sizes = [0]', ".batch_sizes:"),
    ('tp_degrees = [1, 4]', 'tp_degrees = "4"', ".tp_degrees:"),
    ('class = "diffusers:Flux2KleinPipeline"', 'class = "Flux2KleinPipeline"', ".class:"),
    ('name = "flux2-klein"', 'name = "flux 2"', ".name:"),
    ('model = "black-forest-labs/FLUX.2-klein"', 'model = 3', ".model:"),
])
def test_errors_name_the_file_and_field(replace: str, by: str, field: str) -> None:
    with pytest.raises(MatrixError) as info:
        parse_matrix(BASE.replace(replace, by), source="m.toml")
    msg = str(info.value)
    assert msg.startswith("m.toml: pipelines[0]")
    assert field in msg
    assert "\n" not in msg


def test_unknown_keys_and_backend_are_refused() -> None:
    with pytest.raises(MatrixError, match=r"m.toml: unknown top-level key 'pipeline'"):
        parse_matrix('pipeline = 1\n' + BASE, source="m.toml")
    with pytest.raises(MatrixError, match=r"pipelines\[0\]: unknown key 'step'"):
        parse_matrix(BASE + 'step = 1\n', source="m.toml")
    with pytest.raises(MatrixError, match=r"backend: expected one of"):
        parse_matrix(BASE.replace('"neuron"', '"cuda"'), source="m.toml")
    with pytest.raises(MatrixError, match=r"not valid TOML"):
        parse_matrix("[[pipelines]\n", source="m.toml")


def test_matrix_error_is_a_usage_error() -> None:
    assert issubclass(MatrixError, UsageError)


def test_cell_key_is_stable_and_ignores_warmup_steps() -> None:
    a = parse_matrix(BASE).cells
    b = parse_matrix(BASE + "warmup_steps = 5\n").cells
    assert [c.key for c in a] == [c.key for c in b]
    # Pinned: a change here silently orphans every entry in every store.
    cell = Cell("p", "diffusers:P", "m", "main", "bfloat16", "compile", ("transformer",),
                64, 64, 1, 1)
    assert cell.key == Cell.from_json(cell.to_json()).key
    assert cell.key == "1c960c589a24dfaaf1f4fbc61301a102aee0e4114884f6676c7ee03c8adbbebc"


def test_cell_keys_differ_per_dimension() -> None:
    keys = {c.key for c in parse_matrix(BASE).cells}
    assert len(keys) == 16


def test_shards_partition_the_cells_evenly() -> None:
    cells = parse_matrix(BASE).cells
    for n in (1, 3, 5, 16, 20):
        shards = [shard_cells(cells, i, n) for i in range(n)]
        flat = [c.id for s in shards for c in s]
        assert sorted(flat) == sorted(c.id for c in cells)
        sizes = [len(s) for s in shards]
        assert max(sizes) - min(sizes) <= 1
    # Order of the input does not change the split.
    assert shard_cells(list(reversed(cells)), 1, 3) == shard_cells(cells, 1, 3)
    with pytest.raises(MatrixError, match="--shard"):
        shard_cells(cells, 3, 3)


def test_select_cells_by_glob() -> None:
    cells = parse_matrix(BASE).cells
    assert len(select_cells(cells, ["flux2-klein/compile/*"])) == 8
    assert len(select_cells(cells, ["*/b2/tp4", "*/512x768/b1/tp1"])) == 4 + 2
    assert select_cells(cells, None) == cells
    assert select_cells(cells, ["nope/*"]) == ()
