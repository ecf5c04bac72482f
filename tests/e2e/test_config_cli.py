"""`neffcache config`: every effective setting with its source, text and --json, secrets
masked; a named config file that does not exist is exit 2 for every command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "neffcache.cli", *args], capture_output=True,
                          text=True, env={**os.environ, **env}, stdin=subprocess.DEVNULL)


def test_config_names_each_source_and_masks_secrets(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text('store = "s3://AKIAX:topsecret/x@bucket/neff"\n'
                                     'trusted_keys = "ed25519:abc"\n')
    env = {"NEFFCACHE_CONFIG": str(tmp_path / "c.toml"), "NEFFCACHE_SIGNING_KEY": "PEM-SECRET",
           "NEFFCACHE_S3_SSE": "aws:kms", "NEFFCACHE_S3_SSE_KMS_KEY_ID": "alias/neff",
           "AWS_SECRET_ACCESS_KEY": "awssecret", "AWS_ACCESS_KEY_ID": "AKIAX"}
    r = run("config", "--json", "--index", "postgresql+psycopg://u:dbpass@h/db", env=env)
    assert r.returncode == 0, r.stderr
    for secret in ("topsecret", "dbpass", "PEM-SECRET", "awssecret"):
        assert secret not in r.stdout
    doc = json.loads(r.stdout)
    got = {k: (v["value"], v["source"]) for k, v in doc["settings"].items()}
    assert doc["config_read"] is True
    assert got["config_file"] == (str(tmp_path / "c.toml"), "NEFFCACHE_CONFIG")
    assert got["store"] == ("s3://AKIAX:***@bucket/neff", str(tmp_path / "c.toml"))
    assert got["index"] == ("postgresql+psycopg://u:***@h/db", "flag")
    assert got["trusted_keys"] == ("ed25519:abc", str(tmp_path / "c.toml"))
    assert got["signing_key_pem"][1] == "NEFFCACHE_SIGNING_KEY"
    assert got["reports"] == ("store", "default")
    assert got["s3.sse"] == ("aws:kms", "NEFFCACHE_S3_SSE")
    assert got["s3.sse_kms_key_id"] == ("alias/neff", "NEFFCACHE_S3_SSE_KMS_KEY_ID")
    assert got["s3.credentials"][0] == "environment"
    text = run("config", env=env)
    assert text.returncode == 0 and "NEFFCACHE_S3_SSE" in text.stdout
    assert "topsecret" not in text.stdout


def test_a_named_config_file_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.toml")
    for args in (["config"], ["ls"], ["--config", missing, "config"]):
        r = run(*args, env={"NEFFCACHE_CONFIG": missing})
        assert r.returncode == 2 and f"NEFFCACHE_CONFIG={missing}: no such file" in r.stderr
    r = run("--config", missing, "config", env={})
    assert r.returncode == 2 and "no such file" in r.stderr
