"""``copy --from-profile/--to-profile``: each side signs with its own profile's keys, from a
temporary AWS credentials file with two profiles, between two servers (SeaweedFS checks every
signature against its own keys; moto takes any). Neither alone (no AWS_* keys at all) nor with a
global AWS_PROFILE naming the other side's profile does one side's profile leak to the other."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from neffcache.store import open_store
from tests.support.lifecycle import cell, publish_synthetic, sdk_fingerprint
from tests.support.servers import WEED_CREDENTIALS, seaweedfs_or_skip


@pytest.fixture(scope="module")
def weed_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with seaweedfs_or_skip(tmp_path_factory.mktemp("seaweedfs")) as endpoint:
        yield endpoint


def bucket(endpoint: str, key: str, secret: str) -> str:
    import boto3

    name = f"p-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=key,
                 aws_secret_access_key=secret).create_bucket(Bucket=name)
    return name


def test_each_side_signs_with_its_own_profile(tmp_path: Path, moto_endpoint: str,
                                              weed_endpoint: str) -> None:
    aws = tmp_path / "aws"
    aws.mkdir()
    (aws / "credentials").write_text(
        "[east]\naws_access_key_id = east-key\naws_secret_access_key = east-secret\n\n"
        f"[west]\naws_access_key_id = {WEED_CREDENTIALS['AWS_ACCESS_KEY_ID']}\n"
        f"aws_secret_access_key = {WEED_CREDENTIALS['AWS_SECRET_ACCESS_KEY']}\n",
        encoding="utf-8")
    (aws / "config").write_text("[profile east]\nregion = us-east-1\n\n"
                                "[profile west]\nregion = us-east-1\n", encoding="utf-8")
    east = f"s3://{bucket(moto_endpoint, 'east-key', 'east-secret')}/neff"
    west = f"s3://{bucket(weed_endpoint, 'testing', 'testing')}/neff"
    west2 = f"s3://{bucket(weed_endpoint, 'testing', 'testing')}/neff"
    source = open_store(str(tmp_path / "src"), create=True)
    publish_synthetic(source, cell(512), sdk_fingerprint("2.21"), tmp_path / "w", seed=3)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "NEFFCACHE_FROM",
                                                                     "NEFFCACHE_TO"))}
    env.update({"AWS_SHARED_CREDENTIALS_FILE": str(aws / "credentials"),
                "AWS_CONFIG_FILE": str(aws / "config"), "AWS_EC2_METADATA_DISABLED": "true"})

    def copy(src: str, dst: str, *flags: str, **extra: str) -> subprocess.CompletedProcess[str]:
        ends = {"FROM": src, "TO": dst}
        sides = {f"NEFFCACHE_{side}_S3_ENDPOINT": weed_endpoint if url in (west, west2)
                 else moto_endpoint for side, url in ends.items() if url.startswith("s3://")}
        return subprocess.run(
            [sys.executable, "-m", "neffcache.cli", "copy", "--all", "--from", src, "--to", dst,
             "--json", *flags], env={**env, **sides, **extra}, capture_output=True, text=True,
            timeout=300)

    seeded = copy(str(tmp_path / "src"), west, "--to-profile", "west")  # no AWS_* keys at all
    assert seeded.returncode == 0, seeded.stderr
    alone = copy(west, east, "--from-profile", "west", "--to-profile", "east")
    assert alone.returncode == 0, alone.stderr
    assert json.loads(alone.stdout)["entries_copied"] == 1
    # A global AWS_PROFILE names the other side's profile: each side keeps its own.
    back = copy(east, west2, "--from-profile", "east", "--to-profile", "west",
                AWS_PROFILE="east")
    assert back.returncode == 0, back.stderr
    assert json.loads(back.stdout)["entries_copied"] == 1
    # Without --to-profile, the global profile's keys sign for SeaweedFS: refused.
    wrong = copy(east, west2, "--from-profile", "east", AWS_PROFILE="east")
    assert wrong.returncode == 6, (wrong.stdout, wrong.stderr)
