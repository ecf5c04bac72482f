"""An ordered list of stores read as one: a read that misses on one store goes to the next, and
a repeated read of the same bytes (the restore re-fetches only what failed verification) starts
at the next store, so a damaged object on the primary is served by a mirror. Read-only."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import BinaryIO

from neffcache.errors import NotFoundError, UsageError
from neffcache.store.base import Store


class MirroredStore:
    """Reads from ``stores`` in order (the first is the primary); counts what each served."""

    def __init__(self, stores: Sequence[Store]) -> None:
        if not stores:
            raise UsageError("a mirrored store needs at least one store")
        self.stores = tuple(stores)
        self.url = self.stores[0].url
        self._asked: Counter[tuple[str, int, int | None]] = Counter()
        self._served: Counter[str] = Counter()
        self._lock = threading.Lock()

    def served(self) -> dict[str, int]:
        """Objects (or ranges) served, per store URL, in the stores' order."""
        with self._lock:
            return {s.url: self._served[s.url] for s in self.stores if self._served[s.url]}

    def check(self) -> None:
        self.stores[0].check()

    def has(self, key: str) -> bool:
        return any(s.has(key) for s in self.stores)

    def _order(self, key: str, start: int, length: int | None) -> tuple[Store, ...]:
        with self._lock:
            n = self._asked[(key, start, length)]
            self._asked[(key, start, length)] += 1
        first = n % len(self.stores)
        return self.stores[first:] + self.stores[:first]

    def open(self, key: str, start: int = 0, length: int | None = None) -> BinaryIO:
        missed: NotFoundError | None = None
        for store in self._order(key, start, length):
            try:
                body = store.open(key, start, length)
            except NotFoundError as exc:
                missed = missed or exc
                continue
            with self._lock:
                self._served[store.url] += 1
            return body
        assert missed is not None
        raise missed

    def read(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        with self.open(key, start, length) as body:
            return body.read()

    def put(self, key: str, source: BinaryIO, *, if_absent: bool = True) -> bool:
        return self.stores[0].put(key, source, if_absent=if_absent)

    def list(self, prefix: str) -> Iterator[str]:
        seen: set[str] = set()
        for store in self.stores:
            for key in store.list(prefix):
                if key not in seen:
                    seen.add(key)
                    yield key

    def delete(self, key: str) -> None:
        self.stores[0].delete(key)
