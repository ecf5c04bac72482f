"""``matrix.cell_keys`` gives each cell's own ``key`` (the digest of its canonical JSON)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from neffcache.matrix import Cell, cell_keys, parse_matrix

_text = st.text(min_size=0, max_size=12)  # any unicode: quotes, %, NUL, non-ASCII
_int = st.integers(min_value=-(2**40), max_value=2**40)


@given(st.lists(st.builds(Cell, _text, _text, _text, _text, _text, _text,
                          st.tuples(_text, _text), _int, _int, _int, _int), max_size=8))
def test_cell_keys_are_the_cells_keys_whatever_the_values(cells: list[Cell]) -> None:
    assert cell_keys(cells) == [c.key for c in cells]


def test_cell_keys_of_pipelines_sharing_a_template_and_of_placeholder_lookalikes() -> None:
    base = ("p", "diffusers:X", "/m", "main", "bf16")
    cells = [Cell(*base, mode, comps, h, w, b, tp)
             for mode in ("eager", "compile", "%(m)s", "\0m")
             for comps in ((), ("unet", "vae"), ("\0h",))
             for h, w in ((512, 512), (1024, 768)) for b in (1, 2) for tp in (1, 8)]
    cells.append(Cell("\0w", "c:D", "%s", "%%", "\0b", "x", (), 8, 8, 1, 1))
    assert cell_keys(cells) == [c.key for c in cells]


def test_cell_keys_of_a_parsed_matrix() -> None:
    m = parse_matrix('backend = "inductor"\n[[pipelines]]\nname = "flux"\n'
                     'class = "diffusers:Flux2KleinPipeline"\nmodel = "/models/x"\n'
                     'modes = ["eager", "compile"]\nshapes = ["512x512", "1024x1024"]\n'
                     'batch_sizes = [1, 4]\ntp_degrees = [1, 2]\n')
    assert len(m.cells) == 16
    assert cell_keys(m.cells) == [c.key for c in m.cells]
