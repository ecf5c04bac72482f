"""Test double: a store held in a dict, implementing the store protocol and nothing else."""

from __future__ import annotations

import io
import itertools
import threading
from collections.abc import Iterator
from typing import BinaryIO

from neffcache.errors import NotFoundError
from neffcache.store.base import check_key

_ids = itertools.count(1)


class MemoryStore:
    """Test double (not for production): objects live in ``self.objects``, a dict key → bytes.
    Safe to share between threads; ``put(if_absent=True)`` is atomic under one lock."""

    def __init__(self) -> None:
        self.url = f"memory://{next(_ids)}"
        self.objects: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def check(self) -> None:
        return None

    def has(self, key: str) -> bool:
        return check_key(key) in self.objects

    def open(self, key: str, start: int = 0, length: int | None = None) -> BinaryIO:
        return io.BytesIO(self.read(key, start, length))

    def read(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        data = self._get(key)
        return data[start:] if length is None else data[start:start + length]

    def put(self, key: str, source: BinaryIO, *, if_absent: bool = True) -> bool:
        check_key(key)
        data = source.read()
        with self._lock:
            if if_absent and key in self.objects:
                return False
            self.objects[key] = bytes(data)
            return True

    def list(self, prefix: str) -> Iterator[str]:
        with self._lock:
            keys = [k for k in self.objects if k.startswith(prefix)]
        yield from keys

    def delete(self, key: str) -> None:
        with self._lock:
            self.objects.pop(check_key(key), None)

    def _get(self, key: str) -> bytes:
        try:
            return self.objects[check_key(key)]
        except KeyError:
            raise NotFoundError(f"{self.url}/{key}: not found") from None
