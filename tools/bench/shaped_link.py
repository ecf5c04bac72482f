"""A link-shaping TCP proxy: an S3 server on 127.0.0.1 seen through an S3-like link.

    python tools/bench/shaped_link.py --upstream 127.0.0.1:8333            # 20 ms, 1 Gbit/s,
    python tools/bench/shaped_link.py --upstream 127.0.0.1:8333 --port 0   # 700 Mbit/s/conn

Prints ``listening <port>`` on stdout once it accepts connections, then forwards every
connection to the upstream, shaped three ways, each direction on its own (a full-duplex link):

- **latency**: the first response bytes after a client sends something are held until
  ``latency`` after that client chunk was passed on. S3 clients do not pipeline (HTTP/1.1: the next
  request leaves after the last response byte came through here), so every HTTP request, on a
  new or a kept-alive connection, waits ``latency`` to its first byte; a PUT's body counts
  from its last chunk, and an ``Expect: 100-continue`` exchange pays twice, as on a real link.
  Opening a connection costs nothing extra (a real link would charge a round trip for it).
- **a shared link rate** (bytes/s over all connections, per direction) and
- **a per-connection cap**, both token buckets counted in bytes (one token = one byte).

The buckets are a debt-based token bucket (GCRA-like): a chunk of ``n`` bytes takes ``n``
tokens at once, going into debt if it must, and the chunk waits until the debt is paid off
at the bucket's rate. Chunks are served in arrival order, so connections share the link
fairly, and ``granted`` counts exactly the bytes that passed. A chunk first waits for its
connection's cap, then for the shared link (reserving the shared link while still waiting
for the connection would waste link time other connections could use).

Written here rather than taken from a library: aiolimiter's bucket holds a full period's
worth of tokens (a rate of 125 MB/s per second is a 125 MB burst) and knows nothing of two
buckets in series; pyrate-limiter keeps one timestamp per unit of weight (a byte).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

CHUNK = 256 << 10  # bytes read at a time from either side
IDLE_AFTER_EOF_S = 5.0  # after the client's EOF, how long a response may still take


@dataclass(frozen=True, slots=True)
class LinkShape:
    latency_s: float = 0.020  # to the first response byte, per request
    link_bps: float = 1e9  # bits per second, shared by every connection (each direction)
    conn_bps: float = 700e6  # bits per second, per connection (each direction)

    def limit_seconds(self, nbytes: int) -> float:
        """The physical limit of moving ``nbytes`` down this link: one request's latency plus
        the bytes at the link rate (no tool can do better, however many connections)."""
        return self.latency_s + nbytes * 8 / self.link_bps

    def describe(self) -> str:
        return (f"{self.latency_s * 1e3:.0f} ms to first byte per request, "
                f"{self.link_bps / 1e6:.0f} Mbit/s shared, {self.conn_bps / 1e6:.0f} Mbit/s "
                f"per connection")


class TokenBucket:
    """Tokens are bytes: ``rate`` per second, at most ``burst`` saved up. ``take(n, now)``
    takes ``n`` tokens (into debt if needed) and says how long the taker must wait before
    its bytes may pass. Pure: the caller supplies the clock."""

    def __init__(self, rate: float, burst: float, now: float) -> None:
        if rate <= 0 or burst <= 0:
            raise ValueError(f"rate and burst must be > 0, got {rate}, {burst}")
        self.rate, self.burst = rate, burst
        self.tokens = burst
        self.stamp = now
        self.granted = 0  # bytes that took tokens

    def take(self, n: int, now: float) -> float:
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        self.tokens -= n
        self.granted += n
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate


Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class ShapedLink:
    """The proxy: ``serve()`` listens on 127.0.0.1; every connection goes to ``upstream``.
    ``clock`` and ``sleep`` are the event loop's unless a test gives its own."""

    def __init__(self, upstream: tuple[str, int], shape: LinkShape, *,
                 clock: Clock = time.monotonic, sleep: Sleep = asyncio.sleep) -> None:
        self.upstream, self.shape = upstream, shape
        self.clock, self.sleep = clock, sleep
        now = clock()
        self.link = {d: TokenBucket(shape.link_bps / 8, _burst(shape.link_bps), now)
                     for d in ("up", "down")}
        self.conn_buckets: list[dict[str, TokenBucket]] = []  # one per connection, kept
        self.requests = 0  # response starts held for latency
        self._handlers: set[asyncio.Task[None]] = set()
        self.connections = 0

    async def serve(self, port: int = 0) -> asyncio.Server:
        return await asyncio.start_server(self._handle, "127.0.0.1", port)

    async def _handle(self, creader: asyncio.StreamReader,
                      cwriter: asyncio.StreamWriter) -> None:
        self.connections += 1
        now = self.clock()
        conn = {d: TokenBucket(self.shape.conn_bps / 8, _burst(self.shape.conn_bps), now)
                for d in ("up", "down")}
        self.conn_buckets.append(conn)
        try:
            sreader, swriter = await asyncio.open_connection(*self.upstream)
        except OSError:
            cwriter.close()
            return
        pending: list[float] = []  # when the response may start (latency after a request chunk)
        up = asyncio.ensure_future(self._pump(creader, swriter, conn["up"], "up", pending))
        down = asyncio.ensure_future(self._pump(sreader, cwriter, conn["down"], "down",
                                                pending))
        me = asyncio.current_task()
        if me is not None:  # asyncio drops its own reference once the client has gone
            self._handlers.add(me)
        try:
            done, _ = await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
            if down not in done:  # the client sent its last byte: let a response finish
                await asyncio.wait({down}, timeout=IDLE_AFTER_EOF_S)
        finally:
            for task in (up, down):
                task.cancel()
            for w in (cwriter, swriter):
                w.close()
            self._handlers.discard(me)  # type: ignore[arg-type]

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    conn: TokenBucket, direction: str, pending: list[float]) -> None:
        try:
            await self._forward(reader, writer, conn, direction, pending)
        except (ConnectionError, OSError):
            pass  # either side went away: the connection ends

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       conn: TokenBucket, direction: str, pending: list[float]) -> None:
        while data := await reader.read(CHUNK):
            if direction == "down" and pending:
                self.requests += 1
                await self._wait(pending.pop() - self.clock())
            await self._wait(conn.take(len(data), self.clock()))
            await self._wait(self.link[direction].take(len(data), self.clock()))
            writer.write(data)
            if direction == "up":  # before yielding: no response can come back before this
                pending[:] = [self.clock() + self.shape.latency_s]
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()

    async def _wait(self, seconds: float) -> None:
        if seconds > 0:
            await self.sleep(seconds)


