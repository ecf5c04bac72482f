"""`neffcache coverage`, `ls` and `reindex` on the embedded default (SQLite + local store)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from neffcache.cli import run
from neffcache.cli.coverage import render_coverage
from neffcache.fingerprint import collect_fingerprint
from neffcache.index import open_index
from neffcache.manifest import encode_manifest
from neffcache.matrix import Cell
from neffcache.matrix_io import load_matrix
from neffcache.store.base import manifest_key
from neffcache.store.local import LocalStore
from tests.unit.test_index_factories import make_fingerprint, make_manifest

MATRIX = """
backend = "inductor"
[[pipelines]]
name = "tiny"
class = "diffusers:Flux2KleinPipeline"
model = "/models/tiny"
modes = ["compile", "eager"]
shapes = ["64x64", "128x128"]
"""


@pytest.fixture
def matrix(tmp_path: Path) -> Path:
    path = tmp_path / "matrix.toml"
    path.write_text(MATRIX)
    return path


@pytest.fixture
def cells(matrix: Path) -> tuple[Cell, ...]:
    return load_matrix(matrix).cells


def embedded_url(home: Path) -> str:
    return f"sqlite:///{home / 'index.db'}"


def seed(home: Path, cells: tuple[Cell, ...]) -> str:
    """This host: cell 0 ready, cell 1 failed; another fingerprint: cell 2 ready."""
    here = collect_fingerprint("inductor", os.environ)
    with open_index(embedded_url(home), auto_upgrade=True) as ix:
        ix.record_entry(make_manifest(cells[0], here), str(home / "store"))
        ix.record_failure(None, cells[1], here, 1, 3.0, "RuntimeError: out of memory")
        ix.record_entry(make_manifest(cells[2], make_fingerprint(42)), str(home / "store"))
    return here.key


def test_coverage_table(neffcache_home: Path, matrix: Path, cells: tuple[Cell, ...],
                        capsys: pytest.CaptureFixture[str]) -> None:
    here = seed(neffcache_home, cells)
    assert run(["coverage", str(matrix)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["CELL", f"{here[:12]}*", make_fingerprint(42).key[:12]]
    assert lines[1].split() == [cells[0].id, "ready", "missing"]
    assert lines[2].split() == [cells[1].id, "failed(1)", "missing"]
    assert lines[3].split() == [cells[2].id, "missing", "ready"]
    assert f"{here[:12]}*  inductor  1      0            1       2" in out  # in progress: 0


def test_coverage_json_and_cell_glob(neffcache_home: Path, matrix: Path,
                                     cells: tuple[Cell, ...],
                                     capsys: pytest.CaptureFixture[str]) -> None:
    here = seed(neffcache_home, cells)
    assert run(["coverage", str(matrix), "--json", "--cells", "tiny/compile/*"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["here"] == here and doc["backend"] == "inductor"
    assert [c["id"] for c in doc["cells"]] == [c.id for c in cells if c.mode == "compile"]
    failed = [r for r in doc["rows"] if r["status"] == "failed"]
    assert failed[0]["log_tail"] == "RuntimeError: out of memory"
    assert failed[0]["exit_status"] == 1
    fps = {f["key"]: f for f in doc["fingerprints"]}
    assert fps[here]["here"] is True and (fps[here]["ready"], fps[here]["failed"]) == (1, 1)


def test_coverage_on_a_fresh_home_creates_the_embedded_index(
        neffcache_home: Path, matrix: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["coverage", str(matrix), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {r["status"] for r in doc["rows"]} == {"missing"}
    assert (neffcache_home / "index.db").is_file()


def test_coverage_of_a_bad_matrix_is_a_usage_error(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["coverage", str(tmp_path / "missing.toml")]) == 2
    assert "matrix file not found" in capsys.readouterr().err


def test_render_coverage_marks_this_host() -> None:
    from neffcache.index.coverage_engine.rules import CoverageFacts, build_coverage
    from tests.unit.test_index_factories import make_cell

    report = build_coverage([make_cell(1)], [make_fingerprint(1)], CoverageFacts())
    text = render_coverage(report)
    assert f"{make_fingerprint(1).short}*" in text and "missing" in text


def test_ls_table_and_json(neffcache_home: Path, cells: tuple[Cell, ...],
                           capsys: pytest.CaptureFixture[str]) -> None:
    seed(neffcache_home, cells)
    assert run(["ls"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["CELL", "FINGERPRINT", "BACKEND"]
    assert len(out) == 3
    assert run(["ls", "--json", "--cell", "tiny/eager/*"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["count"] == 1 and doc["entries"][0]["cell_id"] == cells[2].id
    assert run(["ls", "--cell", "nothing/*"]) == 0
    assert capsys.readouterr().err.strip() == "no entries"


def test_ls_pages_with_after_cover_every_entry_once(neffcache_home: Path,
                                                    cells: tuple[Cell, ...],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    with open_index(embedded_url(neffcache_home), auto_upgrade=True) as ix:
        for i, cell in enumerate(cells):
            for n in (1, 2):
                ix.record_entry(make_manifest(cell, make_fingerprint(n * 100 + i)), "s3://b")
    assert run(["ls", "--json"]) == 0
    whole = [e["entry_key"] for e in json.loads(capsys.readouterr().out)["entries"]]
    seen: list[str] = []
    after: list[str] = []
    while True:
        assert run(["ls", "--json", "--limit", "2", *after]) == 0
        doc = json.loads(capsys.readouterr().out)
        seen += [e["entry_key"] for e in doc["entries"]]
        if doc["next"] is None:
            break
        after = ["--after", doc["next"]]
    assert len(whole) > 2 and seen == whole
    assert run(["ls", "--limit", "2"]) == 0
    assert "--after" in capsys.readouterr().err
    assert run(["ls", "--after", "bogus"]) == 2


def test_reindex_from_the_store(neffcache_home: Path, cells: tuple[Cell, ...],
                                capsys: pytest.CaptureFixture[str]) -> None:
    store = LocalStore(neffcache_home / "store")
    fp = make_fingerprint(7)
    for cell in cells:
        m = make_manifest(cell, fp)
        store.put(manifest_key(m.entry_key), io.BytesIO(encode_manifest(m)))
    assert run(["reindex", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["scanned"], doc["added"], doc["invalid"]) == (4, 4, [])
    assert doc["store"] == store.url

    store.put(manifest_key("0" * 64), io.BytesIO(b"[]"))
    assert run(["reindex"]) == 4
    captured = capsys.readouterr()
    assert "5 manifests, 0 added, 4 already indexed, 0 removed, 1 invalid" in captured.out
    assert "expected a JSON object" in captured.err
    assert "Hint: neffcache repair --store" in captured.err


@pytest.mark.parametrize("command", ["coverage", "ls", "reindex", "db"])
def test_help_has_examples(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run([command, "--help"]) == 0
    assert "Examples:" in capsys.readouterr().out
