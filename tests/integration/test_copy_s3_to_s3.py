"""``neffcache copy`` between two S3 servers, each side with its own endpoint, keys and region
(NEFFCACHE_FROM_* / NEFFCACHE_TO_*): SIGKILLed at seeded random times and rerun, it ends with
``verify`` clean on the target, no temp file left, and no multipart upload after
``gc --uploads``. Blobs are larger than the target's multipart threshold (5 MiB here)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from neffcache.backends import get_backend
from neffcache.precompile.publish import publish_entry
from neffcache.store import blob_key, open_store
from tests.support.lifecycle import cell, sdk_fingerprint
from tests.support.servers import WEED_CREDENTIALS, moto_server, seaweedfs_or_skip
from tests.support.synthetic import make_neff_cache

MiB = 1 << 20
KILLS = 10


@pytest.fixture(scope="module")
def second_moto() -> Iterator[str]:
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def weed_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """SeaweedFS checks every request's SigV4 signature against its one identity (moto
    accepts any key), so it shows which side's keys a copy signs with."""
    with seaweedfs_or_skip(tmp_path_factory.mktemp("seaweedfs")) as endpoint:
        yield endpoint


def client(endpoint: str, key: str, region: str) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key,
                        aws_secret_access_key=key + "-secret", region_name=region)


def side_env(tmp_path: Path, src: str, dst: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "NEFFCACHE_FROM_", "NEFFCACHE_TO_"))}
    env.update({
        "AWS_EC2_METADATA_DISABLED": "true", "HOME": str(tmp_path),
        "TMPDIR": str(tmp_path / "tmp"),
        "NEFFCACHE_FROM_S3_ENDPOINT": src, "NEFFCACHE_FROM_AWS_ACCESS_KEY_ID": "from-key",
        "NEFFCACHE_FROM_AWS_SECRET_ACCESS_KEY": "from-key-secret",
        "NEFFCACHE_FROM_AWS_REGION": "us-east-1",
        "NEFFCACHE_TO_S3_ENDPOINT": dst, "NEFFCACHE_TO_AWS_ACCESS_KEY_ID": "to-key",
        "NEFFCACHE_TO_AWS_SECRET_ACCESS_KEY": "to-key-secret",
        "NEFFCACHE_TO_AWS_REGION": "eu-west-1",
        "NEFFCACHE_TO_S3_MULTIPART_THRESHOLD": str(5 * MiB),
        "NEFFCACHE_TO_S3_PART_SIZE": str(5 * MiB)})
    return env


def as_side(env: dict[str, str], side: str) -> dict[str, str]:
    """The plain AWS environment of one side, for the one-store commands (verify, gc)."""
    from neffcache.store import side_environ

    return side_environ(env, side)


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "neffcache.cli", *args], env=env,
                          capture_output=True, text=True, timeout=600)


def test_copy_s3_to_s3_survives_ten_kills(moto_endpoint: str, second_moto: str,
                                          tmp_path: Path) -> None:
    env = side_env(tmp_path, moto_endpoint, second_moto)
    (tmp_path / "tmp").mkdir()
    name = f"nc-{uuid.uuid4().hex[:10]}"
    client(moto_endpoint, "from-key", "us-east-1").create_bucket(Bucket=name)
    target = client(second_moto, "to-key", "eu-west-1")
    target.create_bucket(Bucket=name, CreateBucketConfiguration={
        "LocationConstraint": "eu-west-1"})
    src_url, dst_url = f"s3://{name}/nc", f"s3://{name}/cp"
    src = open_store(src_url, environ=as_side(env, "FROM"))
    fp = sdk_fingerprint("2.19")
    for i in range(6):
        cache = make_neff_cache(tmp_path / f"c{i}", seed=i, count=6, large=3,
                                large_size=(5 * MiB + 1, 7 * MiB), droppings=False)
        publish_entry(src, cell(64 * (i + 1)), fp, get_backend("neuron"), {"neff": cache.root})
    big = [k for k in src.list("blobs/") if len(src.read(k, 0, None)) > 5 * MiB]
    assert len(big) >= 12
    args = ["copy", "--all", "--from", src_url, "--to", dst_url, "--workers", "1", "--json"]
    rng = random.Random(23)
    killed = 0
    for _ in range(KILLS):
        proc = subprocess.Popen([sys.executable, "-m", "neffcache.cli", *args], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.1, 0.9))
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate()
        assert proc.returncode in (-signal.SIGKILL, 0), err.decode()[-2000:]
        killed += proc.returncode != 0
    assert killed >= KILLS // 2  # most runs were cut short, not finished
    final = run(args, env)
    assert final.returncode == 0, final.stderr[-3000:]
    dst_env = as_side(env, "TO")
    verify = run(["verify", "--store", dst_url, "--json"], dst_env)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    # The killed runs' pending/ intents protect their uploads for --grace; a gc after it
    # (here: --grace 0) aborts every upload they left.
    gc = run(["gc", "--uploads", "--yes", "--force", "--grace", "0", "--store", dst_url],
             dst_env)
    assert gc.returncode == 0, gc.stderr
    assert target.list_multipart_uploads(Bucket=name).get("Uploads", []) == []
    assert list((tmp_path / "tmp").iterdir()) == []
    dst = open_store(dst_url, environ=dst_env)
    assert all(dst.has(k) for k in big) and not dst.has(blob_key("0" * 64))
    # the source server never saw the target's objects: the two sides are apart
    source = client(moto_endpoint, "from-key", "us-east-1")
    assert source.list_objects_v2(Bucket=name, Prefix="cp/").get("KeyCount", 0) == 0


