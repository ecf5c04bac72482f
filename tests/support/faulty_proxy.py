"""A fault-injecting HTTP forward proxy on 127.0.0.1 for tests: S3 requests go through it
unchanged (so SigV4 stays valid) and a seeded fraction of object GETs go wrong on the way back.

Faults (``FAULTS``): ``reset`` (part of the body, then a TCP reset), ``truncate`` (part of the
body, then the connection closed; Content-Length still promises all of it), ``corrupt`` (the
whole body with a byte flipped: same length, other sha256), ``slowdown`` (503 with S3's
SlowDown error document) and ``stall`` (no answer for ``stall_seconds``, then the answer).

Which GET gets which fault is a pure function of (seed, key, Range header, how many times that
same request was seen), not of the order threads send requests in, so a seed gives the
same faults run after run. ``fault_next`` forces a fault on the next GET whose URL contains a
string (e.g. the manifest's); ``stall_all`` makes every request wait (a stalled server);
``stall_puts`` makes the PUTs whose path contains it wait, after the first ``pass_puts`` of
them (a store that stops taking uploads mid-publish).
"""

from __future__ import annotations

import hashlib
import struct
import threading
from collections import Counter
from collections.abc import Sequence

from tests.support.forward_proxy import ForwardingHandler, LoopbackProxy

FAULTS = ("reset", "truncate", "corrupt", "slowdown", "stall")
SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
            b"<Message>Please reduce your request rate.</Message></Error>")


class FaultyProxy(LoopbackProxy):
    """``rate`` of object GETs (GETs of a key, not listings) get one of ``faults``."""

    def __init__(self, *, seed: int = 0, rate: float = 0.0,
                 faults: Sequence[str] = ("truncate",), stall_seconds: float = 30.0) -> None:
        unknown = set(faults) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; expected some of {FAULTS}")
        super().__init__(_Handler)
        self.seed, self.rate, self.faults = seed, rate, tuple(faults)
        self.stall_seconds = stall_seconds
        self.stall_all = False
        self.stall_puts = ""  # PUTs whose path contains this stall (after pass_puts of them)
        self.pass_puts = 0
        self.puts_passed = 0  # such PUTs answered
        self.puts_stalled = 0  # such PUTs waiting now or since
        self.injected: Counter[str] = Counter()  # fault kind -> how many were injected
        self.object_gets = 0
        self.log: list[tuple[str, str, str | None, str]] = []  # method, path, range, fault
        self._forced: list[tuple[str, str]] = []  # (path substring, fault)
        self._seen: Counter[tuple[str, str | None]] = Counter()
        self._release = threading.Event()

    def __exit__(self, *exc: object) -> None:
        self._release.set()  # stalled handlers answer now
        super().__exit__(*exc)

    def fault_next(self, contains: str, fault: str) -> None:
        """The next GET (of an object or a listing) whose path and query contain
        ``contains`` gets ``fault`` ("": none); calls queue up."""
        if fault and fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}")
        with self._lock:
            self._forced.append((contains, fault))

    def decide(self, method: str, path: str, query: str,
               range_header: str | None) -> tuple[str, int]:
        """(fault or "", a number to place it with) for one request; records it."""
        with self._lock:
            fault = ""
            n = self._seen[(path, range_header)]
            self._seen[(path, range_header)] += 1
            key = path.lstrip("/").partition("/")[2]  # without the bucket: tests name it at random
            h = hashlib.sha256(f"{self.seed}|{key}|{range_header}|{n}".encode()).digest()
            roll, pick, place = struct.unpack_from(">QQQ", h)
            forced = next((f for f in self._forced if f[0] in f"{path}?{query}"), None)
            if method == "GET" and forced is not None:
                self._forced.remove(forced)
                fault = forced[1]
            elif method == "GET" and _is_object(path, query) and self.faults \
                    and roll / 2**64 < self.rate:
                fault = self.faults[pick % len(self.faults)]
            if method == "GET" and _is_object(path, query):
                self.object_gets += 1
            if fault:
                self.injected[fault] += 1
            self.log.append((method, path, range_header, fault))
            return fault, place

    def wait_stall(self) -> None:
        self._release.wait(self.stall_seconds)

    def stalls_put(self, method: str, path: str) -> bool:
        """Whether this request is a PUT to stall (counts it either way)."""
        if method != "PUT" or not self.stall_puts or self.stall_puts not in path:
            return False
        with self._lock:
            if self.pass_puts > 0:
                self.pass_puts -= 1
                return False
            self.puts_stalled += 1
            return True


def _is_object(path: str, query: str) -> bool:
    """A GET of a key (``/bucket/key...``), not a listing of a bucket."""
    return "list-type" not in query and len([p for p in path.split("/") if p]) >= 2


class _Handler(ForwardingHandler):
    def _forward(self) -> None:
        target = self.target()
        if target is None:
            return
        proxy: FaultyProxy = self.server.proxy  # type: ignore[attr-defined]
        body = self.read_body()
        if proxy.stall_all:
            proxy.wait_stall()
        stalled_put = proxy.stalls_put(self.command, target.path)
        if stalled_put:
            proxy.wait_stall()
        fault, place = proxy.decide(self.command, target.path, target.query,
                                    self.headers.get("Range"))
        if fault == "slowdown":
            self.answer(503, "Slow Down", [("Content-Type", "application/xml")], SLOWDOWN)
            return
        if fault == "stall":
            proxy.wait_stall()
        status, reason, kept, data = self.ask_upstream(target, body)
        if fault == "corrupt" and data and status < 300:
            i = place % len(data)
            data = data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]
        if fault in ("reset", "truncate") and data and status < 300:
            self.answer(status, reason, kept, data, cut_at=place % len(data),
                        reset=fault == "reset")
            return
        self.answer(status, reason, kept, data)
        if (self.command == "PUT" and proxy.stall_puts and proxy.stall_puts in target.path
                and not stalled_put):
            with proxy._lock:
                proxy.puts_passed += 1

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward  # noqa: N815

    def log_message(self, format: str, *args: object) -> None:
        pass

    def handle(self) -> None:
        try:
            super().handle()
        except (ConnectionError, TimeoutError):
            pass  # the client went away (it gave up on a stalled answer): nothing to do
