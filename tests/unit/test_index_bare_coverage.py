"""``coverage`` on the bare driver: the statements SQLAlchemy compiled for coverage's reads
(kept in the StatementCache) give the same facts, columns and rows on sqlite3/psycopg as
through SQLAlchemy, on SQLite and Postgres, for a registered matrix, a list of cell keys (one
batch and several), live and expired leases, failures and unknown fingerprints; a second
``coverage --json`` imports no SQLAlchemy and prints the same bytes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from neffcache.index import Index, open_index, upgrade_index
from neffcache.index.bare_reader import open_bare
from neffcache.index.compiled import StatementCache
from neffcache.index.coverage_engine import reads as stream
from neffcache.index.coverage_engine.reads import (
    database_now,
    fingerprints_with_rows,
    matrix_cell_refs,
    matrix_versions,
    read_facts,
)
from neffcache.index.coverage_engine.rules import coverage_row
from neffcache.index.listing import Reader
from neffcache.index.sqla_reader import SqlaReader
from tests.support.coverage import find_fingerprint_keys, scope_of_keys, scope_of_matrix
from tests.support.ops_seed import matrix_text, sdk_fingerprint, seed

NAME = "bare"
UNKNOWN = "f" * 64  # a fingerprint key nothing was built for


def _never() -> Any:
    raise AssertionError("a statement was not in the cache: the bare path fell back")


def _seed(ix: Index) -> None:
    """12 cells x 3 fingerprints: ready, failed, missing in turn; a live lease (on a
    missing cell) and an expired one (on a failed cell) for the first fingerprint."""
    fps = [sdk_fingerprint(i) for i in range(3)]
    seeded = seed(ix, matrix_text(NAME, shapes=12), fps,
                  lambda n, i: ("ready", "failed", "missing")[(n + i) % 3])
    cells = seeded.matrix.cells
    ix.queue_claims(NAME, cells, fps[0], [c.key for c in cells])
    live, expired = cells[2], cells[1]  # (2 + 0) % 3: missing; (1 + 0) % 3: failed
    for cell, seconds in ((live, 3600.0), (expired, 0.001)):
        got = ix.claim_next([cell.key], fps[0].key, holder=f"h-{seconds}", host="runner-1",
                            lease_seconds=seconds, max_attempts=3)
        assert got.lease is not None


def _reads(reader: Reader, now: Any) -> dict[str, Any]:
    """Every coverage read, on one reader, at the time ``now``."""
    versions = matrix_versions(reader, NAME)
    current = next(v for v in versions if v.current)
    refs = matrix_cell_refs(reader, current.id)
    keys = [k for _, k in refs] + ["0" * 64]  # and a cell the index does not know
    fp0 = sdk_fingerprint(0)
    out: dict[str, Any] = {
        "versions": versions, "refs": refs,
        "prefix": find_fingerprint_keys(reader, fp0.key[:6]),
        "no_prefix": find_fingerprint_keys(reader, "zz"),
        "facts": read_facts(reader, scope_of_keys(keys), now, named=[UNKNOWN]),
        "matrix_facts": read_facts(reader, scope_of_matrix(current.id), now, details=False),
        "none": read_facts(reader, scope_of_keys([]), now, named=[fp0.key]),
        "with_rows": fingerprints_with_rows(reader, keys, now),
        "later": read_facts(reader, scope_of_keys(keys), now + timedelta(hours=2)),
    }
    for single in (True, False):  # one batch read up front; batches read as rows go
        if not single:
            stream.SINGLE, stream.FIRST_BATCH, stream.STREAM_BATCH = 4, 3, 5
        plan = stream.plan_coverage(reader, refs, [fp0], now, named=[UNKNOWN])
        out[f"plan_{single}"] = (plan.cells, plan.keys, plan.fingerprints, plan.given)
        out[f"rows_{single}"] = [coverage_row(*item)
                                 for item in stream.coverage_cells(reader, plan, now)]
    return out


def _both_paths_agree(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SINGLE", "FIRST_BATCH", "STREAM_BATCH"):
        monkeypatch.setattr(stream, name, getattr(stream, name))  # restored after the test
    cache = StatementCache(tmp_path / "sql.json")
    with open_index(url, auto_upgrade=False) as ix, ix.connection() as conn:
        reader = SqlaReader(conn, cache)
        now = database_now(reader)
        want = _reads(reader, now)
    cache.save()
    doc = json.loads((tmp_path / "sql.json").read_text())
    names = {k.split("|")[1] for k in doc["statements"]}
    assert names >= {"now", "cov_entries", "cov_failures", "cov_leases", "cov_fingerprints",
                     "cov_fingerprints_with", "fingerprint_prefix",
                     "matrix_versions", "matrix_cell_refs"}
    facts = want["facts"]
    assert len(facts.entries) == 12 and len(facts.failures) == 12 and len(facts.leases) == 1
    assert not want["later"].leases  # the live lease is over by then
    assert UNKNOWN in want["plan_True"][1] and want["rows_True"] == want["rows_False"]
    assert {r.status for r in want["rows_True"]} == {"ready", "failed", "missing",
                                                      "in_progress"}
    saved = StatementCache(tmp_path / "sql.json", doc["head"], cache._statements)
    monkeypatch.setattr(stream, "SINGLE", 500)
    bare = open_bare(url, saved, fallback=_never)
    assert bare is not None
    with bare:
        got = _reads(bare, now)
        assert abs(database_now(bare) - now) < timedelta(minutes=5)
    for key in want:
        assert got[key] == want[key], key


def test_the_bare_driver_reads_coverage_as_sqlalchemy_does_on_sqlite(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'index.db'}"
    with open_index(url, auto_upgrade=True) as ix:
        _seed(ix)
    _both_paths_agree(url, tmp_path, monkeypatch)


@pytest.mark.postgres
def test_the_bare_driver_reads_coverage_as_sqlalchemy_does_on_postgres(
        pg_new_database: Callable[[], str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    url = pg_new_database()
    upgrade_index(url)
    with open_index(url, auto_upgrade=False) as ix:
        _seed(ix)
    _both_paths_agree(url, tmp_path, monkeypatch)


_PROBE = ("import sys\nfrom neffcache.cli import run\nrc = run(sys.argv[1:])\n"
          "print('RC', rc, any(m.startswith('sqlalchemy') for m in sys.modules))")


def _cli(home: Path, url: str, *argv: str) -> tuple[str, str]:
    done = subprocess.run([sys.executable, "-c", _PROBE, "coverage", *argv],
                          capture_output=True, text=True, check=False,
                          env={"NEFFCACHE_HOME": str(home), "NEFFCACHE_INDEX": url,
                               "PATH": "/usr/bin:/bin"})
    out, _, last = done.stdout.rstrip("\n").rpartition("\n")
    return out, last + " | " + done.stderr.strip()


@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_the_second_coverage_imports_no_sqlalchemy_and_prints_the_same(
        db: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    home = tmp_path / "home"
    if db == "sqlite":
        url = f"sqlite:///{tmp_path / 'index.db'}"
    else:
        url = request.getfixturevalue("pg_new_database")()
    upgrade_index(url)
    with open_index(url, auto_upgrade=False) as ix:
        _seed(ix)
    (tmp_path / "m.toml").write_text(matrix_text(NAME, shapes=12))
    prefix = sdk_fingerprint(1).key[:8]
    listed = subprocess.run([sys.executable, "-m", "neffcache.cli", "ls", "--limit", "1"],
                            capture_output=True, text=True, check=False,
                            env={"NEFFCACHE_HOME": str(home), "NEFFCACHE_INDEX": url,
                                 "PATH": "/usr/bin:/bin"})
    assert listed.returncode == 0, listed.stderr  # the first coverage finds ls's statements
    for argv in ([NAME, "--json"], [NAME, "--jsonl", "--check"],
                 [str(tmp_path / "m.toml"), "--json", "--cells", "p0/*/512x5[12]*"],
                 [NAME, "--json", "--fingerprint", prefix, "--fingerprint", UNKNOWN]):
        first, rc1 = _cli(home, url, *argv)
        again, rc2 = _cli(home, url, *argv)
        code = "3" if "--check" in argv else "0"
        assert rc1.startswith(f"RC {code} True"), rc1  # SQLAlchemy compiled coverage's
        assert rc2.startswith(f"RC {code} False"), rc2  # the driver alone ran them
        assert first == again and '"fingerprint_key"' in first
        shutil.rmtree(home / "sql")  # the next command compiles its statements afresh


def test_row_lines_are_each_rows_encoding() -> None:
    """``RowLines`` (templates for ready and missing rows) writes what encoding each row's
    document writes, whatever the ids hold (quotes, %, non-ASCII) and for every status."""
    from neffcache.cli._common import encode_line
    from neffcache.index.coverage_engine.rules import (
        CoverageFacts,
        FailureFact,
        RowLines,
        coverage_row,
    )
    from neffcache.index.values import LiveLease, Status

    at = datetime(2026, 3, 1, 10, 0, 0, 123456, tzinfo=timezone.utc)
    facts = CoverageFacts(
        entries={("k1", "f1"): ("e1", 4096), ("k2", "f1"): ("e%s\"2", None)},
        failures={("k3", "f1"): FailureFact(None, "boom \u00e9 %d", at)},
        leases={("k4", "f1"): LiveLease("k4", "f1", "h\u00fcst", at, at, at, 2)})
    items: list[tuple[str, str, str, Status]] = [
        ("p%0/\"\u00fc\\x", "k1", "f1", "ready"), ("p1/%(a)s", "k2", "f1", "ready"),
        ("p2/\u2603", "k3", "f1", "failed"), ("p3", "k4", "f1", "in_progress"),
        ("p4/%", "k5", "f1", "missing"), ("p5", "k6", "f\u00e9%", "missing")]
    line = RowLines(encode_line).line
    for cell_id, ck, fk, status in items:
        want = encode_line(coverage_row(cell_id, ck, fk, status, facts).to_json())
        assert line(cell_id, ck, fk, status, facts) == want


@pytest.mark.postgres
def test_a_set_of_keys_reaches_postgres_as_the_same_keys_whatever_they_hold(
        pg_new_database: Callable[[], str]) -> None:
    """``keys_param``'s array literal: every key comes back as it was, quotes, backslashes,
    commas, braces and spaces included, through SQLAlchemy and through the bare driver."""
    import psycopg
    from sqlalchemy import column, select, table

    from neffcache.index.coverage_engine.reads import keys_param
    from neffcache.index.coverage_engine.statements import in_keys

    url = pg_new_database()
    keys = ["a" * 64, 'q"uote', "back\\slash", "com,ma", "{brace}", " sp ace ", "NULL", ""]
    literal = keys_param("postgresql", keys)
    with open_index(url, auto_upgrade=True) as ix, ix.connection() as conn:
        conn.exec_driver_sql("CREATE TEMP TABLE k (v text)")
        conn.exec_driver_sql("INSERT INTO k SELECT unnest(%(a)s::text[])", {"a": keys})
        k = table("k", column("v"))
        got = conn.execute(select(k.c.v).where(in_keys("postgresql", k.c.v)),
                           {"keys": literal}).scalars().all()
        assert sorted(got) == sorted(keys)
        assert conn.execute(select(k.c.v).where(in_keys("postgresql", k.c.v)),
                            {"keys": keys_param("postgresql", keys[:2])}).scalars().all() \
            == keys[:2]
    with psycopg.connect(url.replace("+psycopg", "")) as pg:
        back = pg.execute("SELECT unnest(CAST(%(k)s AS text[]))", {"k": literal}).fetchall()
    assert [r[0] for r in back] == keys
