"""Ingesting validated restore reports on SQLite: once per report id, the fingerprint recorded
even without entries, each entry's last use moved forward only, future clocks clamped, each
entry's restore count raised once per new ok/partial report, fingerprints restored lately."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from neffcache.fingerprint import Fingerprint
from neffcache.index import Index, open_index
from neffcache.index.ops_queries import fingerprint_stats, list_restores
from neffcache.reports import Report, build_report
from tests.unit.test_index_factories import make_cell, make_fingerprint, make_manifest

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)


@pytest.fixture
def ix(tmp_path: Path) -> Iterator[Index]:
    with open_index(f"sqlite:///{tmp_path / 'index.db'}", auto_upgrade=True) as index:
        yield index


def report(fp: Fingerprint, when: datetime, entries: tuple[str, ...] = (),
           status: str = "ok", nonce: str = "00000001", **extra: Any) -> Report:
    doc = {"status": status, "exit_code": 0 if status == "ok" else 4,
           "cells_requested": ["c"], "cells_restored": ["c"] if status == "ok" else [],
           "cells_missing": [], "entries": list(entries), "files_fetched": 3,
           "bytes_fetched": 300, "seconds": 0.5, **extra}
    return build_report(doc, fingerprint=fp, host="i-1", matrix="m", now=when, nonce=nonce,
                        version="0.1.0")


def test_a_report_is_ingested_once(ix: Index) -> None:
    r = report(make_fingerprint(1), T0)
    assert ix.record_reports([r, r]) == 1
    assert ix.record_reports([r]) == 0
    assert ix.known_report_ids([r.report_id, "other"]) == {r.report_id}
    (row,) = list_restores(ix)
    assert (row.host, row.matrix, row.cells_restored, row.files_fetched) == ("i-1", "m", 1, 3)
    assert row.created_at == T0


def test_fingerprints_without_entries_show_up(ix: Index) -> None:
    fp = make_fingerprint(5)
    ix.record_reports([report(fp, T0)])
    stats = {s.info.key: s for s in fingerprint_stats(ix)}
    assert stats[fp.key].entries == 0
    assert ix.fingerprints([fp.key]) == {fp.key: fp}


def test_last_use_moves_forward_only_and_ignores_failed_runs(ix: Index) -> None:
    fp = make_fingerprint(1)
    m = make_manifest(make_cell(1), fp)
    ix.record_entry(m, "s3://b/p")
    late, early = T0 + timedelta(hours=2), T0
    ix.record_reports([report(fp, late, (m.entry_key,), nonce="0000000a")])
    ix.record_reports([report(fp, early, (m.entry_key,), nonce="0000000b"),
                       report(fp, late + timedelta(hours=1), (m.entry_key,), status="failed",
                              nonce="0000000c")])
    (entry,) = ix.entries()
    assert entry.last_used_at == late
    assert entry.to_json()["last_used_at"] == late.isoformat(timespec="seconds")


def test_a_clock_ahead_does_not_set_a_future_time(ix: Index) -> None:
    fp = make_fingerprint(1)
    m = make_manifest(make_cell(1), fp)
    ix.record_entry(m, "s3://b/p")
    future = datetime.now(timezone.utc) + timedelta(days=30)
    ix.record_reports([report(fp, future, (m.entry_key,))])
    (entry,) = ix.entries()
    (row,) = list_restores(ix)
    now = datetime.now(timezone.utc)
    assert entry.last_used_at is not None and entry.last_used_at <= now
    assert row.created_at <= now


def test_restore_count_rises_once_per_report_however_often_it_is_ingested(
        ix: Index, tmp_path: Path) -> None:
    fp = make_fingerprint(1)
    a, b = make_manifest(make_cell(1), fp), make_manifest(make_cell(2), fp)
    ix.record_entries([a, b], "s3://b/p")
    r1 = report(fp, T0, (a.entry_key, b.entry_key, a.entry_key), nonce="00000001")
    r2 = report(fp, T0 + timedelta(minutes=1), (a.entry_key,), status="partial",
                nonce="00000002")
    assert ix.record_reports([r1, r1]) == 1
    assert ix.record_reports([r1]) == 0
    with open_index(f"sqlite:///{tmp_path / 'index.db'}", auto_upgrade=False) as other:
        assert other.record_reports([r1, r2]) == 1  # a second ingester: only r2 is new
    assert ix.record_reports([r2]) == 0
    ix.record_reports([report(fp, T0, (a.entry_key, b.entry_key), status="failed",
                              nonce="00000003")])
    counts = {e.entry_key: e.restore_count for e in ix.entries()}
    assert counts == {a.entry_key: 2, b.entry_key: 1}
    (doc,) = [e.to_json() for e in ix.entries() if e.entry_key == b.entry_key]
    assert doc["restore_count"] == 1 and doc["last_used_at"] is not None


def test_an_entry_not_yet_restored_has_count_zero(ix: Index) -> None:
    fp = make_fingerprint(1)
    ix.record_entry(make_manifest(make_cell(1), fp), "s3://b/p")
    ix.record_reports([report(fp, T0)])  # found no entry
    (entry,) = ix.entries()
    assert entry.restore_count == 0 and entry.to_json()["restore_count"] == 0


def test_restored_fingerprints_are_those_an_ok_or_partial_report_found_lately(ix: Index
                                                                              ) -> None:
    recent, stale, failed, unbuilt = (make_fingerprint(n) for n in (1, 2, 3, 4))
    ms = {fp.key: make_manifest(make_cell(1), fp) for fp in (recent, stale, failed)}
    ix.record_entries(list(ms.values()), "s3://b/p")
    ix.record_reports([
        report(recent, T0, (ms[recent.key].entry_key,), status="partial", nonce="00000001"),
        report(stale, T0 - timedelta(days=8), (ms[stale.key].entry_key,), nonce="00000002"),
        report(failed, T0, (ms[failed.key].entry_key,), status="failed", nonce="00000003"),
        report(unbuilt, T0, nonce="00000004")])
    assert ix.restored_fingerprints(T0 - timedelta(days=7)) == {recent.key}
    assert ix.restored_fingerprints(T0 - timedelta(days=9)) == {recent.key, stale.key}
    assert ix.restored_fingerprints(T0 + timedelta(seconds=1)) == set()


def test_the_migration_counts_the_reports_already_ingested(tmp_path: Path) -> None:
    from neffcache.index.engine import (
        SCHEMA_REVISION,
        downgrade_engine,
        make_engine,
        upgrade_engine,
    )

    url = f"sqlite:///{tmp_path / 'old.db'}"
    fp = make_fingerprint(1)
    m = make_manifest(make_cell(1), fp)
    with open_index(url, auto_upgrade=True) as ix:
        ix.record_entry(m, "s3://b/p")
        ix.record_reports([report(fp, T0, (m.entry_key,), nonce=f"0000000{n}")
                           for n in range(3)])
        ix.record_reports([report(fp, T0, (m.entry_key,), status="failed", nonce="0000000f")])
    engine = make_engine(url)
    try:
        downgrade_engine(engine, url, "0004")
        assert upgrade_engine(engine, url) == ("0004", SCHEMA_REVISION)
    finally:
        engine.dispose()
    with open_index(url, auto_upgrade=False) as ix:
        (entry,) = ix.entries()
    assert entry.restore_count == 3
