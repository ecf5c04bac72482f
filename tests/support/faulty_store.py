"""Test double: wraps a store and, on demand, fails calls or damages the bytes read back."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from typing import BinaryIO

from neffcache.errors import UnavailableError
from neffcache.store.base import Store


class FaultyStore:
    """Test double: a store that misbehaves on demand; with no faults set it is transparent.

    Faults (plain attributes, change them at any time):
      fail_on      1-based number of the first counted call that raises UnavailableError
      fail_count   how many consecutive counted calls fail from there (None: every one after)
      fail_methods which protocol methods are counted ("check", "has", "open", "read", "put",
                   "list", "delete"); None counts them all
      truncate     key → number of bytes a read of that key returns before the data ends
      corrupt      keys whose bytes read back with one byte flipped (same size, other sha256)
      damaged_reads how many reads of each truncated/corrupt key come back damaged before it
                   reads back intact (None: every one), as a fault on the way rather than at rest
    ``calls`` records every (method, key) in order, for assertions such as "fetched once";
    ``ranges`` every (key, start, length) read or opened.
    """

    def __init__(self, inner: Store, *, fail_on: int | None = None, fail_count: int | None = 1,
                 fail_methods: set[str] | None = None, truncate: dict[str, int] | None = None,
                 corrupt: set[str] | None = None, damaged_reads: int | None = None) -> None:
        self.inner = inner
        self.url = f"faulty+{inner.url}"
        self.fail_on = fail_on
        self.fail_count = fail_count
        self.fail_methods = fail_methods
        self.truncate: dict[str, int] = dict(truncate or {})
        self.corrupt: set[str] = set(corrupt or ())
        self.damaged_reads = damaged_reads
        self.calls: list[tuple[str, str]] = []
        self.ranges: list[tuple[str, int, int | None]] = []
        self._damages: dict[str, int] = {}
        self._counted = 0
        self._lock = threading.Lock()

    def check(self) -> None:
        self._call("check", "")
        self.inner.check()

    def has(self, key: str) -> bool:
        self._call("has", key)
        return self.inner.has(key)

    def open(self, key: str, start: int = 0, length: int | None = None) -> BinaryIO:
        self._call("open", key)
        self.ranges.append((key, start, length))
        if self._damaged(key):
            data = self._damage(key, self.inner.read(key))
            return io.BytesIO(data[start:] if length is None else data[start:start + length])
        return self.inner.open(key, start, length)

    def read(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        self._call("read", key)
        self.ranges.append((key, start, length))
        if not self._damaged(key):
            return self.inner.read(key, start, length)
        data = self._damage(key, self.inner.read(key))
        return data[start:] if length is None else data[start:start + length]

    def put(self, key: str, source: BinaryIO, *, if_absent: bool = True) -> bool:
        self._call("put", key)
        return self.inner.put(key, source, if_absent=if_absent)

    def list(self, prefix: str) -> Iterator[str]:
        self._call("list", prefix)
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self._call("delete", key)
        self.inner.delete(key)

    def _call(self, method: str, key: str) -> None:
        with self._lock:
            self.calls.append((method, key))
            if self.fail_methods is not None and method not in self.fail_methods:
                return
            self._counted += 1
            n = self._counted
        if self.fail_on is None or n < self.fail_on:
            return
        if self.fail_count is None or n < self.fail_on + self.fail_count:
            raise UnavailableError(f"{self.url}: injected failure on call {n} ({method} {key!r})")

    def _damaged(self, key: str) -> bool:
        if key not in self.truncate and key not in self.corrupt:
            return False
        with self._lock:
            n = self._damages[key] = self._damages.get(key, 0) + 1
        return self.damaged_reads is None or n <= self.damaged_reads

    def _damage(self, key: str, data: bytes) -> bytes:
        if key in self.truncate:
            data = data[: self.truncate[key]]
        if key in self.corrupt:
            if not data:
                return b"\x00"
            mid = len(data) // 2
            data = data[:mid] + bytes([data[mid] ^ 0xFF]) + data[mid + 1:]
        return data
