"""Unsigned request bodies (SigV4 ``UNSIGNED-PAYLOAD``, the default over HTTPS) on SeaweedFS,
which checks every request's signature: create-only and multipart puts land byte for byte, and
a wrong secret is still refused (the headers stay signed). Forced here over plain HTTP with
``AWS_UNSIGNED_PAYLOAD=true``: the tests have no TLS endpoint."""

from __future__ import annotations

import io
import os
import uuid
from collections.abc import Iterator

import pytest

from neffcache.errors import UnavailableError
from neffcache.store.s3 import S3Store
from tests.conftest import S3_ENV
from tests.support.servers import seaweedfs_or_skip

pytestmark = pytest.mark.seaweedfs
MiB = 1 << 20


@pytest.fixture(scope="module")
def weed_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with seaweedfs_or_skip(tmp_path_factory.mktemp("seaweedfs")) as endpoint:
        yield endpoint


@pytest.fixture
def env(weed_endpoint: str) -> dict[str, str]:
    env = dict(os.environ, **S3_ENV, AWS_ENDPOINT_URL=weed_endpoint, AWS_UNSIGNED_PAYLOAD="true")
    import boto3

    env["BUCKET"] = f"nc-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=weed_endpoint, region_name="us-east-1",
                 aws_access_key_id=S3_ENV["AWS_ACCESS_KEY_ID"],
                 aws_secret_access_key=S3_ENV["AWS_SECRET_ACCESS_KEY"]
                 ).create_bucket(Bucket=env["BUCKET"])
    return env


def test_unsigned_bodies_land_byte_for_byte(env: dict[str, str]) -> None:
    store = S3Store.from_url(f"s3://{env['BUCKET']}/neff", environ=env)
    assert store._client.config.get("unsigned_payload") in (True, "true")
    small, large = os.urandom(1000), os.urandom(9 * MiB)  # large: a multipart upload
    assert store.put("blobs/aa/small", io.BytesIO(small)) is True
    assert store.put("blobs/aa/small", io.BytesIO(b"other")) is False  # create-only holds
    assert store.put("blobs/aa/large", io.BytesIO(large)) is True
    assert store.read("blobs/aa/small") == small
    assert store.read("blobs/aa/large") == large


def test_a_wrong_secret_is_still_refused(env: dict[str, str]) -> None:
    bad = dict(env, AWS_SECRET_ACCESS_KEY="not-the-secret")
    store = S3Store.from_url(f"s3://{env['BUCKET']}/neff", environ=bad, max_attempts=1)
    with pytest.raises(UnavailableError, match="SignatureDoesNotMatch"):
        store.put("blobs/aa/x", io.BytesIO(b"x"))
