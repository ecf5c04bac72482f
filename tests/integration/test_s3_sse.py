"""Server-side encryption and storage class on every PUT, against an endpoint that refuses a
PUT without ``x-amz-server-side-encryption`` (``tests.support.sse_proxy`` in front of moto, as a
bucket policy would): without the settings every write path fails with a hint naming them;
with them push (single and multipart), the restore report, copy and repair all land, each
write carrying the configured headers."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import S3_ENV
from tests.e2e.conftest import CELL_64, MATRIX
from tests.support.sse_proxy import SseRequiredProxy

pytestmark = pytest.mark.s3
MiB = 1 << 20
KEY_ID = "arn:aws:kms:us-east-1:111122223333:key/test-key"


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[SseRequiredProxy]:
    with SseRequiredProxy(moto_endpoint) as p:
        yield p


@pytest.fixture
def bucket(moto_endpoint: str) -> str:
    import boto3

    name = f"nc-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1",
                 aws_access_key_id="testing", aws_secret_access_key="testing"
                 ).create_bucket(Bucket=name)
    return name


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "neffcache.cli", *args], env=env,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


@pytest.fixture
def setup(tmp_path: Path, proxy: SseRequiredProxy, bucket: str) -> dict[str, str]:
    (tmp_path / "matrix.toml").write_text(MATRIX)
    src = tmp_path / "src" / "ab" / "cd"
    src.mkdir(parents=True)
    (src / "small.neff").write_bytes(b"small neff")
    (src / "large.neff").write_bytes(os.urandom(6 * MiB))  # a multipart upload (5 MiB parts)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEFFCACHE_S3_")}
    return dict(env, **S3_ENV, AWS_ENDPOINT_URL=proxy.url, AWS_EC2_METADATA_DISABLED="true",
                NEFFCACHE_STORE=f"s3://{bucket}/neff", NEFFCACHE_INSTANCE_TYPE="trn2.48xlarge",
                NEFFCACHE_S3_PART_SIZE=str(5 * MiB), NEFFCACHE_S3_MULTIPART_THRESHOLD=str(5 * MiB),
                HF_HUB_OFFLINE="1")


def push(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return run(env, "push", "--matrix", str(tmp_path / "matrix.toml"), "--cell", CELL_64,
               "--root", f"neff={tmp_path / 'src'}")


def test_without_sse_every_write_is_refused_with_a_hint(setup: dict[str, str], tmp_path: Path,
                                                        proxy: SseRequiredProxy) -> None:
    r = push(setup, tmp_path)
    assert r.returncode == 6, r.stderr
    assert "access denied (AccessDenied, HTTP 403" in r.stderr
    assert "NEFFCACHE_S3_SSE" in r.stderr  # the hint names the setting
    assert proxy.denied and not proxy.writes


def test_with_sse_kms_every_write_path_lands(setup: dict[str, str], tmp_path: Path,
                                             proxy: SseRequiredProxy, bucket: str,
                                             moto_endpoint: str) -> None:
    env = dict(setup, NEFFCACHE_S3_SSE="aws:kms", NEFFCACHE_S3_SSE_KMS_KEY_ID=KEY_ID,
               NEFFCACHE_S3_STORAGE_CLASS="STANDARD_IA")
    assert push(env, tmp_path).returncode == 0
    restored = run(env, "restore", str(tmp_path / "matrix.toml"), "--to", str(tmp_path / "out"),
                   "--cells", CELL_64)
    assert restored.returncode == 0, restored.stderr
    assert "report" not in restored.stderr  # the report was written (no warning)
    assert (tmp_path / "out/neff/ab/cd/large.neff").read_bytes() == \
        (tmp_path / "src/ab/cd/large.neff").read_bytes()
    assert run(env, "copy", "--all", "--from", env["NEFFCACHE_STORE"], "--to",
               str(tmp_path / "local")).returncode == 0
    assert run(env, "copy", "--all", "--from", str(tmp_path / "local"), "--to",
               f"s3://{bucket}/copy").returncode == 0
    _delete_blobs(moto_endpoint, bucket)
    repaired = run(env, "repair", "--yes", "--from", str(tmp_path / "local"))
    assert repaired.returncode == 0, repaired.stderr

    keys = [path.split("/", 2)[2] for _, path, *_ in proxy.writes]
    assert any(k.startswith("neff/blobs/") for k in keys)  # push
    assert any(k.startswith("neff/manifests/") for k in keys)
    assert any(k.startswith("neff/reports/") for k in keys)  # the restore report
    assert any(k.startswith("copy/manifests/") for k in keys)  # copy
    large = [w[0] for w in proxy.writes if w[1].endswith(_large_sha(tmp_path))]
    assert large == ["POST", "POST", "POST"]  # multipart: pushed, copied, repaired
    assert not proxy.denied
    assert {w[2:] for w in proxy.writes} == {("aws:kms", KEY_ID, "STANDARD_IA")}


def test_with_sse_s3_a_push_lands(setup: dict[str, str], tmp_path: Path,
                                  proxy: SseRequiredProxy) -> None:
    assert push(dict(setup, NEFFCACHE_S3_SSE="AES256"), tmp_path).returncode == 0
    assert proxy.writes and {w[2:] for w in proxy.writes} == {("AES256", None, None)}


def _large_sha(tmp_path: Path) -> str:
    import hashlib

    return hashlib.sha256((tmp_path / "src/ab/cd/large.neff").read_bytes()).hexdigest()


def _delete_blobs(endpoint: str, bucket: str) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    for obj in s3.list_objects_v2(Bucket=bucket, Prefix="neff/blobs/")["Contents"]:
        s3.delete_object(Bucket=bucket, Key=obj["Key"])
