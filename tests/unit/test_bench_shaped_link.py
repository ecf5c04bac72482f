"""tools/bench/shaped_link.py: the benchmark's link-shaping proxy forwards bytes exactly, holds
each response's start for the latency, and lets bytes through only as its token buckets
allow (asserted on the buckets' accounting and the waits asked for, never on wall time)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

PATH = Path(__file__).resolve().parents[2] / "tools" / "bench" / "shaped_link.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("shaped_link", PATH)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["shaped_link"] = mod  # dataclasses look the module up by name
    spec.loader.exec_module(mod)
    return mod


sl = _load()


def test_bucket_lends_its_burst_then_charges_each_byte_at_its_rate() -> None:
    b = sl.TokenBucket(rate=1000.0, burst=100.0, now=0.0)
    assert b.take(100, 0.0) == 0.0  # the burst
    assert b.take(50, 0.0) == pytest.approx(0.05)  # 50 bytes of debt at 1000 B/s
    assert b.take(50, 0.05) == pytest.approx(0.05)  # the debt was paid; 50 more owed
    assert b.take(10, 10.0) == 0.0  # idle time refills, but only up to the burst
    assert b.tokens == pytest.approx(90.0)
    assert b.granted == 210
    with pytest.raises(ValueError):
        sl.TokenBucket(rate=0.0, burst=1.0, now=0.0)


class FakeTime:
    """A test double for the clock and sleep: time passes only when the proxy sleeps, and
    every sleep asked for is recorded."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


async def _upstream(reply: bytes | None) -> asyncio.Server:
    """A real TCP server on 127.0.0.1: echoes what it reads, or answers each read with
    ``reply``."""
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while data := await r.read(1 << 16):
            w.write(reply if reply is not None else data)
            await w.drain()
        w.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def _port(server: asyncio.Server) -> int:
    return int(server.sockets[0].getsockname()[1])


def test_forwards_every_byte_both_ways_over_several_requests_on_one_connection() -> None:
    async def go() -> list[tuple[bytes, bytes]]:
        upstream = await _upstream(None)
        link = sl.ShapedLink(("127.0.0.1", _port(upstream)), sl.LinkShape(0.0, 1e12, 1e12))
        proxy = await link.serve()
        r, w = await asyncio.open_connection("127.0.0.1", _port(proxy))
        out = []
        for size in (1, 3 << 20, 4097):  # requests one after another, kept alive
            sent = os.urandom(size)
            w.write(sent)
            await w.drain()
            out.append((sent, await r.readexactly(size)))
        w.close()
        proxy.close()
        upstream.close()
        assert link.connections == 1 and link.requests >= 3
        return out

    for sent, got in asyncio.run(go()):
        assert got == sent


def test_a_tiny_rate_lets_bytes_through_one_token_each_after_the_latency() -> None:
    n = 1 << 20
    t = FakeTime()

    async def go() -> tuple[bytes, object]:
        upstream = await _upstream(b"x" * n)  # one request byte -> 1 MiB of response
        shape = sl.LinkShape(latency_s=0.5, link_bps=80_000.0, conn_bps=8_000.0)
        link = sl.ShapedLink(("127.0.0.1", _port(upstream)), shape, clock=t.clock,
                             sleep=t.sleep)
        proxy = await link.serve()
        r, w = await asyncio.open_connection("127.0.0.1", _port(proxy))
        w.write(b"?")
        await w.drain()
        got = await r.readexactly(n)
        w.close()
        proxy.close()
        upstream.close()
        return got, link

    got, link = asyncio.run(go())
    assert got == b"x" * n
    (conn,) = link.conn_buckets
    assert conn["down"].granted == link.link["down"].granted == n  # one token per byte
    assert conn["up"].granted == link.link["up"].granted == 1
    assert link.requests == 1 and t.sleeps[0] == pytest.approx(0.5)  # the latency, once
    # Every byte past the per-connection burst waited its token at 1,000 bytes/s; the
    # shared link (10x faster) refilled during those waits and asked for nothing more.
    burst = conn["down"].burst
    assert sum(t.sleeps[1:]) == pytest.approx((n - burst) / 1000.0)