def test_copy_into_a_local_store_killed_leaves_no_temp_files(tmp_path: Path) -> None:
    """A copy into a local store SIGKILLed mid-blob leaves ``.tmp-<pid>-*`` files; the rerun
    sweeps them (their writer is dead) and ``verify`` ends clean with none reported."""
    src = open_store(str(tmp_path / "src"), create=True)
    for i in range(3):
        cache = make_neff_cache(tmp_path / f"c{i}", seed=i, count=6, large=3,
                                large_size=(20 * MiB, 30 * MiB), droppings=False)
        publish_entry(src, cell(64 * (i + 1)), sdk_fingerprint("2.19"), get_backend("neuron"),
                      {"neff": cache.root})
    env = dict(os.environ)
    dst = tmp_path / "dst"
    args = ["copy", "--all", "--from", str(tmp_path / "src"), "--to", str(dst), "--workers", "4"]
    rng, litter = random.Random(7), 0
    for _ in range(5):
        proc = subprocess.Popen([sys.executable, "-m", "neffcache.cli", *args], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Killed once a put is under way (a temp file exists), a little later each time: at a
        # point inside a blob, however fast or loaded the machine is.
        started, before = time.monotonic(), set(dst.rglob(".tmp-*"))
        while proc.poll() is None and not set(dst.rglob(".tmp-*")) - before \
                and time.monotonic() - started < 60:
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.05))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        litter = max(litter, len(list(dst.rglob(".tmp-*"))))
    assert litter > 0  # the kills did land inside a put
    assert run(args, env).returncode == 0
    assert list(dst.rglob(".tmp-*")) == []
    verify = run(["verify", "--store", str(dst), "--json"], env)
    assert verify.returncode == 0 and json.loads(verify.stdout)["temp_files"] == []


def test_a_large_body_that_fails_its_sha256_starts_no_upload(moto_endpoint: str,
                                                              tmp_path: Path) -> None:
    """A multipart-sized body is spooled and verified before the upload starts: a mismatch
    leaves no object and no multipart upload (and the spool has no name to leave behind)."""
    import io

    from neffcache.errors import IntegrityError
    from neffcache.hashing import VerifyingReader
    from neffcache.store.s3 import S3Store

    name = f"nc-{uuid.uuid4().hex[:10]}"
    s3 = client(moto_endpoint, "k", "us-east-1")
    s3.create_bucket(Bucket=name)
    env = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "us-east-1",
           "AWS_EC2_METADATA_DISABLED": "true", "HOME": str(tmp_path)}
    store = S3Store(name, "p", endpoint_url=moto_endpoint, environ=env,
                    multipart_threshold=5 * MiB, part_size=5 * MiB)
    body = bytes(12 * MiB)
    reader = VerifyingReader(io.BytesIO(body), size=len(body), sha256="0" * 64, name="x")
    key = blob_key("0" * 64)
    with pytest.raises(IntegrityError):
        store.put(key, reader)  # type: ignore[arg-type]
    assert not store.has(key)
    assert s3.list_multipart_uploads(Bucket=name).get("Uploads", []) == []


def test_each_side_signs_with_its_own_keys(moto_endpoint: str, weed_endpoint: str,
                                           tmp_path: Path) -> None:
    """moto → SeaweedFS: the target only accepts its own identity. With the target's keys
    under NEFFCACHE_TO_* (the source's under NEFFCACHE_FROM_*) the copy verifies clean; with
    the source's keys given to the target side too, it is one exit-6 line and writes nothing."""
    env = side_env(tmp_path, moto_endpoint, weed_endpoint)
    env.update(NEFFCACHE_TO_AWS_ACCESS_KEY_ID=WEED_CREDENTIALS["AWS_ACCESS_KEY_ID"],
               NEFFCACHE_TO_AWS_SECRET_ACCESS_KEY=WEED_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
               NEFFCACHE_TO_AWS_REGION="us-east-1")
    (tmp_path / "tmp").mkdir()
    name = f"nc-{uuid.uuid4().hex[:10]}"
    client(moto_endpoint, "from-key", "us-east-1").create_bucket(Bucket=name)
    import boto3

    weed = boto3.client("s3", endpoint_url=weed_endpoint, region_name="us-east-1",
                        aws_access_key_id=WEED_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=WEED_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    weed.create_bucket(Bucket=name)
    src_url, dst_url = f"s3://{name}/nc", f"s3://{name}/cp"
    src = open_store(src_url, environ=as_side(env, "FROM"))
    for i in range(2):
        cache = make_neff_cache(tmp_path / f"c{i}", seed=40 + i, count=5, large=1,
                                large_size=(6 * MiB, 7 * MiB), droppings=False)
        publish_entry(src, cell(64 * (i + 1)), sdk_fingerprint("2.19"), get_backend("neuron"),
                      {"neff": cache.root})
    args = ["copy", "--all", "--from", src_url, "--to", dst_url, "--json"]
    wrong = dict(env, NEFFCACHE_TO_AWS_ACCESS_KEY_ID="from-key",
                 NEFFCACHE_TO_AWS_SECRET_ACCESS_KEY="from-key-secret")
    refused = run(args, wrong)
    assert refused.returncode == 6, refused.stderr[-2000:]
    assert len(refused.stderr.strip().splitlines()) <= 2 and "Traceback" not in refused.stderr
    assert weed.list_objects_v2(Bucket=name, Prefix="cp/").get("KeyCount", 0) == 0
    done = run(args, env)
    assert done.returncode == 0, done.stderr[-3000:]
    verify = run(["verify", "--store", dst_url, "--json"], as_side(env, "TO"))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert json.loads(verify.stdout)["manifests"] == 2
    assert weed.list_multipart_uploads(Bucket=name).get("Uploads", []) == []
