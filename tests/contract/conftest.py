"""The store fixture every contract test runs over: memory, local, faulty(memory), S3 on the
moto server and S3 on SeaweedFS (a real S3-compatible server that checks signatures), the
latter also over IPv6 loopback (``http://[::1]:PORT``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from neffcache.store.base import Store
from tests.conftest import S3_ENV
from tests.support.faulty_store import FaultyStore
from tests.support.memory_store import MemoryStore
from tests.support.servers import moto_server, seaweedfs_or_skip

MiB = 1 << 20
# Small multipart sizes so a multi-MiB test object goes through the multipart path on S3.
S3_OPTIONS = {"multipart_threshold": 6 * MiB, "part_size": 5 * MiB}


@pytest.fixture(params=["memory", "local", "faulty",
                        pytest.param("s3", marks=pytest.mark.s3),
                        pytest.param("seaweedfs", marks=pytest.mark.seaweedfs),
                        pytest.param("s3-ipv6", marks=pytest.mark.s3)])
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

    url = request.getfixturevalue({"s3": "s3_url", "s3-ipv6": "s3_ipv6_url"}.get(
        kind, "seaweedfs_url"))
    return S3Store.from_url(url, create=True, **S3_OPTIONS)  # a store publishers write to


@pytest.fixture(scope="session")
def moto_ipv6_endpoint() -> Iterator[str]:
    """moto's S3 server on the IPv6 loopback: ``http://[::1]:PORT``."""
    with moto_server("::1") as endpoint:
        yield endpoint


@pytest.fixture
def s3_ipv6_url(moto_ipv6_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket on the IPv6 moto server, with the standard AWS variables pointing at it."""
    return _bucket_at(moto_ipv6_endpoint, monkeypatch)


@pytest.fixture(scope="session")
def seaweedfs_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`weed mini` on 127.0.0.1 with every port given, no telemetry, data in a temp dir."""
    with seaweedfs_or_skip(tmp_path_factory.mktemp("seaweedfs")) as endpoint:
        yield endpoint


@pytest.fixture
def seaweedfs_url(seaweedfs_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket on SeaweedFS, with the standard AWS variables pointing at it."""
    return _bucket_at(seaweedfs_endpoint, monkeypatch)


def _bucket_at(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    import boto3

    for k, v in dict(S3_ENV, AWS_ENDPOINT_URL=endpoint).items():
        monkeypatch.setenv(k, v)
    name = f"nc-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=name)
    return f"s3://{name}/neff"
