"""A TEST DOUBLE of an S3 endpoint on 127.0.0.1 that answers from a script of canned replies.

For what a real server cannot be made to do on demand: throttle (503 SlowDown), fail with 500s,
redirect to another region, complain about clock skew, or drop a connection. Every request it
receives is recorded (method, path, headers), so a test can check what the client sent.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False  # close the connection without answering
    short_by: int = 0  # announce len(body) but send this many bytes fewer, then close


def s3_error(code: str, status: int, **headers: str) -> Reply:
    body = (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
            f"<Message>canned by the double</Message></Error>").encode()
    return Reply(status, body, dict(headers, **{"Content-Type": "application/xml"}))


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    peer: tuple[str, int]  # the client's address: one per TCP connection


class S3ReplyDouble:
    """Replies are taken in order; when the script runs out, ``default`` answers."""

    def __init__(self, default: Reply) -> None:
        self.script: list[Reply] = []
        self.default = default
        self.seen: list[Seen] = []
        self.lock = threading.Lock()

    def next_reply(self, seen: Seen) -> Reply:
        with self.lock:
            self.seen.append(seen)
            return self.script.pop(0) if self.script else self.default


def _handler(double: S3ReplyDouble) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            reply = double.next_reply(Seen(self.command, self.path,
                                           {k.lower(): v for k, v in self.headers.items()},
                                           self.client_address))
            if reply.drop:
                self.close_connection = True
                return
            self.send_response_only(reply.status)
            if "Date" not in reply.headers:
                self.send_header("Date", self.date_time_string())
            for k, v in reply.headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(reply.body[:len(reply.body) - reply.short_by])
            if reply.short_by:
                self.close_connection = True

        do_GET = do_HEAD = _answer  # noqa: N815 - http.server's naming

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@contextmanager
def s3_reply_double(default: Reply | None = None) -> Iterator[tuple[str, S3ReplyDouble]]:
    """(endpoint URL, double) for the duration of the block."""
    double = S3ReplyDouble(default or Reply(200, b"default body"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(double))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", double
    finally:
        server.shutdown()
        server.server_close()
