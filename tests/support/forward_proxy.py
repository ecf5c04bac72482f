"""A forwarding HTTP proxy on 127.0.0.1 for tests: takes absolute-form requests
(``GET http://host:port/path``), forwards them to that host, relays the answer and records
which hosts it was asked for. Plain HTTP only (no CONNECT). It can also cut responses short:
``cut_gets = N`` makes the next N GET bodies stop (connection closed) after ``cut_after``
bytes, as a reset or truncated response from S3 would."""

from __future__ import annotations

import http.client
import socket
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TypeVar
from urllib.parse import SplitResult, urlsplit

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


class ForwardingHandler(BaseHTTPRequestHandler):
    """The forwarding both test proxies do: check the absolute-form target, read the body, ask
    the upstream server, answer (whole, or cut short after some bytes, closed or reset)."""

    protocol_version = "HTTP/1.1"

    def target(self) -> SplitResult | None:
        """The request's absolute http:// target; None (after a 400) when it is not one."""
        target = urlsplit(self.path)
        if target.scheme != "http" or not target.netloc:
            self.send_error(400, "absolute http:// URI expected")
            return None
        return target

    def read_body(self) -> bytes | None:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else None

    def ask_upstream(self, target: SplitResult, body: bytes | None
                     ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        """(status, reason, end-to-end headers but Content-Length, body) of the upstream's
        answer to this request."""
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        upstream = http.client.HTTPConnection(target.netloc, timeout=30)
        try:
            path = target.path + (f"?{target.query}" if target.query else "")
            upstream.request(self.command, path or "/", body=body, headers=headers)
            resp = upstream.getresponse()
            data = resp.read()
            status, reason, got = resp.status, resp.reason, resp.getheaders()
        finally:
            upstream.close()
        kept = [(k, v) for k, v in got
                if k.lower() not in HOP_BY_HOP and k.lower() != "content-length"]
        return status, reason, kept, data

    def answer(self, status: int, reason: str, headers: list[tuple[str, str]], data: bytes, *,
               cut_at: int | None = None, reset: bool = False) -> None:
        """Send the answer, promising all of ``data``; with ``cut_at`` only that many bytes
        are sent and the connection is closed (``reset``: with a TCP reset, not a FIN)."""
        self.send_response(status, reason)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if cut_at is not None:
            self.wfile.write(data[:cut_at])
            self.wfile.flush()
            self.close_connection = True
            if reset:  # SO_LINGER 0: close() sends RST instead of FIN
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
        elif self.command != "HEAD":
            self.wfile.write(data)


class _Handler(ForwardingHandler):
    def _forward(self) -> None:
        target = self.target()
        if target is None:
            return
        proxy = self.server.proxy  # type: ignore[attr-defined]
        cut = proxy.record(self.command, target.netloc, self.headers.get("Range"))
        status, reason, headers, data = self.ask_upstream(target, self.read_body())
        self.answer(status, reason, headers, data, cut_at=proxy.cut_after if cut else None)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward  # noqa: N815

    def log_message(self, format: str, *args: object) -> None:
        pass
