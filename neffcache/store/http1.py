"""A small HTTP/1.1 client connection (GET and HEAD, no request bodies) for the S3 read path.

Why not http.client: it parses headers with the ``email`` package, whose import costs a boot
hook ~25 ms before the first byte moves (measured); this module needs only ``socket`` and,
for https, ``ssl``. What it reads (RFC 9112): a status line, at most ``MAX_HEADERS`` header
lines of at most ``MAX_LINE`` bytes (no obsolete line folding), then a body framed by
``Transfer-Encoding: chunked``, by ``Content-Length``, or by the connection closing (RFC 9112
§6.3; 1xx replies are skipped, HEAD/204/304 have no body). Connections are kept alive unless
either side says ``close`` or the body was framed by the close. Anything malformed is a
``ProtocolError``; socket failures stay ``OSError``.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ssl

MAX_LINE = 64 * 1024
MAX_HEADERS = 100
MAX_INTERIM = 8
_CHUNK_SIZE_DIGITS = 16  # hex digits: anything longer is not a size a server means


class ProtocolError(Exception):
    """The server's reply is not HTTP/1.x as this client reads it (or the connection ended
    before a reply); the message names what was wrong, never header values."""


class IncompleteBody(ProtocolError):
    """The connection ended before the body's announced end."""

    def __init__(self, received: int, expected: int | None) -> None:
        self.received, self.expected = received, expected
        more = f" of {expected}" if expected is not None else ""
        super().__init__(f"connection closed after {received}{more} body bytes")


class Connection:
    """One connection to ``host:port``; ``send`` opens it when needed. Not thread-safe: one
    request at a time, and a response's body must be read to its end (``Response.complete``)
    before the next request on the same connection."""

    def __init__(self, host: str, port: int | None, *, tls: ssl.SSLContext | None = None
                 ) -> None:
        self.host = host
        self.port = port or (443 if tls is not None else 80)
        self._tls = tls
        self.sock: socket.socket | None = None
        self._rfile: Any = None
        self._response: Response | None = None

    @property
    def reusable(self) -> bool:
        """Open, and the last response was read to its end and allows another request."""
        r = self._response
        return self.sock is not None and (r is None or (r.complete and r.keep_alive))

    def connect(self, connect_timeout: float, read_timeout: float) -> None:
        sock = socket.create_connection((self.host, self.port), timeout=connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_hostname=self.host)
            sock.settimeout(read_timeout)
        except BaseException:
            sock.close()
            raise
        self.sock, self._rfile, self._response = sock, sock.makefile("rb"), None

    def set_timeout(self, seconds: float) -> None:
        if self.sock is not None:
            self.sock.settimeout(seconds)

    def send(self, method: str, target: str, headers: dict[str, str]) -> Response:
        """Write a request (``target`` already percent-encoded) and read the reply's status and
        headers; the body is left to read from the returned ``Response``. Header names and
        values must not contain CR, LF or NUL (ValueError: nothing is sent)."""
        if self.sock is None:
            raise ProtocolError("connection is not open")
        if not self.reusable:
            raise ProtocolError("previous response on this connection was not read to its end")
        request = _request_bytes(method, target, headers)
        self._response = None
        try:
            self.sock.sendall(request)
            response = _read_response(self._rfile, method)
        except BaseException:
            self.close()  # a failed exchange leaves nothing to reuse
            raise
        self._response = response
        if not response.keep_alive and response.complete:
            self.close()
        return response

    def close(self) -> None:
        sock, rfile = self.sock, self._rfile
        self.sock = self._rfile = None
        if rfile is not None:
            rfile.close()
        if sock is not None:
            sock.close()


