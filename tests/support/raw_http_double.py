"""A TEST DOUBLE of an HTTP server on 127.0.0.1 that answers each request with scripted raw
bytes: for the replies no real server sends on demand (chunked bodies cut mid-chunk, folded
headers, conflicting lengths, a connection closed mid-reply). Requests are recorded as bytes.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class RawReply:
    data: bytes
    close: bool = False  # close the connection after writing ``data``
    pieces: int = 1  # write ``data`` in this many separate sends (a reply split in segments)


@dataclass
class RawHttpDouble:
    port: int
    script: list[RawReply] = field(default_factory=list)
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_reply(self, request: bytes) -> RawReply | None:
        with self.lock:
            self.requests.append(request)
            return self.script.pop(0) if self.script else None


def _serve_connection(double: RawHttpDouble, conn: socket.socket) -> None:
    with conn:
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
            request, _, buf = buf.partition(b"\r\n\r\n")
            reply = double.next_reply(request + b"\r\n\r\n")
            if reply is None:
                return
            step = max(1, -(-len(reply.data) // reply.pieces))
            for i in range(0, len(reply.data), step):
                conn.sendall(reply.data[i:i + step])
            if reply.close:
                conn.shutdown(socket.SHUT_WR)
                return


@contextmanager
def raw_http_double(host: str = "127.0.0.1") -> Iterator[RawHttpDouble]:
    """A listening double on ``host`` (a loopback address) for the block; each connection is
    served on its own thread."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.create_server((host, 0), family=family)
    double = RawHttpDouble(listener.getsockname()[1])
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with double.lock:
                double.connections += 1
            threading.Thread(target=_serve_connection, args=(double, conn), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield double
    finally:
        stop.set()
        try:
            listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept() on Linux
        except OSError:
            pass
        listener.close()
        thread.join(timeout=5)
