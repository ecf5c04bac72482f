"""Streamed whole-result commands on SQLite and on the real PostgreSQL: ``ls`` and ``coverage``
with --json / --jsonl print what the non-streaming calls return (the same documents, the same
rows in the same order, across several batches of cells), and ``ls --jsonl`` keeps its memory
flat: ten times the entries, about the same peak RSS (a listing buffered in the client, as a
driver without a server-side cursor does, grows with the rows)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from neffcache.index import (
    CoverageRequest,
    ListEntriesRequest,
    coverage,
    iter_entries,
    list_entries,
    open_index,
)
from neffcache.index.coverage_engine.reads import STREAM_BATCH
from tests.support.ls_table import render_entries
from tests.support.ops_seed import bulk_entries, matrix_text, sdk_fingerprint, seed

CLI = str(Path(sys.executable).with_name("neffcache"))
CELLS = STREAM_BATCH + 500  # more than SINGLE: columns asked first, rows in three batches


def _database(db: str, request: pytest.FixtureRequest, tmp: Path) -> str:
    if db == "sqlite":
        return f"sqlite:///{tmp / 'index.db'}"
    url: str = request.getfixturevalue("pg_new_database")()
    return url


DBS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(scope="module", params=DBS)
def seeded_url(request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = _database(request.param, request, tmp_path_factory.mktemp("stream"))
    fps = [sdk_fingerprint(i) for i in range(3)]
    with open_index(url, auto_upgrade=True) as ix:
        seed(ix, matrix_text("wide", shapes=CELLS), fps,
             lambda n, i: ("ready", "failed", "missing", "ready")[(n + i) % 4])
    yield url


def run(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NEFFCACHE_INDEX": url}
    return subprocess.run([CLI, *args], env=env, capture_output=True, text=True, timeout=120)


def test_ls_streamed_forms_match_the_listing(seeded_url: str) -> None:
    want = list_entries(ListEntriesRequest(index=seeded_url)).to_json()
    assert want["count"] > STREAM_BATCH
    doc = run(seeded_url, "ls", "--json")
    assert doc.returncode == 0, doc.stderr
    assert json.loads(doc.stdout) == want
    lines = run(seeded_url, "ls", "--jsonl").stdout.splitlines()
    assert [json.loads(line) for line in lines] == want["entries"]
    page = run(seeded_url, "ls", "--limit", "100")
    first = list_entries(ListEntriesRequest(index=seeded_url, limit=100))
    assert page.stdout == render_entries(first.entries) + "\n"
    assert f"next: {first.next} " in page.stderr
    paged = json.loads(run(seeded_url, "ls", "--limit", "100", "--json").stdout)
    assert paged == json.loads(json.dumps(first.to_json()))
    assert list(iter_entries(ListEntriesRequest(index=seeded_url))) == list(
        list_entries(ListEntriesRequest(index=seeded_url)).entries)


@pytest.mark.parametrize("flags", [("--check",), ("--fingerprint", "host", "--check"),
                                   ("--cells", "p0/compile/51*")])
def test_coverage_streamed_forms_match_the_report(seeded_url: str,
                                                  flags: tuple[str, ...]) -> None:
    fps = tuple(flags[flags.index("--fingerprint") + 1:][:1]) if "--fingerprint" in flags else ()
    cells = tuple(flags[flags.index("--cells") + 1:][:1]) if "--cells" in flags else ()
    result = coverage(CoverageRequest("wide", cells=cells, fingerprints=fps,
                                      check="--check" in flags, index=seeded_url))
    want = json.loads(json.dumps(result.to_json(), default=str))
    doc = run(seeded_url, "coverage", "wide", "--json", *flags)
    assert doc.returncode == result.exit_code, doc.stderr
    assert json.loads(doc.stdout) == want
    lines = run(seeded_url, "coverage", "wide", "--jsonl", *flags)
    assert lines.returncode == result.exit_code
    assert [json.loads(line) for line in lines.stdout.splitlines()] == want["rows"]


def test_json_and_jsonl_together_are_a_usage_error(seeded_url: str) -> None:
    for args in (("ls",), ("coverage", "wide")):
        out = run(seeded_url, *args, "--json", "--jsonl")
        assert out.returncode == 2 and "choose one" in out.stderr


def test_a_bad_cursor_writes_nothing_to_stdout(seeded_url: str) -> None:
    out = run(seeded_url, "ls", "--json", "--after", "nope")
    assert out.returncode == 2 and out.stdout == "" and "bad cursor" in out.stderr


def peak_rss_kib(url: str, *args: str) -> int:
    """Peak RSS of one CLI run (its stdout discarded), from a fresh parent process: the
    children's maximum resident set is that run's alone."""
    code = ("import resource, subprocess, sys; "
            "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    env = {**os.environ, "NEFFCACHE_INDEX": url}
    out = subprocess.run([sys.executable, "-c", code, CLI, *args], env=env,
                         capture_output=True, text=True, timeout=300, check=True)
    return int(out.stdout)


@pytest.mark.parametrize("db", DBS)
def test_ls_memory_stays_flat(db: str, request: pytest.FixtureRequest,
                              tmp_path: Path) -> None:
    small_n, large_n = 10_000, 100_000  # the listing built whole (before #25): 4.7x
    urls = []
    for n in (small_n, large_n):
        (tmp_path / str(n)).mkdir()
        url = _database(db, request, tmp_path / str(n))
        with open_index(url, auto_upgrade=True) as ix:
            bulk_entries(ix, n)
        urls.append(url)
    small = peak_rss_kib(urls[0], "ls", "--jsonl")
    large = peak_rss_kib(urls[1], "ls", "--jsonl")
    assert large / small < 1.5, (small, large)
