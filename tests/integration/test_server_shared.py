"""Shared answers (``neffcache.server.shared``): /metrics and /api/summary are built once per
change of the index and shared by concurrent requests, and a change is in the next response;
against a live server on SQLite and on Postgres."""

from __future__ import annotations

import gzip
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, text

from neffcache.index import Index, open_index
from neffcache.server import create_app
from neffcache.server.shared import GZIP_FROM, Body, SharedAnswers
from tests.support.live_server import get_json, request, serve_in_thread
from tests.support.ops_seed import seed_demo

REPORT = {"host": "i-new", "matrix": "demo", "fingerprint_key": "f" * 64, "cells_restored": 1,
          "cells_missing": 0, "bytes_fetched": 10, "seconds": 1.0, "exit_code": 0}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ix(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
       ) -> Iterator[Index]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('shared') / 'index.db'}"
    else:
        url = str(request.getfixturevalue("pg_new_database")())
    with open_index(url, auto_upgrade=True) as index:
        seed_demo(index)
        yield index


@contextmanager
def slow_reads(ix: Index, seconds: float) -> Iterator[None]:
    """Every statement but the change counter's takes ``seconds`` longer (a loaded index),
    so concurrent requests surely overlap one build."""
    def slow(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "index_changes" not in statement:
            time.sleep(seconds)

    event.listen(ix.engine, "before_cursor_execute", slow)
    try:
        yield
    finally:
        event.remove(ix.engine, "before_cursor_execute", slow)


def restores_total(metrics: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith("neffcache_restores_total{"))


def restores(name: str, body: bytes) -> float:
    if name == "metrics":
        return restores_total(body.decode())
    return float(json.loads(body)["totals"]["restores"])


def test_a_change_is_in_the_next_response(ix: Index) -> None:
    app = create_app(ix)
    builds = app.state.answers.builds
    with serve_in_thread(ix, app) as base:
        first = get_json(base + "/api/summary")["totals"]["restores"]
        scraped = restores_total(request(base + "/metrics").text)
        assert get_json(base + "/api/summary")["totals"]["restores"] == first
        assert restores_total(request(base + "/metrics").text) == scraped == first
        assert builds == {"summary": 1, "metrics": 1}  # the second requests shared the first
        ix.record_restore(REPORT)
        assert get_json(base + "/api/summary")["totals"]["restores"] == first + 1
        assert restores_total(request(base + "/metrics").text) == first + 1
        assert builds == {"summary": 2, "metrics": 2}


@pytest.mark.parametrize("path", ["/metrics", "/api/summary"])
def test_concurrent_requests_share_one_build(ix: Index, path: str) -> None:
    app = create_app(ix)
    name = path.rsplit("/", 1)[1]
    with serve_in_thread(ix, app) as base:
        before = restores(name, request(base + path).body)
        ix.record_restore(REPORT)  # the held answer is out of date now
        start = threading.Barrier(20)

        def client(_: int) -> bytes:
            start.wait()
            reply = request(base + path)
            assert reply.status == 200
            return reply.body

        with slow_reads(ix, 0.05), ThreadPoolExecutor(20) as pool:
            bodies = set(pool.map(client, range(20)))
    assert app.state.answers.builds[name] == 2  # the first request's, then one for all 20
    assert len(bodies) == 1
    assert restores(name, next(iter(bodies))) == before + 1


def test_an_aged_answer_is_renewed_by_one_request_while_the_others_get_it(
        tmp_path: Any) -> None:
    now = [0.0]
    with open_index(f"sqlite:///{tmp_path / 'index.db'}", auto_upgrade=True) as index:
        answers = SharedAnswers(index, max_age=5.0, clock=lambda: now[0])
        release, started = threading.Event(), threading.Event()

        def build(tag: bytes, wait: bool = False) -> Body:
            if wait:
                started.set()
                release.wait(10)
            return Body(tag, "text/plain")

        assert answers.get("a", lambda: build(b"one")).content == b"one"
        assert answers.get("a", lambda: build(b"two")).content == b"one"  # unchanged, fresh
        now[0] = 6.0  # aged: the clock may have changed it (a lease expired)
        renewing = threading.Thread(target=lambda: answers.get("a", lambda: build(b"three",
                                                                                   True)))
        renewing.start()
        assert started.wait(10)
        assert answers.get("a", lambda: build(b"four")).content == b"one"  # no waiting
        release.set()
        renewing.join(10)
        assert answers.get("a", lambda: build(b"five")).content == b"three"
        assert answers.builds["a"] == 2


def test_an_index_that_cannot_say_its_counter_is_not_cached(tmp_path: Any) -> None:
    with open_index(f"sqlite:///{tmp_path / 'index.db'}", auto_upgrade=True) as index:
        answers = SharedAnswers(index)
        with index.engine.begin() as conn:
            conn.execute(text("DROP TABLE index_changes"))
        calls: list[int] = []

        def build() -> Body:
            calls.append(1)
            return Body(str(len(calls)).encode(), "text/plain")

        made = [answers.get("a", build).content for _ in range(2)]
    assert made == [b"1", b"2"]
    assert answers.builds["a"] == 0


@pytest.mark.parametrize("path", ["/metrics", "/api/summary"])
def test_a_client_that_accepts_gzip_gets_the_same_answer_compressed(ix: Index,
                                                                    path: str) -> None:
    with serve_in_thread(ix) as base:
        plain = request(base + path)
        req = urllib.request.Request(base + path, headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310 - loopback
            packed, encoding = r.read(), r.headers.get("Content-Encoding")
    if len(plain.body) < GZIP_FROM:
        assert encoding is None and packed == plain.body
    else:
        assert encoding == "gzip" and gzip.decompress(packed) == plain.body
        assert plain.headers.get("content-encoding") is None
