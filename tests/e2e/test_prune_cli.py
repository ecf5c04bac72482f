"""`neffcache prune DIR --matrix M` end to end: a root that held two fingerprints' entries
(NEURON_CC_FLAGS changed between restores) goes back to the current one's; plan first, refused
without --yes off a terminal, refused while a restore holds DIR."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.conftest import CELL_64, Cli

pytestmark = pytest.mark.s3
OLD, NEW = {"NEURON_CC_FLAGS": "--optlevel=1"}, {"NEURON_CC_FLAGS": "--optlevel=2"}


def size_of(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*.neff"))


@pytest.fixture
def grown(cli: Cli, matrix: Path, tmp_path: Path) -> Path:
    """DIR after restoring OLD's entry, then NEW's: both fingerprints' files in it."""
    out = tmp_path / "out"
    for flags, name in ((OLD, "old"), (NEW, "new")):
        src = tmp_path / name / "ab"
        src.mkdir(parents=True)
        (src / f"{name}.neff").write_bytes(name.encode() * 50_000)
        (src / "same.neff").write_bytes(b"shared by both")
        assert cli("push", "--matrix", str(matrix), "--cell", CELL_64, "--root",
                   f"neff={src.parent}", env=flags).code == 0
        assert cli("restore", str(matrix), "--to", str(out), "--cells", CELL_64,
                   env=flags).code == 0
    return out


def test_prune_plans_refuses_then_removes(cli: Cli, matrix: Path, grown: Path) -> None:
    before = size_of(grown)
    plan = cli("prune", str(grown), "--matrix", str(matrix), "--dry-run", "--json", env=NEW)
    assert plan.code == 0, plan.stderr
    assert plan.json["dry_run"] and len(plan.json["pruned"]) == 1
    assert plan.json["files_to_remove"] == 1 and plan.json["files_shared"] == 1
    refused = cli("prune", str(grown), "--matrix", str(matrix), env=NEW)
    assert refused.code == 2 and "--yes" in refused.stderr and size_of(grown) == before
    done = cli("prune", str(grown), "--matrix", str(matrix), "--yes", env=NEW)
    assert done.code == 0, done.stderr
    assert "pruned 1 entry(ies)" in done.stdout
    assert sorted(p.name for p in (grown / "neff/ab").glob("*.neff")) == ["new.neff", "same.neff"]
    assert size_of(grown) == before - 150_000
    # NEW is still complete: the next boot's restore fetches nothing
    again = cli("restore", str(matrix), "--to", str(grown), "--cells", CELL_64, "--json",
                env=NEW)
    assert again.code == 0 and again.json["files_fetched"] == 0


def test_prune_refuses_while_a_restore_holds_dir(cli: Cli, matrix: Path, grown: Path) -> None:
    from neffcache.restore import lock_destination

    with lock_destination(str(grown), deadline=time.monotonic(), who="restore"):
        r = cli("prune", str(grown), "--matrix", str(matrix), "--yes", env=NEW)
    assert r.code == 1 and "a restore is running there" in r.stderr
    assert (grown / "neff/ab/old.neff").exists()


def test_prune_of_a_directory_that_is_no_destination(cli: Cli, matrix: Path,
                                                     tmp_path: Path) -> None:
    r = cli("prune", str(tmp_path), "--matrix", str(matrix), "--yes")
    assert r.code == 2 and "not a restore destination" in r.stderr
