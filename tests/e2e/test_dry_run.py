"""`neffcache restore --dry-run`: the plan (files, bytes, packs and blobs, requests) from the
store's manifests, on S3 (moto) and on a local directory store; nothing fetched or written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import CELL_64, CELL_128, Cli, restored_tree
from tests.support.synthetic import make_neff_cache

pytestmark = pytest.mark.s3  # the cli fixture's environment comes with the moto server


@pytest.mark.parametrize("where", ["s3", "local"])
def test_dry_run_prints_the_plan_and_writes_nothing(cli: Cli, matrix: Path, tmp_path: Path,
                                                    where: str) -> None:
    env = {} if where == "s3" else {"NEFFCACHE_STORE": str(tmp_path / "store")}
    cache = make_neff_cache(tmp_path / "neff", seed=7, count=300, large=1, duplicate_ratio=0)
    push = cli("push", "--matrix", str(matrix), "--cell", CELL_64, "--root",
               f"neff={cache.root}", "--json", env=env)
    assert push.code == 0, push.stderr
    out = tmp_path / "out"

    dry = cli("restore", str(matrix), "--to", str(out), "--cells", CELL_64, "--cells",
              CELL_128, "--dry-run", "--json", env=env)
    assert dry.code == 3, dry.stderr  # CELL_128 has no entry: the restore would be partial
    doc = dry.json
    assert doc["dry_run"] and doc["status"] == "partial"
    assert doc["cells_missing"] == [CELL_128] and doc["entries"] == [push.json["entry_key"]]
    assert doc["files_to_fetch"] > 100 and doc["files_present"] == 0
    assert doc["requests"] == len(doc["fetch"]) == \
        doc["pack_runs"] + doc["blob_gets"] + doc["blob_parts"]
    assert doc["pack_runs"] >= 1 and set(doc["packs"]) == \
        {u["pack"] for u in doc["fetch"] if u["kind"] == "pack"}
    assert sum(u["files"] for u in doc["fetch"] if u["kind"] == "pack") + \
        sum(len(u["paths"]) for u in doc["fetch"] if u["kind"] == "blob") + \
        sum(len(u["paths"]) for u in doc["fetch"] if u["kind"] == "part" and u["part"] == 1) \
        == doc["files_to_fetch"]
    assert not out.exists()  # nothing created, nothing fetched

    text = cli("restore", str(matrix), "--to", str(out), "--cells", CELL_64, "--dry-run",
               env=env)
    assert text.code == 0, text.stderr
    assert text.stdout.startswith(f"dry run: would fetch {doc['files_to_fetch']} files")
    assert not out.exists()

    real = cli("restore", str(matrix), "--to", str(out), "--cells", CELL_64, "--json", env=env)
    assert real.code == 0, real.stderr
    assert real.json["files_fetched"] == doc["files_to_fetch"]
    assert real.json["bytes_fetched"] == doc["bytes_to_fetch"]
    files = restored_tree(out / "neff")
    files = {k: v for k, v in files.items() if not k.startswith(".neffcache")}
    again = cli("restore", str(matrix), "--to", str(out), "--cells", CELL_64, "--dry-run",
                "--json", env=env)
    assert again.code == 0 and again.json["files_to_fetch"] == 0
    assert again.json["files_present"] == len(files) and again.json["fetch"] == []


def test_dry_run_refuses_print_env(cli: Cli, matrix: Path, tmp_path: Path) -> None:
    r = cli("restore", str(matrix), "--to", str(tmp_path / "o"), "--dry-run", "--print-env")
    assert r.code == 2 and "--dry-run" in r.stderr