def _burst(bps: float) -> float:
    """A bucket saves up one chunk or 2 ms at its rate, whichever is more: small enough that
    the rate holds over a few ms, large enough that a chunk never waits for itself."""
    return max(float(CHUNK), bps / 8 * 0.002)


@contextmanager
def shaped_link(upstream: str, shape: LinkShape) -> Iterator[tuple[str, int]]:
    """Run the proxy in its own process (so its CPU is not the benchmark's) in front of
    ``upstream`` (``http://127.0.0.1:PORT``); yield (its endpoint URL, its pid)."""
    host, port = upstream.removeprefix("http://").rstrip("/").rsplit(":", 1)
    proc = subprocess.Popen(
        [sys.executable, __file__, "--upstream", f"{host}:{port}",
         "--latency-ms", str(shape.latency_s * 1e3), "--link-mbit", str(shape.link_bps / 1e6),
         "--conn-mbit", str(shape.conn_bps / 1e6)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        if line[:1] != ["listening"]:
            raise RuntimeError(f"shaped link did not start: {line}")
        yield f"http://127.0.0.1:{line[1]}", proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def process_cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of a running process (Linux /proc)."""
    fields = open(f"/proc/{pid}/stat", encoding="ascii").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _main(args: argparse.Namespace) -> None:
    host, port = args.upstream.rsplit(":", 1)
    link = ShapedLink((host, int(port)), LinkShape(args.latency_ms / 1e3, args.link_mbit * 1e6,
                                                   args.conn_mbit * 1e6))
    server = await link.serve(args.port)
    print(f"listening {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--upstream", required=True, help="HOST:PORT of the S3 server")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: free)")
    p.add_argument("--latency-ms", type=float, default=20.0)
    p.add_argument("--link-mbit", type=float, default=1000.0)
    p.add_argument("--conn-mbit", type=float, default=700.0)
    try:
        asyncio.run(_main(p.parse_args()))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
