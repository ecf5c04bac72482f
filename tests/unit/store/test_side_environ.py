"""side_environ: each side of a two-store command gets its own endpoint, keys and profile."""

from __future__ import annotations

from neffcache.store import side_environ

BASE = {"AWS_ACCESS_KEY_ID": "shared", "AWS_SECRET_ACCESS_KEY": "shared-secret",
        "AWS_REGION": "us-east-1", "NEFFCACHE_TO_AWS_REGION": "eu-west-1",
        "NEFFCACHE_TO_S3_ENDPOINT": "http://127.0.0.1:9000",
        "NEFFCACHE_TO_S3_PART_SIZE": "5242880", "NEFFCACHE_FROM_AWS_ACCESS_KEY_ID": "src"}


def test_each_side_reads_its_own_overrides() -> None:
    to = side_environ(BASE, "TO")
    assert (to["AWS_REGION"], to["AWS_ENDPOINT_URL_S3"], to["NEFFCACHE_S3_PART_SIZE"],
            to["AWS_ACCESS_KEY_ID"]) == ("eu-west-1", "http://127.0.0.1:9000", "5242880",
                                         "shared")
    src = side_environ(BASE, "FROM")
    assert (src["AWS_REGION"], src["AWS_ACCESS_KEY_ID"]) == ("us-east-1", "src")
    assert "AWS_ENDPOINT_URL_S3" not in src and BASE["AWS_ACCESS_KEY_ID"] == "shared"


def test_a_profile_drops_the_shared_keys() -> None:
    env = side_environ(BASE, "FROM", "us")
    assert env["AWS_PROFILE"] == "us" and "AWS_SECRET_ACCESS_KEY" not in env
    assert env["AWS_ACCESS_KEY_ID"] == "src"  # an explicit per-side key still wins


def test_a_profile_of_the_sides_own_variables_drops_the_shared_keys_too() -> None:
    env = side_environ({**BASE, "NEFFCACHE_TO_AWS_PROFILE": "eu"}, "TO")
    assert env["AWS_PROFILE"] == "eu"
    assert "AWS_ACCESS_KEY_ID" not in env and "AWS_SECRET_ACCESS_KEY" not in env


def test_each_mirror_reads_its_own_overrides_and_bundle_cap() -> None:
    env = {**BASE, "NEFFCACHE_MIRROR_2_S3_ENDPOINT": "http://127.0.0.1:9002",
           "NEFFCACHE_MIRROR_2_AWS_ACCESS_KEY_ID": "m2",
           "NEFFCACHE_MIRROR_2_AWS_SECRET_ACCESS_KEY": "m2-secret",
           "NEFFCACHE_MIRROR_1_BUNDLE_MAX_BYTES": "1000"}
    first, second = side_environ(env, "MIRROR_1"), side_environ(env, "MIRROR_2")
    assert first["NEFFCACHE_BUNDLE_MAX_BYTES"] == "1000" and "AWS_ENDPOINT_URL_S3" not in first
    assert first["AWS_ACCESS_KEY_ID"] == "shared"  # nothing of its own: the primary's
    assert (second["AWS_ENDPOINT_URL_S3"], second["AWS_ACCESS_KEY_ID"],
            second["AWS_SECRET_ACCESS_KEY"]) == ("http://127.0.0.1:9002", "m2", "m2-secret")
    assert "NEFFCACHE_BUNDLE_MAX_BYTES" not in second
