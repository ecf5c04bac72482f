"""A local store path that does not exist is a configuration error for the commands that only
read (exit 2, nothing created); the commands that publish create it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.e2e.conftest import CELL_64, MATRIX
from tests.support.synthetic import make_neff_cache


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NEFFCACHE_INSTANCE_TYPE="trn2.48xlarge")
    return subprocess.run([sys.executable, "-m", "neffcache.cli", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_typo_in_store_is_exit_2_and_creates_nothing(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(MATRIX, encoding="utf-8")
    typo = tmp_path / "no-such-store"
    for args in (["restore", str(matrix), "--to", str(tmp_path / "out")],
                 ["verify"], ["gc", "--dry-run"]):
        run = _cli(*args, "--store", str(typo))
        assert run.returncode == 2, (args, run.stderr)
        assert f"store {typo}: no such directory" in run.stderr
        assert not typo.exists()


def test_push_creates_the_store_and_restore_then_reads_it(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(MATRIX, encoding="utf-8")
    store = tmp_path / "new-store"
    cache = make_neff_cache(tmp_path / "neff", seed=4, count=5, large=0)
    push = _cli("push", "--matrix", str(matrix), "--cell", CELL_64, "--root",
                f"neff={cache.root}", "--store", str(store))
    assert push.returncode == 0, push.stderr
    assert store.is_dir()
    restore = _cli("restore", str(matrix), "--to", str(tmp_path / "out"), "--cells", CELL_64,
                   "--store", str(store))
    assert restore.returncode == 0, restore.stderr
