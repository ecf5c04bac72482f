"""Writes and listing on SQLite: entries, failures, runs, restore reports, verification."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from neffcache.errors import UsageError
from neffcache.index import EntrySummary, Index, open_index
from neffcache.index.record import strip_credentials
from tests.unit.test_index_factories import make_cell, make_fingerprint, make_manifest


@pytest.fixture
def index_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'index.db'}"


@pytest.fixture
def ix(index_url: str) -> Iterator[Index]:
    with open_index(index_url, auto_upgrade=True) as index:
        yield index


def count(url: str, sql: str) -> int:
    engine = create_engine(url)
    with engine.connect() as conn:
        n = conn.execute(text(sql)).scalar_one()
    engine.dispose()
    return int(n)


def test_record_entry_is_idempotent(ix: Index) -> None:
    m = make_manifest(make_cell(1), make_fingerprint(1))
    assert ix.record_entry(m, "s3://bucket/neff") is True
    assert ix.record_entry(m, "s3://bucket/neff") is False
    assert [e.entry_key for e in ix.entries()] == [m.entry_key]


def test_entry_summary_fields(ix: Index) -> None:
    cell, fp = make_cell(7), make_fingerprint(2)
    m = make_manifest(cell, fp, compile_seconds=41.5, created_at="2026-03-01T10:00:00Z")
    ix.record_entry(m, "s3://AKIA:secret@bucket/neff?X-Amz-Signature=abc")
    (e,) = ix.entries()
    assert isinstance(e, EntrySummary)
    assert (e.cell_id, e.cell_key, e.fingerprint_key) == (cell.id, cell.key, fp.key)
    assert e.backend == "inductor"
    assert e.store_url == "s3://bucket/neff"
    assert (e.total_bytes, e.file_count, e.compile_seconds) == (110, 2, 41.5)
    assert e.created_at == datetime(2026, 3, 1, 10, 0, tzinfo=timezone.utc)
    assert e.verified_status is None and e.verified_at is None
    assert e.to_json()["created_at"] == "2026-03-01T10:00:00+00:00"


def test_blobs_shared_between_entries_are_stored_once(ix: Index, index_url: str) -> None:
    fp = make_fingerprint()
    ix.record_entries([make_manifest(make_cell(n), fp) for n in range(3)], "/store")
    assert count(index_url, "SELECT count(*) FROM entry_files") == 6
    assert count(index_url, "SELECT count(*) FROM blobs") == 4  # 3 own + 1 shared header


def test_record_entries_counts_only_new_ones(ix: Index) -> None:
    fp = make_fingerprint()
    first = [make_manifest(make_cell(n), fp) for n in range(5)]
    assert ix.record_entries(first, "/store") == 5
    more = first[3:] + [make_manifest(make_cell(n), fp) for n in range(5, 8)]
    assert ix.record_entries(more, "/store") == 3
    assert len(ix.entries()) == 8


def test_entries_filters(ix: Index) -> None:
    fp_a, fp_b = make_fingerprint(1), make_fingerprint(2)
    ix.record_entries([
        make_manifest(make_cell(1), fp_a, created_at="2026-01-01T00:00:00Z"),
        make_manifest(make_cell(2, mode="eager"), fp_a, created_at="2026-01-02T00:00:00Z"),
        make_manifest(make_cell(3), fp_b, created_at="2026-01-03T00:00:00Z"),
        make_manifest(make_cell(4, pipeline="sd_3"), fp_b, created_at="2026-01-04T00:00:00Z"),
    ], "/store")
    assert [e.cell_id for e in ix.entries(limit=2)] == [make_cell(4, pipeline="sd_3").id,
                                                         make_cell(3).id]
    assert {e.cell_id for e in ix.entries(cell_glob="flux2-klein/compile/*")} == {
        make_cell(1).id, make_cell(3).id}
    assert ix.entries(cell_glob="FLUX2-klein/*") == []  # case-sensitive, like fnmatch
    assert [e.cell_id for e in ix.entries(cell_glob="sd_3/*")] == [make_cell(4, pipeline="sd_3").id]
    assert len(ix.entries(cell_glob="sd?3/*")) == 1
    assert ix.entries(cell_glob="flux2-klein/[e]ager/*")[0].cell_id == make_cell(2, mode="eager").id
    assert {e.fingerprint_key for e in ix.entries(fingerprint_key=fp_b.key[:10])} == {fp_b.key}
    assert len(ix.entries(cell_glob="flux2-klein/*", limit=1)) == 1


def test_failures_and_runs(ix: Index, index_url: str) -> None:
    fp, cell = make_fingerprint(), make_cell(1)
    run = ix.start_run("ci-host", fp, "demo")
    assert len(run) == 32
    ix.record_failure(run, cell, fp, 1, 3.5, "x" * 20_000 + "Traceback: boom")
    ix.record_failure(None, cell, fp, None, 900.0, "timed out")
    ix.finish_run(run, ok=4, failed=1)
    assert count(index_url, "SELECT count(*) FROM cell_failures") == 2
    assert count(index_url, "SELECT max(length(log_tail)) FROM cell_failures") == 16_000
    assert count(index_url, "SELECT cells_failed FROM precompile_runs") == 1
    with pytest.raises(UsageError, match="no such run"):
        ix.finish_run("0" * 32, ok=0, failed=0)


def test_record_restore_accepts_restore_result_json(ix: Index, index_url: str) -> None:
    ix.record_restore({"host": "i-123", "matrix": "demo", "fingerprint_key": "f" * 64,
                       "cells_restored": ["a/compile/64x64/b1/tp1", "b/compile/64x64/b1/tp1"],
                       "cells_missing": ["c/compile/64x64/b1/tp1"], "files_fetched": 10,
                       "files_skipped": 2, "bytes_fetched": 12345, "seconds": 1.25,
                       "exit_code": 3, "environment": {"X": "1"}})
    ix.record_restore({"fingerprint": {"key": "e" * 64}, "cells_restored": 5,
                       "restored": [{"cell_id": "x"}], "bytes": 7})
    engine = create_engine(index_url)
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT host, cells_restored, cells_missing, bytes_fetched, exit_code, "
            "fingerprint_key FROM restore_reports ORDER BY id")).all()
    engine.dispose()
    assert rows == [("i-123", 2, 1, 12345, 3, "f" * 64), ("unknown", 5, 0, 7, 0, "e" * 64)]


def test_record_verification(ix: Index) -> None:
    m = make_manifest(make_cell(1), make_fingerprint())
    ix.record_entry(m, "/store")
    assert ix.record_verification(m.entry_key, "ok") is True
    assert ix.record_verification("0" * 64, "ok") is False
    (e,) = ix.entries()
    assert e.verified_status == "ok" and e.verified_at is not None


def test_a_verdict_judged_earlier_than_the_recorded_one_is_kept_out(ix: Index) -> None:
    m = make_manifest(make_cell(1), make_fingerprint())
    ix.record_entry(m, "/store")
    t1, t2 = (datetime(2026, 12, 4, h, tzinfo=timezone.utc) for h in (8, 9))
    assert ix.record_verification(m.entry_key, "compiled", t2) is True
    assert ix.record_verification(m.entry_key, "hit", t1) is False  # a late, spooled one
    (e,) = ix.entries()
    assert (e.verified_status, e.verified_at) == ("compiled", t2)


def test_remove_entries_drops_files_and_orphan_blobs_only(ix: Index, index_url: str) -> None:
    fp = make_fingerprint()
    ms = [make_manifest(make_cell(n), fp) for n in range(2)]
    ix.record_entries(ms, "/store")
    assert ix.remove_entries([ms[0].entry_key, "0" * 64]) == 1
    assert {k for p in ix.entry_key_pages() for k in p} == {ms[1].entry_key}
    assert ix.indexed_entry_keys([ms[0].entry_key, ms[1].entry_key, "0" * 64]) == {
        ms[1].entry_key}
    assert count(index_url, "SELECT count(*) FROM entry_files") == 2
    assert count(index_url, "SELECT count(*) FROM blobs") == 2  # the shared one stays


def test_concurrent_writers_on_one_sqlite_file(index_url: str) -> None:
    open_index(index_url, auto_upgrade=True).close()
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            with open_index(index_url, auto_upgrade=True) as ix:
                for n in range(20):
                    ix.record_entry(make_manifest(make_cell(w * 100 + n), make_fingerprint(w)),
                                    "/store")
                    ix.record_failure(None, make_cell(n), make_fingerprint(w), 1, 1.0, "x")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert count(index_url, "SELECT count(*) FROM entries") == 80
    assert count(index_url, "SELECT count(*) FROM cell_failures") == 80


@pytest.mark.parametrize(("url", "expected"), [
    ("s3://bucket/prefix", "s3://bucket/prefix"),
    ("s3://key:secret@bucket/prefix", "s3://bucket/prefix"),
    ("https://u:p@host:9000/b/p?sig=1#frag", "https://host:9000/b/p"),
    ("file:///var/cache/neff", "file:///var/cache/neff"),
    ("/plain/path", "/plain/path"),
])
def test_strip_credentials(url: str, expected: str) -> None:
    assert strip_credentials(url) == expected


def test_recording_an_entry_imports_no_orm(index_url: str, tmp_path: Path) -> None:
    """``push``'s index work (#25): Core statements on index.tables, so neither
    sqlalchemy.orm, the mapped models, alembic nor the other database's dialect load."""
    from neffcache.manifest import encode_manifest

    with open_index(index_url, auto_upgrade=True):
        pass
    m = make_manifest(make_cell(1), make_fingerprint(1))
    path = tmp_path / "m.json"
    path.write_bytes(encode_manifest(m))
    code = ("import sys\nfrom pathlib import Path\nfrom neffcache.index import open_index\n"
            "from neffcache.manifest import decode_manifest\n"
            "m = decode_manifest(Path(sys.argv[2]).read_bytes())\n"
            "with open_index(sys.argv[1], auto_upgrade=False) as ix:\n"
            "    new = ix.record_entry(m, 's3://bucket/neff')\n"
            "heavy = ('sqlalchemy.orm', 'neffcache.index.models', 'alembic',\n"
            "         'sqlalchemy.dialects.postgresql')\n"
            "print(new, sorted(k for k in sys.modules if k.startswith(heavy)))")
    done = subprocess.run([sys.executable, "-c", code, index_url, str(path)],
                          capture_output=True, text=True, check=False)
    assert done.stdout.strip().splitlines()[-1:] == ["True []"], done.stdout + done.stderr
    with open_index(index_url, auto_upgrade=False) as ix:
        assert [e.entry_key for e in ix.entries()] == [m.entry_key]


def test_an_index_opened_again_shares_the_engine_not_its_listeners(index_url: str) -> None:
    """One engine per database per process: a second open finds the dialect set up (and
    the statements compiled); each Index's listeners stay its own; in-memory SQLite is new
    per open."""
    from sqlalchemy import event

    seen: list[str] = []
    with open_index(index_url, auto_upgrade=True) as first:
        event.listen(first.engine, "before_cursor_execute",
                     lambda *args: seen.append("first"))
        first.record_entry(make_manifest(make_cell(1), make_fingerprint(1)), "s3://b/n")
        dialect = first.engine.dialect
    assert seen
    seen.clear()
    with open_index(index_url, auto_upgrade=False) as again:
        assert again.engine.dialect is dialect
        assert again.record_entry(make_manifest(make_cell(2), make_fingerprint(1)), "s3://b/n")
        assert len(again.entries()) == 2
    assert seen == []
    with open_index("sqlite://", auto_upgrade=True) as a, \
            open_index("sqlite://", auto_upgrade=True) as b:
        a.record_entry(make_manifest(make_cell(3), make_fingerprint(1)), "s3://b/n")
        assert a.engine.dialect is not b.engine.dialect and b.entries() == []
