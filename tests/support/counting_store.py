"""Test double: a transparent store wrapper that counts, per key, the GETs made and the bytes
read through it (``open`` and ``read``); every call goes to ``inner`` unchanged."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any, BinaryIO

from neffcache.store.base import Store


class CountingStore:
    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.url = inner.url
        self.gets: Counter[str] = Counter()
        self.bytes: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _count(self, key: str, n: int, get: bool) -> None:
        with self._lock:
            self.gets[key] += get
            self.bytes[key] += n

    def check(self) -> None:
        self.inner.check()

    def has(self, key: str) -> bool:
        return self.inner.has(key)

    def open(self, key: str, start: int = 0, length: int | None = None) -> BinaryIO:
        self._count(key, 0, True)
        return _Counted(self.inner.open(key, start, length), lambda n: self._count(key, n, False))

    def read(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        data = self.inner.read(key, start, length)
        self._count(key, len(data), True)
        return data

    def put(self, key: str, source: BinaryIO, *, if_absent: bool = True) -> bool:
        return self.inner.put(key, source, if_absent=if_absent)

    def list(self, prefix: str) -> Iterator[str]:
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def __getattr__(self, name: str) -> Any:  # stale_temps, close...: the inner store's
        return getattr(self.inner, name)


class _Counted:
    def __init__(self, body: BinaryIO, seen: Any) -> None:
        self.body, self.seen = body, seen

    def read(self, n: int = -1) -> bytes:
        data = self.body.read(n)
        self.seen(len(data))
        return data

    def close(self) -> None:
        self.body.close()

    def __enter__(self) -> _Counted:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