def _request_bytes(method: str, target: str, headers: dict[str, str]) -> bytes:
    for part in (method, target, *headers, *headers.values()):
        if "\r" in part or "\n" in part or "\0" in part:
            raise ValueError("HTTP request line or header contains CR, LF or NUL")
    if not target or " " in target or not method.isalpha():
        raise ValueError("HTTP request target must be non-empty and percent-encoded")
    lines = [f"{method} {target} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items()), "", ""]
    return "\r\n".join(lines).encode("latin-1")


class Response:
    """A reply: ``status``, lower-cased ``headers``, and its body read with ``read`` or
    ``readinto`` as it arrives."""

    def __init__(self, rfile: Any, status: int, headers: dict[str, str], *, body: str,
                 length: int | None, keep_alive: bool) -> None:
        self.status, self.headers, self.keep_alive = status, headers, keep_alive
        self._rfile = rfile
        self._framing = body  # "none", "length", "chunked" or "close"
        self._left = length  # length: bytes left; chunked: bytes left in this chunk
        self._received = 0
        self.complete = body == "none" or (body == "length" and length == 0)

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` body bytes (all that remain when negative or None); b"" at the end."""
        if size is None or size < 0:
            parts = []
            while chunk := self.read(1 << 20):
                parts.append(chunk)
            return b"".join(parts)
        if self._framing == "length" and not self.complete:
            assert self._left is not None
            data: bytes = self._rfile.read(min(size, self._left))  # no second copy
            if size:
                self._counted(len(data))
            return data
        buf = bytearray(size)
        n = self.readinto(buf)
        return bytes(memoryview(buf)[:n])

    def readinto(self, buffer: Any) -> int:
        """Fill ``buffer`` with body bytes as far as they go; 0 at the end of the body."""
        view = memoryview(buffer).cast("B")
        if self.complete or not len(view):
            return 0
        if self._framing == "length":
            assert self._left is not None
            n = int(self._rfile.readinto(view[:self._left]))
            self._counted(n)
            return n
        if self._framing == "chunked":
            return self._readinto_chunked(view)
        n = self._rfile.readinto(view)  # framed by the connection closing
        if not n:
            self.complete = True
            return 0
        self._received += n
        return int(n)

    def _counted(self, n: int) -> None:
        """Account ``n`` bytes of a Content-Length body just read (0: the connection ended)."""
        assert self._left is not None
        if not n:
            raise IncompleteBody(self._received, self._received + self._left)
        self._left -= n
        self._received += n
        self.complete = self._left == 0

    def _readinto_chunked(self, view: memoryview) -> int:
        done = 0
        while done < len(view):
            if not self._left:
                if self._left == 0:  # the CRLF that ends the previous chunk's data
                    if self._chunk_line() not in (b"\r\n", b"\n"):
                        raise ProtocolError("reply chunk data is longer than its size")
                self._left = _chunk_size(self._chunk_line())
                if self._left == 0:
                    _skip_trailers(self._rfile)
                    self.complete = True
                    break
            want = min(len(view) - done, self._left)
            n = self._rfile.readinto(view[done:done + want])
            if not n:
                raise IncompleteBody(self._received, None)
            done += n
            self._left -= n
            self._received += n
        return done

    def _chunk_line(self) -> bytes:
        line = _line(self._rfile)
        if not line:
            raise IncompleteBody(self._received, None)
        return line


def _read_response(rfile: Any, method: str) -> Response:
    for _ in range(MAX_INTERIM + 1):
        line = _line(rfile)
        if not line:
            raise ProtocolError("connection closed before a response")
        version, status = _status_line(line)
        headers = _headers(rfile)
        if not (100 <= status < 200 and status != 101):
            break  # 1xx but 101 are interim (100 Continue): the real reply follows
    else:
        raise ProtocolError(f"reply has more than {MAX_INTERIM} interim (1xx) responses")
    connection = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    keep_alive = "close" not in connection and (version == "HTTP/1.1"
                                                or "keep-alive" in connection)
    framing, length = "close", None
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        framing, length = "none", 0
    elif "transfer-encoding" in headers:
        codings = [t.strip().lower() for t in headers["transfer-encoding"].split(",")]
        if codings[-1] == "chunked":
            framing = "chunked"
            # With Content-Length too, chunked wins and the connection must not be reused.
            keep_alive = keep_alive and "content-length" not in headers
    elif "content-length" in headers:
        framing, length = "length", _content_length(headers["content-length"])
    if framing == "close":
        keep_alive = False
    return Response(rfile, status, headers, body=framing, length=length, keep_alive=keep_alive)


def _line(rfile: Any) -> bytes:
    line: bytes = rfile.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise ProtocolError(f"reply line longer than {MAX_LINE} bytes")
    if line and not line.endswith(b"\n"):
        raise ProtocolError("connection closed inside a reply line")
    return line


def _status_line(line: bytes) -> tuple[str, int]:
    parts = line.rstrip(b"\r\n").split(b" ", 2)
    if len(parts) < 2 or parts[0] not in (b"HTTP/1.1", b"HTTP/1.0") or \
            len(parts[1]) != 3 or not parts[1].isdigit():
        raise ProtocolError("reply does not start with an HTTP/1.x status line")
    status = int(parts[1])
    if status < 100:
        raise ProtocolError("reply status is below 100")
    return parts[0].decode("ascii"), status


def _block(rfile: Any, what: str) -> Iterator[bytes]:
    """The lines of a header (or trailer) block, up to the blank line that ends it."""
    for _ in range(MAX_HEADERS + 1):
        line = _line(rfile)
        if not line:
            raise ProtocolError(f"connection closed inside the reply {what}")
        if line in (b"\r\n", b"\n"):
            return
        yield line
    raise ProtocolError(f"reply has more than {MAX_HEADERS} {what[:-1]} lines")


def _headers(rfile: Any) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in _block(rfile, "headers"):
        if line[:1] in (b" ", b"\t"):
            raise ProtocolError("reply uses obsolete header line folding")
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep or not name or name != name.strip() or any(c in name for c in "\r\n\0"):
            raise ProtocolError("reply has a malformed header line")
        key, text = name.lower(), value.strip()
        if "\0" in text or "\r" in text:
            raise ProtocolError("reply has a malformed header value")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


def _content_length(value: str) -> int:
    values = {v.strip() for v in value.split(",")}
    if len(values) != 1:
        raise ProtocolError("reply has conflicting Content-Length values")
    text = values.pop()
    if not text.isdigit() or not text.isascii() or len(text) > 18:
        raise ProtocolError("reply has an invalid Content-Length")
    return int(text)


def _chunk_size(line: bytes) -> int:
    text = line.split(b";", 1)[0].strip()
    if not text or len(text) > _CHUNK_SIZE_DIGITS or \
            text.strip(b"0123456789abcdefABCDEF"):
        raise ProtocolError("reply has an invalid chunk size")
    return int(text, 16)


def _skip_trailers(rfile: Any) -> None:
    for _ in _block(rfile, "trailers"):
        pass
