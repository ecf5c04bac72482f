"""Back-fill planning: which files are runtime-compiled, which cell gets them, and that locks,
temp files and dotfiles are never captured."""

from __future__ import annotations

from pathlib import Path

import pytest

from neffcache.backends import NEURON, root_dirs
from neffcache.errors import UsageError
from neffcache.fingerprint import build_fingerprint
from neffcache.manifest import FileRecord, Manifest
from neffcache.matrix import Cell
from neffcache.precompile.backfill_cell import (
    EXISTS,
    NOTHING,
    PUBLISH,
    hash_new_files,
    plan_backfill,
)
from neffcache.precompile.capture import scan_roots
from neffcache.precompile.hit_check import FileState

FP = build_fingerprint("neuron", {"target": "trn2"})
SHA = "0" * 64


def _cell(shape: int) -> Cell:
    return Cell("klein", "diffusers:Flux2KleinPipeline", "m", "main", "bfloat16", "compile",
                ("transformer",), shape, shape, 1, 1)


A, B, C = _cell(64), _cell(96), _cell(128)


def _entry(cell: Cell, *paths: str) -> Manifest:
    return Manifest(cell, FP, tuple(FileRecord("neff", p, 1, SHA) for p in paths))


def _present(*paths: str) -> list[FileState]:
    return [FileState("neff", p, 1, 0) for p in paths]


def test_new_files_go_to_the_only_cell_without_an_entry() -> None:
    plan = plan_backfill(_present("aa/x.neff", "bb/y.neff"), [A, B], FP,
                         {A.id: _entry(A, "aa/x.neff")})
    assert plan.action == PUBLISH and plan.cell == B
    assert [f.path for f in plan.new_files] == ["bb/y.neff"]
    assert plan.restored_files == 1


def test_named_cell_wins_and_an_existing_entry_is_never_replaced() -> None:
    entries = {A.id: _entry(A, "aa/x.neff")}
    named = plan_backfill(_present("aa/x.neff", "cc/z.neff"), [A, B, C], FP, entries, C.id)
    assert (named.action, named.cell) == (PUBLISH, C)
    exists = plan_backfill(_present("aa/x.neff", "cc/z.neff"), [A, B], FP, entries, A.id)
    assert exists.action == EXISTS and "immutable" in exists.reason
    assert len(exists.new_files) == 1


def test_ambiguous_or_unattributable_files_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="2 cells have no entry"):
        plan_backfill(_present("cc/z.neff"), [A, B], FP, {})
    with pytest.raises(UsageError, match="every cell of the matrix has an entry"):
        plan_backfill(_present("cc/z.neff"), [A], FP, {A.id: _entry(A, "aa/x.neff")})
    with pytest.raises(UsageError, match="no such cell"):
        plan_backfill(_present("cc/z.neff"), [A], FP, {}, "klein/compile/1x1/b1/tp1")


def test_nothing_new_publishes_nothing() -> None:
    plan = plan_backfill(_present("aa/x.neff"), [A, B], FP, {A.id: _entry(A, "aa/x.neff")})
    assert plan.action == NOTHING and plan.new_files == ()


def test_locks_temp_files_and_dotfiles_are_never_captured(tmp_path: Path) -> None:
    dirs = root_dirs(NEURON, str(tmp_path))
    neff = Path(dirs["neff"])
    for rel in ("ab/cd/abcd.neff", "ab/cd/abcd.neff.4242.tmp", "ab/cd/abcd.lock",
                ".neffcache-state.json", "ab/.neffcache-x.tmp", "tmpXYZ/k.neff"):
        (neff / rel).parent.mkdir(parents=True, exist_ok=True)
        (neff / rel).write_bytes(b"NEFF" + rel.encode())
    Path(dirs["hlo"]).mkdir()
    present = scan_roots(NEURON, dirs)
    assert [f.id for f in present] == ["neff/ab/cd/abcd.neff"]
    plan = plan_backfill(present, [A], FP, {})
    records = hash_new_files(plan, dirs)
    assert [(r.root, r.path, r.size) for r in records] == \
        [("neff", "ab/cd/abcd.neff", len(b"NEFFab/cd/abcd.neff"))]
