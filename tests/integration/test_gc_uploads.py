"""gc aborts the multipart uploads killed publishes leave, on SeaweedFS (moto's
ListMultipartUploads reports one fixed 2010 start time for every upload, so it cannot tell a
young upload from an old one): old ones no publish needs go, young ones and those a publish in
progress names stay, nothing outside the store's prefix or its blob and pack keys is touched."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from neffcache.hashing import sha256_bytes
from neffcache.lifecycle.gc import apply_uploads, collect_uploads
from neffcache.store import blob_key, open_store
from neffcache.store.base import pack_key
from neffcache.store.s3 import S3Store
from tests.conftest import S3_ENV
from tests.support.servers import seaweedfs_or_skip

pytestmark = pytest.mark.seaweedfs
MiB = 1 << 20
A, C, D = (sha256_bytes(x) for x in (b"crashed", b"in progress", b"a pack"))


@pytest.fixture(scope="module")
def weed_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with seaweedfs_or_skip(tmp_path_factory.mktemp("seaweedfs")) as endpoint:
        yield endpoint


@pytest.fixture
def env(weed_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for k, v in dict(S3_ENV, AWS_ENDPOINT_URL=weed_endpoint).items():
        monkeypatch.setenv(k, v)
    return dict(os.environ)


@pytest.fixture
def bucket(env: dict[str, str]) -> str:
    name = f"nc-{uuid.uuid4().hex[:12]}"
    client(env).create_bucket(Bucket=name)
    return name


def client(env: dict[str, str]) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"])


def start_upload(env: dict[str, str], bucket: str, key: str) -> str:
    """What a killed publish leaves: an upload with one part and no completion."""
    s3 = client(env)
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=b"x" * 5 * MiB)
    return str(upload)


def open_uploads(env: dict[str, str], bucket: str) -> set[str]:
    return {u["Key"] for u in client(env).list_multipart_uploads(Bucket=bucket)
            .get("Uploads", [])}


def test_old_uploads_no_publish_needs_are_aborted(env: dict[str, str], bucket: str) -> None:
    keys = {"crashed": f"neff/{blob_key(A)}", "named": f"neff/{blob_key(C)}",
            "pack": f"neff/{pack_key(D)}", "foreign": "neff/notes/big.bin",
            "outside": f"elsewhere/{blob_key(A)}"}
    for key in keys.values():
        start_upload(env, bucket, key)
    store = S3Store.from_url(f"s3://{bucket}/neff")
    later = time.time() + 7200  # two hours on: every upload is older than a one-hour grace
    intent = {"entry_key": "e" * 64, "created_at": later - 60, "host": "ci", "blobs": [C]}
    store.put("pending/" + "e" * 64 + ".1.json", io.BytesIO(json.dumps(intent).encode()))

    now_found = collect_uploads(store, now=time.time(), grace=3600)
    assert now_found is not None
    young, _ = now_found
    assert young.listed == 4 and young.abort == () and young.spared == ()  # all started now

    found = collect_uploads(store, now=later, grace=3600)
    assert found is not None
    plan, seen = found
    assert [u.key for u in plan.abort] == [blob_key(A)]
    assert sorted(u.key for u in plan.spared) == sorted([blob_key(C), pack_key(D)])
    assert [u.key for u in plan.unknown] == ["notes/big.bin"]
    aborted = apply_uploads(store, plan, seen)
    assert [u.key for u in aborted] == [blob_key(A)]
    assert open_uploads(env, bucket) == set(keys.values()) - {keys["crashed"]}
    apply_uploads(store, plan, seen)  # aborting one already gone is not an error


def test_an_intent_written_after_planning_spares_its_upload(env: dict[str, str],
                                                            bucket: str) -> None:
    key = f"neff/{blob_key(C)}"
    start_upload(env, bucket, key)
    store = S3Store.from_url(f"s3://{bucket}/neff")
    later = time.time() + 7200
    found = collect_uploads(store, now=later, grace=3600)
    assert found is not None and [u.key for u in found[0].abort] == [blob_key(C)]
    intent = {"entry_key": "e" * 64, "created_at": later, "host": "ci", "blobs": [C]}
    store.put("pending/" + "e" * 64 + ".2.json", io.BytesIO(json.dumps(intent).encode()))
    assert apply_uploads(store, *found) == ()
    assert open_uploads(env, bucket) == {key}


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "neffcache.cli", *args], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)


def test_cli_aborts_stale_uploads(env: dict[str, str], bucket: str, tmp_path: Path) -> None:
    store_env = dict(env, NEFFCACHE_STORE=f"s3://{bucket}/neff")
    S3Store.from_url(f"s3://{bucket}/neff", env, create=True).check()  # as the push did
    key = f"neff/{blob_key(A)}"
    upload = start_upload(env, bucket, key)
    time.sleep(2.2)  # older than a 1 s grace, by the server's whole-second clock too

    short = run(store_env, "gc", "--uploads", "--grace", "1", "--yes")
    assert short.returncode == 2 and "600 s floor" in short.stderr and "--force" in short.stderr
    dry = run(store_env, "gc", "--uploads", "--grace", "1", "--force", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    doc = json.loads(dry.stdout)
    assert doc["dry_run"] and doc["uploads"]["aborted"] == []
    assert [(u["key"], u["upload_id"]) for u in doc["uploads"]["abort"]] == \
        [(blob_key(A), upload)]
    refused = run(store_env, "gc", "--uploads", "--grace", "1", "--force")  # no terminal
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert open_uploads(env, bucket) == {key}

    done = run(store_env, "gc", "--yes", "--grace", "1", "--force", "--json")  # plain gc
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert [u["key"] for u in doc["uploads"]["aborted"]] == [blob_key(A)]
    assert "uploads_error" not in doc
    assert open_uploads(env, bucket) == set()
    text = run(store_env, "gc", "--uploads", "--yes", "--grace", "1", "--force")
    assert text.returncode == 0 and "0 multipart upload(s) in progress" in text.stdout
    for out in (dry, done, text):
        assert env["AWS_SECRET_ACCESS_KEY"] not in out.stdout + out.stderr

    local = tmp_path / "local-store"
    open_store(str(local), create=True).check()
    none = run(env, "gc", "--uploads", "--store", str(local))
    assert none.returncode == 0 and "a local store has no multipart uploads" in none.stdout
