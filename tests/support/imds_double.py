"""Test doubles of the AWS metadata services, served over real HTTP on 127.0.0.1: the EC2
instance metadata service (IMDSv2, IMDSv1 on demand) and the ECS/EKS container credentials
endpoint. Each records the requests it saw."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

LOOPBACK = "127.0.0.1"
ROLE_PATH = "/latest/meta-data/iam/security-credentials/"
_D = TypeVar("_D", bound="_DoubleServer")


def credentials_document(access_key: str = "ASIADOUBLEACCESSKEY",
                         secret_key: str = "double-secret-key", token: str = "double-token",
                         expiration: str = "2030-01-01T00:00:00Z") -> dict[str, Any]:
    """The JSON both services return for a role (the fields botocore reads, plus IMDS's extras)."""
    return {"Code": "Success", "LastUpdated": "2029-12-31T18:00:00Z", "Type": "AWS-HMAC",
            "AccessKeyId": access_key, "SecretAccessKey": secret_key, "Token": token,
            "Expiration": expiration}


@dataclass(frozen=True)
class SeenRequest:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased


@dataclass
class _Reply:
    status: int
    body: bytes = b""
    content_type: str = "text/plain"


class _DoubleServer:
    """A ThreadingHTTPServer on 127.0.0.1:<free port> in a daemon thread; use as a context
    manager. Subclasses answer in ``reply``."""

    def __init__(self) -> None:
        self.requests: list[SeenRequest] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((LOOPBACK, 0), _Handler)
        self._server.double = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,),
                                        daemon=True)  # short poll: shutdown() returns at once

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self._server.server_address[1]}"

    def __enter__(self: _D) -> _D:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def seen(self, method: str | None = None) -> list[SeenRequest]:
        with self._lock:
            return [r for r in self.requests if method is None or r.method == method]

    def _record(self, request: SeenRequest) -> _Reply:
        with self._lock:
            self.requests.append(request)
        return self.reply(request)

    def reply(self, request: SeenRequest) -> _Reply:
        raise NotImplementedError


class _Handler(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        request = SeenRequest(self.command, self.path,
                              {k.lower(): v for k, v in self.headers.items()})
        reply = self.server.double._record(request)  # type: ignore[attr-defined]
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        self.wfile.write(reply.body)

    do_GET = do_PUT = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep pytest output clean


class ImdsDouble(_DoubleServer):
    """Test double of the EC2 instance metadata service.

    IMDSv2: ``PUT /latest/api/token`` with ``X-aws-ec2-metadata-token-ttl-seconds`` returns
    ``token``; every GET must then carry ``X-aws-ec2-metadata-token: <token>`` or gets 401,
    unless ``v1_enabled`` (then a GET without the header is served, a wrong token still 401).
    ``token_status`` other than 200 makes the token PUT answer that status (an IMDSv1-only
    host answers 403/404/405). ``credentials`` may be replaced at any time (rotation).
    """

    def __init__(self, *, role: str = "neffcache-double-role",
                 credentials: dict[str, Any] | None = None, token_status: int = 200,
                 v1_enabled: bool = False, token: str = "imds-double-session-token") -> None:
        super().__init__()
        self.role = role
        self.credentials = credentials_document() if credentials is None else credentials
        self.token_status = token_status
        self.v1_enabled = v1_enabled
        self.token = token

    def reply(self, request: SeenRequest) -> _Reply:
        if request.method == "PUT":
            if request.path != "/latest/api/token":
                return _Reply(404)
            if self.token_status != 200:
                return _Reply(self.token_status)
            if "x-aws-ec2-metadata-token-ttl-seconds" not in request.headers:
                return _Reply(400)
            return _Reply(200, self.token.encode())
        sent = request.headers.get("x-aws-ec2-metadata-token")
        if sent != self.token and (sent is not None or not self.v1_enabled):
            return _Reply(401)
        if request.path == ROLE_PATH:
            return _Reply(200, self.role.encode())
        if request.path == ROLE_PATH + self.role:
            return _Reply(200, json.dumps(self.credentials).encode(), "application/json")
        return _Reply(404)


class ContainerCredentialsDouble(_DoubleServer):
    """Test double of the ECS/EKS container credentials endpoint: ``GET <path>`` returns
    ``credentials`` as JSON, or ``status`` when that is not 200. With ``authorization`` set, a
    request whose Authorization header differs gets 401."""

    def __init__(self, *, path: str = "/v2/credentials/double-task",
                 credentials: dict[str, Any] | None = None, authorization: str | None = None,
                 status: int = 200) -> None:
        super().__init__()
        self.path = path
        self.credentials = credentials_document() if credentials is None else credentials
        self.authorization = authorization
        self.status = status

    def reply(self, request: SeenRequest) -> _Reply:
        if request.method != "GET" or request.path != self.path:
            return _Reply(404)
        if self.authorization is not None \
                and request.headers.get("authorization") != self.authorization:
            return _Reply(401)
        if self.status != 200:
            return _Reply(self.status, b'{"message": "double failure"}')
        return _Reply(200, json.dumps(self.credentials).encode(), "application/json")
