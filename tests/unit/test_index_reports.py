"""Ingesting validated restore reports on SQLite: once per report id, the fingerprint recorded
even without entries, each entry's last use moved forward only, future clocks clamped."""

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
