"""push → restore through S3 (moto server), via the CLI: byte-identical, then idempotent."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import CELL_64, CELL_128, CELL_256, Cli, restored_tree, temps_under
from tests.support.synthetic import make_neff_cache

pytestmark = pytest.mark.s3


def test_2000_files_round_trip_byte_identical_and_rerun_fetches_nothing(
        cli: Cli, matrix: Path, tmp_path: Path) -> None:
    cache = make_neff_cache(tmp_path / "neff", seed=7, count=2000, large=3,
                            duplicate_ratio=0.05)
    push = cli("push", "--matrix", str(matrix), "--cell", CELL_64,
               "--root", f"neff={cache.root}", "--compile-seconds", "42.5", "--json")
    assert push.code == 0, push.stderr
    p = push.json
    assert p["created"] and p["files"] == 2000
    assert p["blobs_uploaded"] == cache.unique_contents
    assert p["store"].startswith("s3://")

    out = tmp_path / "restored"
    first = cli("restore", str(matrix), "--to", str(out), "--cells", CELL_64, "--json")
    assert first.code == 0, first.stderr
    r = first.json
    assert r["cells_restored"] == [CELL_64] and r["exit_code"] == 0
    assert r["files_fetched"] == 2000 and r["files_skipped"] == 0
    assert r["bytes_fetched"] == sum(len(b) for b in set(cache.files.values()))
    assert r["fingerprint_key"] == p["fingerprint_key"]
    assert restored_tree(out / "neff") == cache.files
    assert temps_under(out) == []

    second = cli("restore", str(matrix), "--to", str(out), "--cells", CELL_64, "--json")
    assert second.code == 0, second.stderr
    assert (second.json["files_fetched"], second.json["files_skipped"]) == (0, 2000)
    assert second.json["bytes_fetched"] == 0

    whole = cli("restore", str(matrix), "--to", str(out), "--json")
    assert whole.code == 3
    assert whole.json["cells_missing"] == [CELL_128, CELL_256]
    assert whole.json["status"] == "partial"
    assert "2 of 3 cells have no entry" in whole.stderr

    coverage = cli("coverage", str(matrix), "--json")
    assert coverage.code == 0, coverage.stderr
    status = {(r["cell_id"], r["fingerprint_key"]): r["status"] for r in coverage.json["rows"]}
    fp = p["fingerprint_key"]
    assert status == {(CELL_64, fp): "ready", (CELL_128, fp): "missing",
                      (CELL_256, fp): "missing"}


def test_print_env_is_evalable_and_creates_scratch_dirs(cli: Cli, matrix: Path,
                                                        tmp_path: Path) -> None:
    cache = make_neff_cache(tmp_path / "neff", seed=8, count=10, large=0)
    assert cli("push", "--matrix", str(matrix), "--cell", CELL_64,
               "--root", f"neff={cache.root}").code == 0
    out = tmp_path / "with space"
    r = cli("restore", str(matrix), "--to", str(out), "--cells", CELL_64, "--print-env")
    assert r.code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert all(line.startswith("export ") for line in lines)
    assert f"export TORCH_NEURONX_NEFF_CACHE_DIR='{out}/neff'" in lines
    assert (out / "neff-locks").is_dir()
    assert "restored 1/1 cells" in r.stderr
    both = cli("restore", str(matrix), "--to", str(out), "--print-env", "--json")
    assert both.code == 2 and "choose one" in both.stderr


def test_two_entries_sharing_blobs_store_them_once(cli: Cli, matrix: Path, tmp_path: Path,
                                                   s3, s3_url: str) -> None:  # type: ignore[no-untyped-def]
    from tests.e2e.conftest import split_url

    a = make_neff_cache(tmp_path / "a", seed=11, count=40, large=0, duplicate_ratio=0)
    b = make_neff_cache(tmp_path / "b", seed=11, count=40, large=0, duplicate_ratio=0)
    (b.root / "only-b.neff").write_bytes(b"b's own graph")
    first = cli("push", "--matrix", str(matrix), "--cell", CELL_64, "--root", f"neff={a.root}",
                "--json")
    second = cli("push", "--matrix", str(matrix), "--cell", CELL_128, "--root",
                 f"neff={b.root}", "--json")
    assert first.code == 0 and second.code == 0, second.stderr
    assert second.json["blobs_uploaded"] == 1 and second.json["blobs_skipped"] == 40
    bucket, prefix = split_url(s3_url)
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=f"{prefix}/blobs/") for o in page.get("Contents", [])]
    assert len(keys) == 41
    out = tmp_path / "out"
    both = cli("restore", str(matrix), "--to", str(out), "--cells", "tiny/*/64x64/*",
               "--cells", "tiny/*/128x128/*", "--json")
    assert both.code == 0, both.stderr
    assert sorted(both.json["cells_restored"]) == sorted([CELL_64, CELL_128])
    assert restored_tree(out / "neff") == {**a.files, "only-b.neff": b"b's own graph"}
