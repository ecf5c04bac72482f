"""An ordered list of stores read as one (writes go to the first)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO, TypeVar

from neffcache.errors import (
    ConfigError,
    IntegrityError,
    NeffcacheError,
    NotFoundError,
    UnavailableError,
    UsageError,
)
from neffcache.store.base import Store

_DOWN = (UnavailableError, ConfigError)
T = TypeVar("T")


class MirroredStore(Store):
    """Reads from ``stores`` in order: a miss goes to the next, and a repeated read of the same
    bytes (a re-fetch after a failed verification) starts at the next. A store that cannot serve
    is passed over for the rest of the run (a dead primary costs one probe, not one timeout per
    object); ``notice`` gets one line for each."""

    def __init__(self, stores: Sequence[Store],
                 notice: Callable[[str], None] | None = None) -> None:
        if not stores:
            raise UsageError("a mirrored store needs at least one store")
        self.stores = tuple(stores)
        self.url = self.stores[0].url
        self._notice = notice
        self._asked: Counter[tuple[str, int, int | None]] = Counter()
        self._served: Counter[str] = Counter()
        self._checked: set[int] = set()
        self._down: dict[int, NeffcacheError] = {}
        self._lock = threading.Lock()
        self._checking = tuple(threading.Lock() for _ in self.stores)

    def served(self) -> dict[str, int]:
        """Objects (or ranges) served, per store URL."""
        with self._lock:
            return {s.url: self._served[s.url] for s in self.stores if self._served[s.url]}

    def check(self) -> None:
        """Fine when one store answers (the primary first); else the primary's error."""
        if any(self._usable(i) for i in range(len(self.stores))):
            return
        with self._lock:
            raise self._down[0]

    def has(self, key: str) -> bool:
        return any(self._call(i, lambda s: s.has(key), False) for i in range(len(self.stores)))

    def open(self, key: str, start: int = 0, length: int | None = None) -> BinaryIO:
        missed: NeffcacheError | None = None
        for i in self._order(key, start, length):
            if not self._usable(i):
                continue
            try:
                body = self.stores[i].open(key, start, length)
            except NotFoundError as exc:
                missed = missed or exc
                continue
            except _DOWN as exc:
                self._mark_down(i, exc)
                continue
            with self._lock:
                self._served[self.stores[i].url] += 1
            return body
        with self._lock:
            raise missed or self._down[min(self._down)]

    def put(self, key: str, source: BinaryIO, *, if_absent: bool = True) -> bool:
        return self.stores[0].put(key, source, if_absent=if_absent)

    def list(self, prefix: str) -> Iterator[str]:
        seen: set[str] = set()
        for i in range(len(self.stores)):
            keys: tuple[str, ...] = self._call(i, lambda s: tuple(s.list(prefix)), ())
            yield from (key for key in dict.fromkeys(keys) if key not in seen)
            seen.update(keys)

    def delete(self, key: str) -> None:
        self.stores[0].delete(key)

    def _order(self, key: str, start: int, length: int | None) -> tuple[int, ...]:
        n = len(self.stores)
        with self._lock:
            first = self._asked[(key, start, length)]
            self._asked[(key, start, length)] += 1
        return tuple((first + i) % n for i in range(n))

    def _usable(self, i: int) -> bool:
        with self._checking[i]:  # one probe, however many threads need the store at once
            with self._lock:
                if i in self._down or i in self._checked:
                    return i not in self._down
            try:
                self.stores[i].check()
            except (*_DOWN, IntegrityError) as exc:
                self._mark_down(i, exc)
                return False
            with self._lock:
                self._checked.add(i)
            return True

    def _call(self, i: int, call: Callable[[Store], T], default: T) -> T:
        if not self._usable(i):
            return default
        try:
            return call(self.stores[i])
        except _DOWN as exc:
            self._mark_down(i, exc)
            return default

    def _mark_down(self, i: int, exc: NeffcacheError) -> None:
        with self._lock:
            if i in self._down:
                return
            self._down[i] = exc
        if self._notice is not None:
            others = "the next store" if i + 1 < len(self.stores) else "the other stores"
            self._notice(f"warning: {self.stores[i].url} passed over, {others} serve instead: "
                         f"{exc}")
