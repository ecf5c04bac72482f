"""A forwarding HTTP proxy on 127.0.0.1 for tests: takes absolute-form requests
(``GET http://host:port/path``), forwards them to that host, relays the answer and records
which hosts it was asked for. Plain HTTP only (no CONNECT). It can also cut responses short:
``cut_gets = N`` makes the next N GET bodies stop (connection closed) after ``cut_after``
bytes, as a reset or truncated response from S3 would."""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TypeVar
from urllib.parse import urlsplit

HOP_BY_HOP = {"connection", "proxy-connection", "keep-alive", "transfer-encoding", "te",
              "trailer", "upgrade", "proxy-authorization"}


class LoopbackProxy:
    """A threaded proxy server on 127.0.0.1 serving ``handler`` (which finds this object as
    ``self.server.proxy``); started and stopped as a context manager."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._server.proxy = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,),
                                        daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self: _P) -> _P:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


_P = TypeVar("_P", bound=LoopbackProxy)


class ForwardProxy(LoopbackProxy):
    def __init__(self) -> None:
        super().__init__(_Handler)
        self.seen: list[tuple[str, str]] = []  # (method, netloc)
        self.ranges: list[str | None] = []  # the Range header of each GET
        self.cut_gets = 0
        self.cut_after = 0

    def record(self, method: str, netloc: str, range_header: str | None) -> bool:
        """Record a request; True when its response is to be cut short."""
        with self._lock:
            self.seen.append((method, netloc))
            if method != "GET":
                return False
            self.ranges.append(range_header)
            if self.cut_gets > 0:
                self.cut_gets -= 1
                return True
            return False


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _forward(self) -> None:
        target = urlsplit(self.path)
        if target.scheme != "http" or not target.netloc:
            self.send_error(400, "absolute http:// URI expected")
            return
        proxy = self.server.proxy  # type: ignore[attr-defined]
        cut = proxy.record(self.command, target.netloc, self.headers.get("Range"))
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        upstream = http.client.HTTPConnection(target.netloc, timeout=30)
        path = target.path + (f"?{target.query}" if target.query else "")
        upstream.request(self.command, path or "/", body=body, headers=headers)
        resp = upstream.getresponse()
        data = resp.read()
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if cut:
            self.wfile.write(data[:proxy.cut_after])
            self.wfile.flush()
            self.close_connection = True
        elif self.command != "HEAD":
            self.wfile.write(data)
        upstream.close()

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward  # noqa: N815

    def log_message(self, format: str, *args: object) -> None:
        pass
