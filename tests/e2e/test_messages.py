"""Messages that lead somewhere (issue 37), one test each: a secret written into a store URL is
masked in every error; the exit code of a restore into a read-only DIR is the one `restore
--help` documents; a refused TCP connection is called refused (with the setting to check).
(The damage hint naming `neffcache repair` and `--mirror` is checked in test_integrity; modes
in octal in test_manifest.)"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.e2e.conftest import MATRIX


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = dict(os.environ, NEFFCACHE_INSTANCE_TYPE="trn2.48xlarge", AWS_ACCESS_KEY_ID="a",
                AWS_SECRET_ACCESS_KEY="b", AWS_DEFAULT_REGION="us-east-1")
    return subprocess.run([sys.executable, "-m", "neffcache.cli", *args], capture_output=True,
                          text=True, env={**base, **(env or {})}, stdin=subprocess.DEVNULL,
                          timeout=120)


@pytest.fixture
def matrix(tmp_path: Path) -> Path:
    (tmp_path / "matrix.toml").write_text(MATRIX)
    return tmp_path / "matrix.toml"


@pytest.mark.parametrize("url", ["s3://AKIAEXAMPLE:tops/ecret@bucket/neff",
                                 "s3://bucket/neff?X-Amz-Signature=topsecret",
                                 "gs://user:topsecret@bucket/neff"])
def test_a_secret_in_a_store_url_is_masked_in_every_error(url: str, matrix: Path,
                                                         tmp_path: Path) -> None:
    for args in (["ls", "--store", url], ["verify", "--store", url],
                 ["restore", str(matrix), "--to", str(tmp_path / "out"), "--store", url],
                 ["config", "--store", url]):
        r = run(*args)
        assert "topsecret" not in r.stdout + r.stderr and "ecret@" not in r.stderr, args
    r = run("restore", str(matrix), "--to", str(tmp_path / "out"), "--store", url)
    assert r.returncode == 2 and "***" in r.stderr


def _read_only_dir() -> Path:
    """A directory this process cannot write in: a 0555 one, or (as root, whom modes do not
    stop) one under /sys, a read-only file system."""
    if os.geteuid() != 0:
        d = Path(tempfile.mkdtemp())
        d.chmod(0o555)
        return d / "out"
    d = Path("/sys/neffcache-test-dir")
    try:
        d.mkdir()
    except OSError:
        return d
    d.rmdir()
    pytest.skip("no read-only file system here")


def test_a_read_only_to_exits_with_the_code_restore_help_documents(matrix: Path) -> None:
    helped = run("restore", "--help").stdout
    documented = re.search(r"(\d) DIR \(or a cache root in it\) cannot be created or\s+written",
                           helped)
    assert documented is not None, helped
    r = run("restore", str(matrix), "--to", str(_read_only_dir()),
            env={"NEFFCACHE_STORE": "/nonexistent-store"})
    assert r.returncode == int(documented.group(1)) == 2, r.stderr
    assert re.search(r"\n\s+2\s+usage or configuration error \(.*DIR not writable", helped)


def test_a_refused_connection_is_called_refused(matrix: Path, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    r = run("verify", "--store", "s3://bucket/neff",
            env={"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"})
    assert r.returncode == 6
    assert "connection refused" in r.stderr and "timed out" not in r.stderr
    assert "Hint: nothing listens at" in r.stderr and "AWS_ENDPOINT_URL" in r.stderr
