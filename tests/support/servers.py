"""Real local servers for tests: moto's S3 server as a subprocess on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from collections.abc import Iterator

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
def moto_server() -> Iterator[str]:
    """Start `moto.server` on a free loopback port; yield its endpoint URL; stop it after."""
    port = free_port()
    env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    endpoint = f"http://{LOOPBACK}:{port}"
    try:
        wait_http(f"{endpoint}/moto-api/")
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
