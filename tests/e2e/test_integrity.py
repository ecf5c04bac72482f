"""Corrupt, truncated and hostile store content is detected (exit 4) and never installed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from neffcache.documents import digest_of
from neffcache.hashing import sha256_bytes
from neffcache.store import blob_key, manifest_key
from tests.e2e.conftest import CELL_64, Cli, restored_tree, split_url, temps_under
from tests.support.synthetic import make_neff_cache

pytestmark = pytest.mark.s3


def _obj(s3: Any, url: str, key: str) -> tuple[str, str]:
    bucket, prefix = split_url(url)
    return bucket, f"{prefix}/{key}"


def test_corrupt_and_truncated_blobs_exit_4_and_are_never_installed(
        cli: Cli, matrix: Path, tmp_path: Path, s3: Any, s3_url: str) -> None:
    cache = make_neff_cache(tmp_path / "neff", seed=21, count=60, large=1, duplicate_ratio=0)
    assert cli("push", "--matrix", str(matrix), "--cell", CELL_64,
               "--root", f"neff={cache.root}").code == 0
    corrupt, truncated = sorted(cache.files)[:2]
    for rel, mangle in ((corrupt, lambda b: bytes([b[0] ^ 0xFF]) + b[1:]),
                        (truncated, lambda b: b[: len(b) // 2])):
        bucket, key = _obj(s3, s3_url, blob_key(sha256_bytes(cache.files[rel])))
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        s3.put_object(Bucket=bucket, Key=key, Body=mangle(body))

    out = tmp_path / "out"
    r = cli("restore", str(matrix), "--to", str(out), "--cells", CELL_64, "--json")
    assert r.code == 4, r.stderr
    doc = r.json
    assert doc["exit_code"] == 4 and doc["cells_restored"] == []
    failed = {f["path"]: f for f in doc["files_failed"]}
    assert set(failed) == {corrupt, truncated}
    assert "corrupt" in failed[corrupt]["error"]
    assert "truncated" in failed[truncated]["error"]
    tree = restored_tree(out / "neff")
    assert corrupt not in tree and truncated not in tree
    assert tree == {k: v for k, v in cache.files.items() if k not in (corrupt, truncated)}
    assert temps_under(out) == []
    assert r.stderr.startswith("Error: ") and "Hint: neffcache repair --store s3://" in r.stderr
    assert "restore --mirror" in r.stderr and "neffcache verify --store" in r.stderr

    v = cli("verify", "--json")
    assert v.code == 4
    kinds = sorted(p["kind"] for p in v.json["problems"])
    assert kinds == ["sha256", "size"]
    assert cli("verify", "--quick").code == 0  # both blobs still exist


@pytest.mark.parametrize("hostile", ["../x", "/etc/x", "a/../../x", "ok/../../../x"])
def test_hostile_manifest_is_rejected_and_nothing_escapes(
        cli: Cli, matrix: Path, tmp_path: Path, s3: Any, s3_url: str, hostile: str) -> None:
    # A real entry first, so the store holds a valid blob the hostile manifest can point at.
    src = tmp_path / "src"
    src.mkdir()
    (src / "good.neff").write_bytes(b"payload")
    assert cli("push", "--matrix", str(matrix), "--cell", CELL_64,
               "--root", f"neff={src}").code == 0
    good = cli("restore", str(matrix), "--to", str(tmp_path / "probe"), "--cells", CELL_64,
               "--json").json
    key = good["entries"][0]
    bucket, mkey = _obj(s3, s3_url, manifest_key(key))
    doc = json.loads(s3.get_object(Bucket=bucket, Key=mkey)["Body"].read())
    doc["files"].append({"root": "neff", "path": hostile, "size": 7,
                         "sha256": sha256_bytes(b"payload"), "mode": 0o644})
    del doc["manifest_sha256"]  # a forger recomputes the self-digest: the path checks must hold
    doc["manifest_sha256"] = digest_of(doc)
    s3.put_object(Bucket=bucket, Key=mkey, Body=json.dumps(doc).encode())

    work = tmp_path / "work"
    target = work / "target"
    work.mkdir()
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    r = cli("restore", str(matrix), "--to", str(target), "--cells", CELL_64, "--json")
    assert r.code == 4, r.stderr
    failed = r.json["cells_failed"]
    assert [f["cell"] for f in failed] == [CELL_64]
    assert hostile in failed[0]["error"]
    after = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    new = [p for p in after if p not in before]
    assert all(p.startswith("work/target") for p in new), new
    assert not [p for p in (target / "neff").rglob("*") if p.is_file()]
    assert not Path("/etc/x").exists()
    verify = cli("verify", "--json")
    assert verify.code == 4
    assert [p["kind"] for p in verify.json["problems"]] == ["manifest"]
