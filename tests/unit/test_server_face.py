"""The server's face: ``create_app`` builds the application in-process (FastAPI's TestClient
calls it without a socket), ``bind_socket`` refuses what it cannot listen on, and importing
``neffcache.server`` or ``neffcache.demo`` pulls in nothing heavy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from neffcache.errors import UsageError
from neffcache.index import SCHEMA_REVISION, open_index
from neffcache.server import ServeRequest, bind_socket, create_app, is_loopback


def test_create_app_answers_healthz_in_process(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    with open_index(f"sqlite:///{tmp_path / 'index.db'}", auto_upgrade=True) as ix, \
            TestClient(create_app(ix)) as client:
        reply = client.get("/healthz")
        assert reply.status_code == 200
        doc = reply.json()
        assert doc["status"] == "ok" and doc["index"].endswith("index.db")
        assert doc["schema_revision"] == doc["schema_head"] == SCHEMA_REVISION
        assert client.post("/healthz").status_code == 405  # read-only


def test_bind_socket_refuses_an_address_in_use() -> None:
    with bind_socket("127.0.0.1", 0) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(UsageError, match=f"--port {port}: cannot listen"):
            bind_socket("127.0.0.1", port).close()


def test_serve_request_defaults_bind_loopback() -> None:
    request = ServeRequest()
    assert (request.host, request.port, request.ingest_every) == ("127.0.0.1", 8077, 60.0)
    assert is_loopback(request.host)


@pytest.mark.parametrize("face", ["neffcache.server", "neffcache.demo",
                                  "neffcache.fingerprint_explain"])
def test_faces_import_nothing_heavy(face: str) -> None:
    heavy = ("fastapi", "uvicorn", "starlette", "prometheus_client", "sqlalchemy", "torch",
             "diffusers", "boto3", "botocore")
    code = (f"import sys, {face}; "
            f"print(','.join(m for m in {heavy!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == ""
