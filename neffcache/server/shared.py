"""Answers built from the index's state alone (``/metrics``, ``/api/summary``), built once per
change of that state and shared by every request that asks meanwhile.

Before each answer the index's change counter is read (one row, ``Index.change_count``; every
write raises it, whoever writes). The held answer is served while the counter has not moved;
when it has, one request rebuilds it and the requests that ask meanwhile wait for that build
instead of starting their own (single flight, one lock per answer). So a change is in the next
response, and 20 clients cost one build per change instead of 20 builds each.

Some parts of these answers follow the clock, not the index (a lease expires, a run leaves
the last 7 days): an answer older than ``MAX_AGE`` is rebuilt by the next request while the
others keep getting the held one (they never wait for a rebuild the index did not ask for).
An index that cannot say its counter (unreachable) is not cached: the answer is built as
before (``/metrics`` then says ``neffcache_index_up 0``).
"""

from __future__ import annotations

import functools
import gzip
import inspect
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from neffcache.errors import NeffcacheError
from neffcache.index import Index

MAX_AGE = 5.0  # seconds: how late a clock-driven change (an expired lease) may show
GZIP_FROM = 1 << 12  # bytes: smaller answers are sent as they are
GZIP_LEVEL = 6


@dataclass(frozen=True, slots=True)
class Body:
    """A rendered answer: what every request that shares it is sent; ``gzipped``, compressed
    once per build, to a client that accepts gzip (Prometheus and browsers ask for it: the
    metrics of 50 matrices x 50 fingerprints are 3.3 MB, ~0.2 MB compressed)."""

    content: bytes
    media_type: str
    gzipped: bytes | None = None

    @classmethod
    def of(cls, content: bytes, media_type: str) -> Body:
        small = len(content) < GZIP_FROM
        return cls(content, media_type, None if small else gzip.compress(content, GZIP_LEVEL))

    def response(self, request: Request) -> Response:
        if self.gzipped is not None and "gzip" in request.headers.get("accept-encoding", ""):
            return Response(self.gzipped, media_type=self.media_type, headers={
                "Content-Encoding": "gzip", "Vary": "Accept-Encoding"})
        return Response(self.content, media_type=self.media_type,
                        headers={"Vary": "Accept-Encoding"} if self.gzipped else None)


@dataclass(frozen=True, slots=True)
class _Held:
    version: int
    built_at: float
    body: Body


class SharedAnswers:
    """The held answers of one app over one ``Index``; ``builds`` counts the builds of each
    answer (tests, and anyone asking how often the index changes under load)."""

    def __init__(self, index: Index, *, max_age: float = MAX_AGE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._index, self.max_age, self._clock = index, max_age, clock
        self._held: dict[str, _Held] = {}
        self._guards: dict[str, threading.Lock] = {}
        self._guards_lock = threading.Lock()
        self.builds: Counter[str] = Counter()

    def get(self, name: str, build: Callable[[], Body]) -> Body:
        """The answer ``name``: held if the index has not changed since it was built, else
        built by ``build`` once for every request waiting on it."""
        try:
            version = self._index.change_count()
        except NeffcacheError:
            return build()
        guard = self._guard(name)
        held = self._held.get(name)
        if held is not None and held.version >= version:
            if self._fresh(held) or not guard.acquire(blocking=False):
                return held.body  # current; or only aged, and another request renews it
        else:
            guard.acquire()
        try:
            held = self._held.get(name)  # built by the request this one waited for?
            if held is not None and held.version >= version and self._fresh(held):
                return held.body
            body = build()
            self._held[name] = _Held(version, self._clock(), body)
            self.builds[name] += 1
            return body
        finally:
            guard.release()

    def _fresh(self, held: _Held) -> bool:
        return self._clock() - held.built_at < self.max_age

    def _guard(self, name: str) -> threading.Lock:
        with self._guards_lock:
            return self._guards.setdefault(name, threading.Lock())


def shared(name: str, model: type[BaseModel] | None = None,
           media_type: str = "application/json") -> Callable[[Callable[..., Any]],
                                                            Callable[..., Response]]:
    """Route decorator: the endpoint's answer is held in the app's ``SharedAnswers`` under
    ``name``. The endpoint takes only ``request`` (its answer may depend on nothing else) and
    returns bytes in ``media_type``, or a document that ``model`` checks (as FastAPI's
    ``response_model`` would) before it is rendered once as JSON."""

    def decorate(endpoint: Callable[..., Any]) -> Callable[..., Response]:
        if list(inspect.signature(endpoint).parameters) != ["request"]:
            raise TypeError(f"{endpoint.__name__}: a shared answer takes only `request`")

        def build(request: Request) -> Body:
            answer = endpoint(request)
            if isinstance(answer, bytes):
                return Body.of(answer, media_type)
            if model is not None:
                answer = model.model_validate(answer).model_dump(mode="json")
            return Body.of(bytes(JSONResponse(answer).body), media_type)

        @functools.wraps(endpoint)
        def answer(request: Request) -> Response:
            answers: SharedAnswers = request.app.state.answers
            return answers.get(name, lambda: build(request)).response(request)

        return answer

    return decorate
