"""`neffcache push` input handling: --cell-json, backend choice, bad --root values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import CELL_64, Cli, restored_tree

pytestmark = pytest.mark.s3


def test_push_from_cell_json_then_restore_through_the_matrix(cli: Cli, matrix: Path,
                                                             tmp_path: Path) -> None:
    from neffcache.matrix_io import load_matrix

    cell = next(c for c in load_matrix(matrix).cells if c.id == CELL_64)
    (tmp_path / "cell.json").write_text(json.dumps(cell.to_json()))
    src = tmp_path / "src"
    (src / "ab" / "cd").mkdir(parents=True)
    (src / "ab" / "cd" / "k.neff").write_bytes(b"neff bytes")
    no_backend = cli("push", "--cell-json", str(tmp_path / "cell.json"), "--root", f"neff={src}")
    assert no_backend.code == 2 and "--backend" in no_backend.stderr
    r = cli("push", "--cell-json", "-", "--backend", "neuron", "--root", f"neff={src}",
            "--json", stdin=json.dumps(cell.to_json()))
    assert r.code == 0, r.stderr
    assert r.json["cell_id"] == CELL_64 and r.json["created"]
    out = tmp_path / "out"
    assert cli("restore", str(matrix), "--to", str(out), "--cells", CELL_64).code == 0
    assert restored_tree(out / "neff") == {"ab/cd/k.neff": b"neff bytes"}


@pytest.mark.parametrize("args, needle", [
    (["--root", "neff"], "expected NAME=DIR"),
    (["--root", "inductor=/tmp"], "no cache root 'inductor'"),
    (["--root", "neff=/nonexistent/dir"], "not a directory"),
])
def test_push_refuses_bad_roots(cli: Cli, matrix: Path, args: list[str], needle: str) -> None:
    r = cli("push", "--matrix", str(matrix), "--cell", CELL_64, *args)
    assert r.code == 2 and needle in r.stderr
    assert r.stderr.count("\n") <= 2


def test_push_refuses_an_unknown_cell(cli: Cli, matrix: Path, tmp_path: Path) -> None:
    r = cli("push", "--matrix", str(matrix), "--cell", "tiny/compile/1x1/b1/tp1",
            "--root", f"neff={tmp_path}")
    assert r.code == 2 and "no such cell" in r.stderr
