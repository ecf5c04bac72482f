"""Shared fixtures: an isolated NEFFCACHE_HOME, the moto S3 server, the real Postgres."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.servers import moto_server

# Port 9 (discard) on loopback: nothing listens, so a metadata request fails at once.
CLOSED_METADATA_ENDPOINT = "http://127.0.0.1:9"
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
    # No AWS config of this machine's, and an instance-metadata fallback that stays on
    # loopback (a closed port): a test without credentials must never ask 169.254.169.254.
    monkeypatch.setenv("AWS_CONFIG_FILE", str(home / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(home / "no-aws-credentials"))
    monkeypatch.setenv("AWS_METADATA_ENDPOINT", CLOSED_METADATA_ENDPOINT)
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", CLOSED_METADATA_ENDPOINT)
    # Most tests publish neuron entries from this environment, which has no torch-neuronx
    # (a real one would be refused); tests of that refusal delete this.
    monkeypatch.setenv("NEFFCACHE_ALLOW_MISSING_PACKAGES", "1")
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


@pytest.fixture(scope="session")
def pg_new_database(pg_url: str) -> Iterator[Callable[[], str]]:
    """A factory: each call creates a fresh, empty database (random name) on the real
    PostgreSQL and returns its URL; every database made is dropped at the end of the session."""
    import psycopg
    from sqlalchemy.engine import make_url

    base = make_url(pg_url)
    admin = base.set(drivername="postgresql").render_as_string(hide_password=False)
    made: list[str] = []

    def create() -> str:
        name = f"neffcache_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        made.append(name)
        return base.set(database=name).render_as_string(hide_password=False)

    yield create
    if made:
        with psycopg.connect(admin, autocommit=True) as conn:
            for name in made:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_database_url(pg_new_database: Callable[[], str]) -> str:
    """One fresh database for the whole test session (see pg_new_database)."""
    return pg_new_database()
