"""Mirrors are full stores, each with its own endpoint and keys (``NEFFCACHE_MIRROR_<N>_*``), and
a store that cannot be reached is passed over: a restore whose primary is a closed loopback port
finishes from a complete local mirror (or bundle) with exit 0 within its deadline, and an S3
mirror on a second server (SeaweedFS, which checks every signature against its own keys) serves
what the primary (moto, other keys) lacks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from neffcache.restore import STATE_FILE, RestoreRequest, restore
from neffcache.store import blob_key, open_store
from tests.support.host_entries import (
    INSTANCE_TYPE,
    MATRIX,
    bundle_of_directory,
    publish_for_this_host,
)
from tests.support.servers import LOOPBACK, WEED_CREDENTIALS, free_port, seaweedfs_or_skip
from tests.support.synthetic import read_tree

CELL_64 = "tiny/compile/64x64/b1/tp1"
CELL_128 = "tiny/compile/128x128/b1/tp1"
DEADLINE = 30.0


@pytest.fixture(scope="module")
def weed_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with seaweedfs_or_skip(tmp_path_factory.mktemp("seaweedfs")) as endpoint:
        yield endpoint


def tree(path: Path) -> dict[str, bytes]:
    files = read_tree(path)
    files.pop(STATE_FILE)
    return files


@pytest.mark.parametrize("kind", ["store", "bundle"])
def test_an_unreachable_primary_falls_through_to_a_complete_mirror_within_the_deadline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    monkeypatch.setenv(*INSTANCE_TYPE)
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(MATRIX, encoding="utf-8")
    local = tmp_path / "mirror"
    published = publish_for_this_host(open_store(str(local), create=True), matrix,
                                      tmp_path / "work", [CELL_64, CELL_128], count=20)
    mirror = str(local)
    if kind == "bundle":
        bundle_of_directory(local, tmp_path / "mirror.bundle")
        shutil.rmtree(local)
        mirror = f"bundle:{tmp_path / 'mirror.bundle'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "NEFFCACHE_MIRROR"))}
    env.update({"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
                "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
                "AWS_ENDPOINT_URL": f"http://{LOOPBACK}:{free_port()}"})  # nothing listens
    plan = subprocess.run(
        [sys.executable, "-m", "neffcache.cli", "restore", str(matrix), "--to",
         str(tmp_path / "out"), "--store", "s3://gone/neff", "--mirror", mirror, "--dry-run",
         "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert plan.returncode == 0, plan.stderr  # the plan reads the mirrors as the run does
    assert json.loads(plan.stdout)["files_to_fetch"] == sum(len(p.files) for p in published)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "neffcache.cli", "restore", str(matrix), "--to",
         str(tmp_path / "out"), "--store", "s3://gone/neff", "--mirror", mirror,
         "--deadline", str(DEADLINE), "--report-to", "none", "--json"],
        env=env, capture_output=True, text=True, timeout=DEADLINE + 30)
    took = time.monotonic() - started
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert took < DEADLINE, took
    doc = json.loads(done.stdout)
    assert list(doc["served_by"]) == [open_store(mirror).url], doc["served_by"]
    assert "s3://gone/neff passed over" in done.stderr, done.stderr
    assert tree(tmp_path / "out" / "neff") == {k: v for p in published
                                               for k, v in p.files.items()}
    print(f"restore with an unreachable primary and a {kind} mirror: {took:.2f} s")


def test_an_s3_mirror_on_a_second_server_with_its_own_keys_serves_what_the_primary_lacks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, s3_url: str,
        weed_endpoint: str) -> None:
    import boto3

    monkeypatch.setenv(*INSTANCE_TYPE)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "primary-key")  # moto takes any; SeaweedFS not
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "primary-secret")
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(MATRIX, encoding="utf-8")
    bucket = f"mirror-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=weed_endpoint, region_name="us-east-1",
                 aws_access_key_id=WEED_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                 aws_secret_access_key=WEED_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]
                 ).create_bucket(Bucket=bucket)
    mirror_url = f"s3://{bucket}/neff"
    own = {"NEFFCACHE_MIRROR_1_S3_ENDPOINT": weed_endpoint,
           **{f"NEFFCACHE_MIRROR_1_{k}": v for k, v in WEED_CREDENTIALS.items()}}
    from neffcache.store import side_environ

    mirror = open_store(mirror_url, create=True,
                        environ=side_environ({**os.environ, **own}, "MIRROR_1"))
    mirror.check()
    both = publish_for_this_host(mirror, matrix, tmp_path / "w1", [CELL_64, CELL_128])
    primary = open_store(s3_url, create=True)
    (first,) = publish_for_this_host(primary, matrix, tmp_path / "w2", [CELL_64])
    primary.delete(blob_key(first.large_sha256))  # and a blob the primary lost

    def run(out: str) -> dict[str, object]:
        result = restore(RestoreRequest(matrix=matrix, to=tmp_path / out, store=s3_url,
                                        report_to="none", mirrors=[mirror_url]))
        return {**result.to_json(), "exit": result.exit_code}

    without = run("without")  # the mirror read with the primary's endpoint and keys
    assert without["exit"] != 0, without
    for k, v in own.items():
        monkeypatch.setenv(k, v)
    doc = run("out")
    assert doc["exit"] == 0, doc
    assert tree(tmp_path / "out" / "neff") == {k: v for p in both for k, v in p.files.items()}
    served = doc["served_by"]
    assert isinstance(served, dict)
    assert served[mirror.url] >= 2 and served[primary.url] >= 1, served


def test_repair_from_an_s3_source_on_another_server_uses_its_own_settings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, weed_endpoint: str) -> None:
    import boto3

    from neffcache.errors import UnavailableError
    from neffcache.lifecycle import RepairRequest, repair_store
    from neffcache.store import side_environ

    monkeypatch.setenv(*INSTANCE_TYPE)
    for k, v in {"AWS_ACCESS_KEY_ID": "primary-key", "AWS_SECRET_ACCESS_KEY": "primary-secret",
                 "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
                 "AWS_ENDPOINT_URL": f"http://{LOOPBACK}:{free_port()}"}.items():
        monkeypatch.setenv(k, v)  # the process's S3 settings lead nowhere
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(MATRIX, encoding="utf-8")
    bucket = f"source-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=weed_endpoint, region_name="us-east-1",
                 aws_access_key_id=WEED_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                 aws_secret_access_key=WEED_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]
                 ).create_bucket(Bucket=bucket)
    own = {"NEFFCACHE_FROM_S3_ENDPOINT": weed_endpoint,
           **{f"NEFFCACHE_FROM_{k}": v for k, v in WEED_CREDENTIALS.items()}}
    source = open_store(f"s3://{bucket}/neff", create=True,
                        environ=side_environ({**os.environ, **own}, "FROM"))
    source.check()
    publish_for_this_host(source, matrix, tmp_path / "w1", [CELL_64])
    local = tmp_path / "store"
    (published,) = publish_for_this_host(open_store(str(local), create=True), matrix,
                                         tmp_path / "w2", [CELL_64])
    (local / blob_key(published.large_sha256)).unlink()
    request = RepairRequest(store=str(local), source=source.url, confirmed=True)
    with pytest.raises(UnavailableError):
        repair_store(request)  # the source read with the process's endpoint and keys
    for k, v in own.items():
        monkeypatch.setenv(k, v)
    fixed = repair_store(request)
    assert fixed.exit_code == 0 and dict(fixed.outcomes) == {
        blob_key(published.large_sha256): "repaired"}
