"""Packs through the CLI on S3 (moto): a corrupt packed member is exit 4 and never installed;
the rerun is a no-op that does not need the store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from neffcache.hashing import sha256_bytes
from neffcache.store.base import blob_key, manifest_key, pack_key
from tests.e2e.conftest import CELL_64, Cli, restored_tree, split_url, temps_under
from tests.support.synthetic import make_neff_cache

pytestmark = pytest.mark.s3


def test_corrupt_packed_member_without_its_blob_exit_4_then_noop_rerun_without_store(
        cli: Cli, matrix: Path, tmp_path: Path, s3: Any, s3_url: str) -> None:
    cache = make_neff_cache(tmp_path / "neff", seed=41, count=300, large=0, duplicate_ratio=0)
    push = cli("push", "--matrix", str(matrix), "--cell", CELL_64, "--root",
               f"neff={cache.root}", "--json")
    assert push.code == 0, push.stderr
    assert push.json["packs"] >= 1 and push.json["packs_uploaded"] == push.json["packs"]

    bucket, prefix = split_url(s3_url)
    key = push.json["entry_key"]
    manifest = json.loads(s3.get_object(Bucket=bucket,
                                        Key=f"{prefix}/{manifest_key(key)}")["Body"].read())
    pack = manifest["packs"][0]
    sha, offset, size = pack["members"][len(pack["members"]) // 2]
    pkey = f"{prefix}/{pack_key(pack['sha256'])}"
    body = bytearray(s3.get_object(Bucket=bucket, Key=pkey)["Body"].read())
    body[offset + size // 2] ^= 0xFF
    s3.put_object(Bucket=bucket, Key=pkey, Body=bytes(body))
    s3.delete_object(Bucket=bucket, Key=f"{prefix}/{blob_key(sha)}")  # else it comes from there

    out = tmp_path / "out"
    r = cli("restore", str(matrix), "--to", str(out), "--cells", CELL_64, "--json")
    assert r.code == 4, r.stderr
    victims = {p for p, b in cache.files.items() if sha256_bytes(b) == sha}
    assert {f["path"] for f in r.json["files_failed"]} == victims
    assert "corrupt" in r.json["files_failed"][0]["error"]
    got = restored_tree(out / "neff")
    assert got == {p: b for p, b in cache.files.items() if p not in victims}
    assert temps_under(out) == []

    s3.put_object(Bucket=bucket, Key=pkey, Body=bytes(body[:offset]) +
                  cache.files[sorted(victims)[0]] + bytes(body[offset + size:]))
    fixed = cli("restore", str(matrix), "--to", str(out), "--cells", CELL_64, "--json")
    assert fixed.code == 0, fixed.stderr
    assert restored_tree(out / "neff") == cache.files

    # Everything in place: answered from the local manifest copy, even with no store at all.
    dead = cli("restore", str(matrix), "--to", str(out), "--cells", CELL_64, "--json",
               env={"AWS_ENDPOINT_URL": "http://127.0.0.1:9"})
    assert dead.code == 0, dead.stderr
    assert (dead.json["files_fetched"], dead.json["files_skipped"]) == (0, 300)
