"""The read-only HTTP API against a live uvicorn server on 127.0.0.1, over a seeded index on
SQLite and on the real PostgreSQL: every endpoint's content, paging and filters, errors
mapped by the status table, GET only, the OpenAPI description and the dashboard's files."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from neffcache.index import Index, open_index
from neffcache.index.engine import make_engine
from tests.support.live_server import get_json, request, serve_in_thread
from tests.support.ops_seed import DEMO_RESTORES, DEMO_TABLE, Seeded, seed_demo


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres",
                                                               marks=pytest.mark.postgres)])
def seeded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[str, Seeded]]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('api') / 'index.db'}"
    else:
        url = request.getfixturevalue("pg_new_database")()
    with open_index(url, auto_upgrade=True) as ix:
        data = seed_demo(ix)
        with serve_in_thread(ix) as base:
            yield base, data


@pytest.fixture
def base(seeded: tuple[str, Seeded]) -> str:
    return seeded[0]


@pytest.fixture
def data(seeded: tuple[str, Seeded]) -> Seeded:
    return seeded[1]


def api(base: str, path: str, **params: Any) -> Any:
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
    return get_json(f"{base}{path}" + (f"?{query}" if query else ""))


def test_healthz(base: str) -> None:
    doc = api(base, "/healthz")
    assert doc["status"] == "ok" and doc["schema_revision"] == doc["schema_head"]


def test_summary(base: str, data: Seeded) -> None:
    doc = api(base, "/api/summary")
    ready = sum(1 for row in DEMO_TABLE for s in row if s == "ready")
    assert doc["totals"]["entries"] == ready
    assert doc["totals"]["total_bytes"] == sum(data.entry_bytes.values())
    assert (doc["totals"]["matrices"], doc["totals"]["restores"]) == (2, len(DEMO_RESTORES))
    demo = next(c for c in doc["coverage"] if c["matrix"] == "demo")
    assert (demo["version"], demo["cells"]) == (2, 6)
    other = next(c for c in doc["coverage"] if c["matrix"] == "other")
    assert other["fingerprints"] == []
    by_sdk = {s["sdk_version"]: s for s in doc["sdk_versions"]}
    for fp in data.fingerprints:
        row = by_sdk[fp.get("version.neuronx-cc")]
        assert (row["entries"], row["total_bytes"]) == (data.count(fp, "ready"),
                                                        data.entry_bytes[fp.key])
    outcomes = {o["outcome"]: o["count"] for o in doc["restore_outcomes"]}
    assert outcomes == {"hit": 1, "partial": 1, "miss": 0, "error": 1}


def test_matrices_and_history(base: str) -> None:
    listed = api(base, "/api/matrices")
    assert [(m["name"], m["version"], m["cells"]) for m in listed] == [("demo", 2, 6),
                                                                       ("other", 1, 2)]
    detail = api(base, "/api/matrix", name="demo")
    assert detail["current"]["version"] == 2 and 'name = "demo"' in detail["current"]["toml"]
    assert [(v["version"], v["cells"], v["current"]) for v in detail["versions"]] == \
        [(1, 4, False), (2, 6, True)]
    assert api(base, "/api/matrix", name="demo", version=1)["current"]["cells"] == 4


def test_coverage_grid_shows_the_index_statuses(base: str, data: Seeded) -> None:
    doc = api(base, "/api/coverage", matrix="demo")
    assert (doc["matrix"], doc["version"], doc["total_cells"]) == ("demo", 2, 6)
    keys = [f["key"] for f in doc["fingerprints"]]
    assert set(keys) == {fp.key for fp in data.fingerprints}
    got = {(r["cell_id"], k): s for r in doc["rows"] for k, s in zip(keys, r["statuses"],
                                                                      strict=True)}
    assert got == data.statuses
    for f in doc["fingerprints"]:
        fp = next(x for x in data.fingerprints if x.key == f["key"])
        assert (f["ready"], f["failed"], f["missing"]) == (
            data.count(fp, "ready"), data.count(fp, "failed"), data.count(fp, "missing"))
        assert f["ratio"] == pytest.approx(data.count(fp, "ready") / 6)


def test_coverage_paging_filter_and_old_version(base: str) -> None:
    page = api(base, "/api/coverage", matrix="demo", offset=4, limit=4)
    assert [r["cell_id"] for r in page["rows"]] == ["p0/eager/512x520/b1/tp1",
                                                    "p0/eager/512x528/b1/tp1"]
    eager = api(base, "/api/coverage", matrix="demo", cells="p0/eager/*")
    assert eager["total_cells"] == 3 and eager["cells_pattern"] == "p0/eager/*"
    assert sum(f["ready"] + f["failed"] + f["missing"] for f in eager["fingerprints"]) == 6
    old = api(base, "/api/coverage", matrix="demo", version=1)
    assert old["total_cells"] == 4 and old["version"] == 1
    assert api(base, "/api/coverage", matrix="other")["rows"][0]["statuses"] == []


def test_entries_and_fingerprints(base: str, data: Seeded) -> None:
    fp = data.fingerprints[0]
    entries = api(base, "/api/entries", fingerprint=fp.key[:8])
    assert len(entries) == data.count(fp, "ready")
    assert {e["fingerprint_key"] for e in entries} == {fp.key}
    assert all(e["restore_count"] >= 0 and "last_used_at" in e for e in entries)
    eager_ready = [k for k, s in data.statuses.items()
                   if k[0].startswith("p0/eager/") and s == "ready"]
    assert len(api(base, "/api/entries", cells="p0/eager/*")) == len(eager_ready) == 2
    assert len(api(base, "/api/entries", limit=2)) == 2
    fps = {f["key"]: f for f in api(base, "/api/fingerprints")}
    assert fps[fp.key]["entries"] == data.count(fp, "ready")
    assert fps[fp.key]["sdk_version"] == "2.1.0" and fps[fp.key]["fields"]["target"] == "trn2"
    assert {s["sdk_version"] for s in api(base, "/api/sdk-versions")} == {"2.1.0", "2.2.0"}


@pytest.mark.parametrize("kind", ["all", "glob", "class-glob", "fingerprint"])
def test_entries_cursor_walks_every_row_exactly_once(base: str, data: Seeded,
                                                     kind: str) -> None:
    filters = {"all": {}, "glob": {"cells": "p0/*"}, "class-glob": {"cells": "p[01]/eager/*"},
               "fingerprint": {"fingerprint": data.fingerprints[1].key[:6]}}[kind]
    whole = [e["entry_key"] for e in api(base, "/api/entries", limit=1000, **filters)]
    seen: list[str] = []
    after = None
    for _ in range(len(whole) + 2):
        query = urllib.parse.urlencode({"limit": 2, **filters, **({"after": after} if after
                                                                   else {})})
        reply = request(f"{base}/api/entries?{query}")
        assert reply.status == 200
        seen += [e["entry_key"] for e in reply.json]
        after = reply.headers.get("next-cursor")
        if after is None:
            break
    assert len(whole) >= 2 and seen == whole and len(set(seen)) == len(seen)


def walk(base: str, path: str, limit: int, **filters: Any) -> tuple[list[Any], int]:
    """Every item of a listing, page after page (each page's Next-Cursor as the next
    ``after``), and how many pages it took."""
    seen: list[Any] = []
    after = None
    for pages in range(1, 1000):
        query = urllib.parse.urlencode({"limit": limit, **filters,
                                        **({"after": after} if after else {})})
        reply = request(f"{base}{path}?{query}")
        assert reply.status == 200, reply.body[:300]
        seen += reply.json
        after = reply.headers.get("next-cursor")
        if after is None:
            return seen, pages
    raise AssertionError(f"{path}: no last page")


@pytest.mark.parametrize(("path", "filters", "key"), [
    ("/api/restores", {}, ("id",)),
    ("/api/restores", {"matrix": "demo"}, ("id",)),
    ("/api/runs", {}, ("id",)),
    ("/api/failures", {}, ("cell_id", "fingerprint_key")),
    ("/api/failures", {"all": "true", "matrix": "demo"}, ("cell_id", "fingerprint_key")),
])
@pytest.mark.parametrize("limit", [1, 2])
def test_keyset_paging_walks_every_row_exactly_once(base: str, path: str,
                                                    filters: dict[str, str],
                                                    key: tuple[str, ...], limit: int) -> None:
    """Rows that share a time (the seed's failures and runs do) are told apart by id."""
    whole = api(base, path, limit=1000, **filters)
    seen, pages = walk(base, path, limit, **filters)
    assert len(whole) >= 2 and seen == whole
    assert len({tuple(x[k] for k in key) for x in seen}) == len(seen)
    assert pages == len(whole) // limit + 1  # a full last page says "more may follow"


@pytest.mark.parametrize("path", ["/api/entries", "/api/restores", "/api/failures",
                                  "/api/runs"])
def test_openapi_documents_after_and_the_next_cursor(base: str, path: str) -> None:
    op = get_json(base + "/openapi.json")["paths"][path]["get"]
    assert "after" in {p["name"] for p in op["parameters"]}
    assert "offset" not in {p["name"] for p in op["parameters"]}
    assert "Next-Cursor" in op["responses"]["200"]["headers"]
    reply = request(f"{base}{path}?offset=1")
    assert reply.status == 400 and "offset: unknown parameter" in reply.json["error"]


@pytest.mark.parametrize("path", ["/api/restores", "/api/failures"])
def test_an_integer_id_cursor_is_checked(base: str, path: str) -> None:
    reply = request(f"{base}{path}?after=12.abc")
    assert reply.status == 400 and reply.json["type"] == "UsageError"


@pytest.mark.parametrize("cursor", ["nope", "12.XYZ", "1.2.3", "123456789012345678.ab"])
def test_a_bad_cursor_is_a_400(base: str, cursor: str) -> None:
    reply = request(f"{base}/api/entries?after={cursor}")
    assert reply.status == 400 and reply.json["type"] == "UsageError"


def test_runs_failures_and_log_tails(base: str, data: Seeded) -> None:
    failures = api(base, "/api/failures", matrix="demo")
    failed = {k for k, s in data.statuses.items() if s == "failed"}
    assert {(f["cell_id"], f["fingerprint_key"]) for f in failures} == failed
    assert all("neuronx-cc: error: out of memory" in f["log_tail"] for f in failures)
    runs = api(base, "/api/runs")
    assert len(runs) == 2 and all(r["failures_recorded"] == 1 for r in runs)
    detail = api(base, "/api/run", id=runs[0]["id"])
    assert detail["run"]["id"] == runs[0]["id"]
    assert [f["run_id"] for f in detail["failures"]] == [runs[0]["id"]]
    one = api(base, "/api/failures", cells="p0/compile/512x528/b1/tp1")
    assert [f["cell_id"] for f in one] == ["p0/compile/512x528/b1/tp1"]


def test_restore_reports(base: str, data: Seeded) -> None:
    listed = api(base, "/api/restores")
    assert [r["host"] for r in listed] == [h for h, *_ in reversed(DEMO_RESTORES)]
    by_host = {r["host"]: r for r in listed}
    for host, fp_n, restored, missing, nbytes, secs, code in DEMO_RESTORES:
        r = by_host[host]
        assert (r["cells_restored"], r["cells_missing"], r["bytes_fetched"], r["seconds"],
                r["exit_code"]) == (restored, missing, nbytes, secs, code)
        assert r["fingerprint_key"] == data.fingerprints[fp_n].key
    assert [r["outcome"] for r in listed] == ["error", "partial", "hit"]
    assert by_host["i-partial"]["missing"] == ["p0/compile/512x528/b1/tp1"]
    assert [r["host"] for r in api(base, "/api/restores", host="i-hit")] == ["i-hit"]
    hist = {o["outcome"]: o for o in api(base, "/api/restore-outcomes")}
    assert hist["hit"]["buckets"][0] == {"le": 0.5, "count": 0}
    assert hist["hit"]["buckets"][1] == {"le": 1.0, "count": 1}


@pytest.mark.parametrize(("path", "status", "kind"), [
    ("/api/matrix?name=nope", 404, "NotFoundError"),
    ("/api/matrix?name=demo&version=9", 404, "NotFoundError"),
    ("/api/coverage?matrix=nope", 404, "NotFoundError"),
    ("/api/failures?matrix=nope", 404, "NotFoundError"),
    ("/api/run?id=nope", 404, "NotFoundError"),
])
def test_errors_are_json_with_the_status_from_the_table(base: str, path: str, status: int,
                                                        kind: str) -> None:
    reply = request(base + path)
    assert reply.status == status
    assert reply.json["type"] == kind
    assert reply.json["error"] and "\n" not in reply.json["error"]


@pytest.mark.parametrize("path", ["/api/entries?limit=0", "/api/coverage?matrix=demo&offset=-1",
                                  "/api/coverage", "/api/entries?cells=" + "x" * 100_000,
                                  "/api/restore-timeline?step=week"])
def test_bad_parameters_are_400_in_the_documented_shape(base: str, path: str) -> None:
    reply = request(base + path)
    assert reply.status == 400
    assert set(reply.json) == {"error", "type", "hint"} and reply.json["type"] == "UsageError"
    assert "\n" not in reply.json["error"] and len(reply.body) < 1000  # the value is not echoed


@pytest.mark.parametrize("path", ["/api/entries?limt=5", "/api/restores?offset=10",
                                  "/api/fingerprints?x=1", "/api/runs?limit=5&matrx=demo"])
def test_an_unknown_parameter_is_a_400_naming_it(base: str, path: str) -> None:
    reply = request(base + path)
    assert reply.status == 400
    assert set(reply.json) == {"error", "type", "hint"} and reply.json["type"] == "UsageError"
    name = path.split("&")[-1].split("?")[-1].split("=")[0]
    assert f"{name}: unknown parameter" in reply.json["error"]


def test_openapi_documents_the_400_of_every_api_operation(base: str) -> None:
    spec = get_json(base + "/openapi.json")
    for path, ops in spec["paths"].items():
        if path.startswith("/api/"):
            assert all("400" in op["responses"] for op in ops.values()), path


def test_a_long_query_arriving_in_pieces_gets_the_documented_400(base: str) -> None:
    """A 100 KB query string sent in several writes, as a slow client or a small socket buffer
    delivers it: the server reads all of it and answers in the documented shape (at the HTTP
    parser's default limit it answered plain text and reset the connection)."""
    import json
    import socket
    import time

    host, port = urllib.parse.urlsplit(base).netloc.split(":")
    head = (f"GET /api/entries?cells={'x' * 100_000} HTTP/1.1\r\nHost: {host}\r\n"
            f"Connection: close\r\n\r\n").encode()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        for i in range(0, len(head), 20_000):
            sock.sendall(head[i:i + 20_000])
            time.sleep(0.05)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    status_line, _, rest = reply.partition(b"\r\n")
    assert status_line.split()[1] == b"400", status_line
    body = json.loads(rest.partition(b"\r\n\r\n")[2])
    assert set(body) == {"error", "type", "hint"} and body["type"] == "UsageError"


@pytest.mark.parametrize("path", ["/api/summary", "/metrics", "/", "/static/app.js",
                                  "/healthz"])
def test_head_answers_like_get_without_a_body(base: str, path: str) -> None:
    got, head = request(base + path), request(base + path, method="HEAD")
    assert (head.status, head.body) == (200, b"")
    assert head.headers["content-type"] == got.headers["content-type"]


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
@pytest.mark.parametrize("path", ["/api/summary", "/metrics", "/", "/static/app.js",
                                  "/no/such/path"])
def test_anything_but_get_is_405(base: str, method: str, path: str) -> None:
    reply = request(base + path, method=method, data=b"{}" if method != "HEAD" else None)
    assert reply.status == 405
    assert reply.headers["allow"] == "GET, HEAD"


def test_openapi_describes_only_gets(base: str) -> None:
    spec = api(base, "/openapi.json")
    paths = spec["paths"]
    for expected in ("/healthz", "/metrics", "/api/summary", "/api/coverage", "/api/entries",
                     "/api/fingerprints", "/api/runs", "/api/run", "/api/failures",
                     "/api/restores", "/api/matrices", "/api/matrix"):
        assert expected in paths, expected
    assert {m for ops in paths.values() for m in ops} == {"get"}
    assert request(base + "/docs").status == 404  # Swagger UI would load from a CDN


def test_dashboard_and_its_files_are_local(base: str) -> None:
    page = request(base + "/")
    assert page.status == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    for asset in ("/static/app.js", "/static/style.css"):
        reply = request(base + asset)
        assert reply.status == 200, asset
        # No CDN: nothing in the page or its files points at another host.
        assert not re.search(r"(?:src|href)=\"(?:https?:)?//", reply.text), asset
        # XML namespace names (createElementNS) are identifiers, never fetched.
        text = reply.text.replace('"http://www.w3.org/2000/svg"', '""')
        assert not re.search(r"https?://", text), asset
    assert not re.search(r"(?:src|href)=\"(?:https?:)?//", page.text)


def test_unreachable_index_is_503_on_health_and_index_up_0_in_metrics(
        tmp_path: Path) -> None:
    url = "postgresql+psycopg://nobody@127.0.0.1:1/none"
    ix = Index(make_engine(url), url)  # opened without a check, as if the database went away
    try:
        with serve_in_thread(ix) as base:
            reply = request(base + "/healthz")
            assert reply.status == 503 and reply.json["type"] == "UnavailableError"
            assert "***" not in reply.json["error"] and "127.0.0.1:1" in reply.json["error"]
            assert request(base + "/api/summary").status == 503
            metrics = request(base + "/metrics")
            assert metrics.status == 200
            assert "neffcache_index_up 0.0" in metrics.text
    finally:
        ix.close()


def test_each_request_reads_the_index_afresh(tmp_path: Path) -> None:
    with open_index(f"sqlite:///{tmp_path / 'index.db'}", auto_upgrade=True) as ix, \
            serve_in_thread(ix) as base:
        assert api(base, "/api/restores") == []
        assert api(base, "/api/matrices") == []
        ix.record_restore({"host": "i-late", "fingerprint_key": "f" * 64, "exit_code": 0,
                           "cells_restored": ["a"], "seconds": 1.5})
        assert [r["host"] for r in api(base, "/api/restores")] == ["i-late"]


def test_in_progress_lists_live_leases_with_host_and_since(tmp_path: Path) -> None:
    from tests.unit.test_index_factories import make_cell, make_fingerprint

    cells, fp = [make_cell(0), make_cell(1)], make_fingerprint(0)
    with open_index(f"sqlite:///{tmp_path / 'index.db'}", auto_upgrade=True) as ix, \
            serve_in_thread(ix) as base:
        assert api(base, "/api/in-progress") == []
        ix.queue_claims("m", cells, fp, [c.key for c in cells])
        lease = ix.claim_next([c.key for c in cells], fp.key, holder="t" * 32,
                              host="runner-7 pid 42", lease_seconds=600,
                              max_attempts=3).lease
        assert lease is not None
        (row,) = api(base, "/api/in-progress")
        assert (row["cell_id"], row["host"], row["attempts"]) == (cells[0].id,
                                                                  "runner-7 pid 42", 1)
        assert row["since"] == lease.claimed_at.isoformat(timespec="seconds")
        ix.release_failed(lease)
        assert api(base, "/api/in-progress") == []
