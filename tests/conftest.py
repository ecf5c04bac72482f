"""Shared fixtures: an isolated NEFFCACHE_HOME, the moto S3 server, the real Postgres."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.servers import moto_server

S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own NEFFCACHE_HOME and no ambient store/index settings."""
    home = tmp_path_factory.mktemp("neffcache-home")
    monkeypatch.setenv("NEFFCACHE_HOME", str(home))
    for var in ("NEFFCACHE_STORE", "NEFFCACHE_INDEX", "NEFFCACHE_CONFIG", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    return home


@pytest.fixture
def neffcache_home(_isolated_home: Path) -> Path:
    return _isolated_home


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A real S3 HTTP endpoint (moto server) on 127.0.0.1, one per test session."""
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def s3_env(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Point the standard AWS variables at the moto server (as a user's shell would)."""
    env = dict(S3_ENV, AWS_ENDPOINT_URL=moto_endpoint)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


@pytest.fixture
def s3_bucket(s3_env: dict[str, str]) -> str:
    """A fresh, empty bucket on the moto server; returns its name."""
    import boto3

    name = f"nc-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"]).create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_url(s3_bucket: str) -> str:
    return f"s3://{s3_bucket}/neff"


@pytest.fixture(scope="session")
def pg_url() -> str:
    """URL of the machine's real PostgreSQL (NEFFCACHE_TEST_PG_URL overrides)."""
    return os.environ.get("NEFFCACHE_TEST_PG_URL",
                          "postgresql+psycopg://postgres@127.0.0.1:5432/test")
