"""Test double: a transparent store wrapper that makes writes (or reads) slow, so a publish (or a
restore) through it runs long, deterministically: a fixed wait per object, or a gate the test
opens a few writes at a time; it records the keys written and read."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import BinaryIO

from neffcache.store.base import Store


class SlowStore:
    """Each ``put`` of a key under one of ``prefixes`` waits ``delay`` seconds first, and takes
    one permit of ``gate`` if one is given (``gate.release(n)`` lets n more through); every
    call goes to ``inner`` unchanged. ``puts`` records each key put, in order; ``on_has``, if
    set, is called with the key after each ``has`` answers (a hook to act between a publish's
    decision and its next step). Each ``open``/``read`` waits ``read_delay`` seconds first and
    is recorded in ``reads`` (key, in the order they began)."""

    def __init__(self, inner: Store, *, delay: float = 0.0, prefixes: tuple[str, ...] = ("",),
                 gate: threading.Semaphore | None = None,
                 on_has: Callable[[str, bool], None] | None = None,
                 read_delay: float = 0.0) -> None:
        self.inner = inner
        self.read_delay = read_delay
        self.reads: list[str] = []
        self.url = f"slow+{inner.url}"
        self.delay = delay
        self.prefixes = prefixes
        self.gate = gate
        self.on_has = on_has
        self.puts: list[str] = []
        self._lock = threading.Lock()

    def check(self) -> None:
        self.inner.check()

    def has(self, key: str) -> bool:
        found = self.inner.has(key)
        if self.on_has is not None:
            self.on_has(key, found)
        return found

    def open(self, key: str, start: int = 0, length: int | None = None) -> BinaryIO:
        self._reading(key)
        return self.inner.open(key, start, length)

    def read(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        self._reading(key)
        return self.inner.read(key, start, length)

    def _reading(self, key: str) -> None:
        with self._lock:
            self.reads.append(key)
        time.sleep(self.read_delay)

    def put(self, key: str, source: BinaryIO, *, if_absent: bool = True) -> bool:
        with self._lock:
            self.puts.append(key)
        if key.startswith(self.prefixes):
            if self.gate is not None:
                self.gate.acquire()
            time.sleep(self.delay)
        return self.inner.put(key, source, if_absent=if_absent)

    def list(self, prefix: str) -> Iterator[str]:
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)
