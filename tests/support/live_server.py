"""The ops HTTP server for tests: in a thread of this process (uvicorn on a loopback socket)
or as the real ``neffcache serve`` subprocess; plus a tiny urllib client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from neffcache.index import Index
from tests.support.servers import free_port, wait_http

if TYPE_CHECKING:
    from fastapi import FastAPI


@dataclass(frozen=True)
class Reply:
    status: int
    headers: Mapping[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")


def request(url: str, method: str = "GET", data: bytes | None = None) -> Reply:
    req = urllib.request.Request(url, method=method, data=data)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return Reply(r.status, {k.lower(): v for k, v in r.headers.items()}, r.read())
    except urllib.error.HTTPError as e:
        return Reply(e.code, {k.lower(): v for k, v in e.headers.items()}, e.read())


def get_json(url: str) -> Any:
    reply = request(url)
    assert reply.status == 200, (url, reply.status, reply.body[:500])
    return reply.json


@contextmanager
def serve_in_thread(index: Index, app: FastAPI | None = None) -> Iterator[str]:
    """``create_app(index)`` (or ``app``) served by uvicorn on 127.0.0.1:<free port>; yields
    the base URL."""
    import uvicorn

    from neffcache.server import bind_socket, create_app, server_config

    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(server_config(app or create_app(index)))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()


@contextmanager
def serve_subprocess(env: Mapping[str, str], *args: str) -> Iterator[str]:
    """The real ``neffcache serve`` (python -m neffcache.cli) on a free loopback port."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "neffcache.cli", "serve", "--host",
                             "127.0.0.1", "--port", str(port), *args],
                            env={**os.environ, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_http(f"{base}/healthz", timeout=60)
        except RuntimeError:
            proc.terminate()
            out, err = proc.communicate(timeout=10)
            raise RuntimeError(f"neffcache serve did not start: {err}") from None
        yield base
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
