"""`neffcache gc` on S3: only unreferenced blobs go, never without consent, never a young
publish's blobs; restores still work afterwards."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from neffcache.hashing import sha256_bytes
from neffcache.store import blob_key
from tests.e2e.conftest import CELL_64, Cli, restored_tree, split_url
from tests.support.synthetic import make_neff_cache

pytestmark = pytest.mark.s3


def test_gc_deletes_only_unreferenced_blobs(cli: Cli, matrix: Path, tmp_path: Path, s3: Any,
                                            s3_url: str) -> None:
    cache = make_neff_cache(tmp_path / "neff", seed=41, count=15, large=0)
    assert cli("push", "--matrix", str(matrix), "--cell", CELL_64,
               "--root", f"neff={cache.root}").code == 0
    bucket, prefix = split_url(s3_url)
    orphan, young = b"left by a crashed publish", b"a publish in progress"
    for data in (orphan, young):
        s3.put_object(Bucket=bucket, Key=f"{prefix}/{blob_key(sha256_bytes(data))}", Body=data)
    intent = {"entry_key": "f" * 64, "created_at": time.time(), "host": "ci",
              "blobs": [sha256_bytes(young)]}
    s3.put_object(Bucket=bucket, Key=f"{prefix}/pending/{'f' * 64}.1.json",
                  Body=json.dumps(intent).encode())

    dry = cli("gc", "--dry-run", "--json")
    assert dry.code == 0, dry.stderr
    assert dry.json["delete"] == [blob_key(sha256_bytes(orphan))]
    assert dry.json["spared"] == [blob_key(sha256_bytes(young))]
    assert dry.json["deleted"] == [] and dry.json["dry_run"]

    refused = cli("gc")  # stdin is not a terminal
    assert refused.code == 2 and "--yes" in refused.stderr

    def exists(data: bytes) -> bool:
        key = f"{prefix}/{blob_key(sha256_bytes(data))}"
        return s3.list_objects_v2(Bucket=bucket, Prefix=key)["KeyCount"] == 1

    assert exists(orphan)
    done = cli("gc", "--yes", "--json")
    assert done.code == 0, done.stderr
    assert done.json["deleted_count"] == 1
    assert not exists(orphan) and exists(young)
    assert cli("verify").code == 0
    out = tmp_path / "out"
    assert cli("restore", str(matrix), "--to", str(out), "--cells", CELL_64).code == 0
    assert restored_tree(out / "neff") == cache.files


def test_gc_refuses_a_grace_below_the_floor_unless_forced(cli: Cli, s3: Any,
                                                          s3_url: str) -> None:
    bucket, prefix = split_url(s3_url)
    orphan = b"left by a crashed publish"
    s3.put_object(Bucket=bucket, Key=f"{prefix}/{blob_key(sha256_bytes(orphan))}", Body=orphan)
    short = cli("gc", "--yes", "--grace", "0")
    assert short.code == 2
    assert "600 s floor" in short.stderr and "Hint:" in short.stderr and "--force" in short.stderr
    assert s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["KeyCount"] == 1  # nothing touched
    forced = cli("gc", "--yes", "--grace", "0", "--force", "--json")
    assert forced.code == 0, forced.stderr
    assert forced.json["deleted"] == [blob_key(sha256_bytes(orphan))]
    assert forced.json["uploads"] == {"listed": 0, "abort": [], "spared": [], "unknown": [],
                                      "aborted": []}
