"""The report spool on real files: bounded (the oldest dropped), a report that cannot be
written is spooled with one warning, and the next send delivers the spooled ones first."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from neffcache.errors import ReportError
from neffcache.fingerprint import build_fingerprint
from neffcache.report_send import keep, load, pending, send_report, send_spooled
from neffcache.reports import (
    Report,
    Verdicts,
    build_report,
    decode_document,
    decode_report,
    make_report_id,
)
from tests.support.report_writer import write_report

FP = build_fingerprint("neuron", {"version.neuronx-cc": "2.1.0", "target": "trn2"})
T0 = datetime(2026, 12, 2, 7, 8, 9, tzinfo=timezone.utc)


def report(n: int, *, error: str = "") -> Report:
    return build_report({"status": "failed", "exit_code": 6, "error": error or f"run {n}"},
                        fingerprint=FP, host="ip-10-0-3-7", matrix="fleet",
                        now=T0 + timedelta(minutes=n), nonce=f"{n:08x}", version="0")


def spool_in_order(spool: Path, reports: list[Report], **bounds: int) -> list[int]:
    """Spool each report with increasing mtimes; the dropped counts."""
    dropped = []
    for n, r in enumerate(reports):
        dropped.append(keep(spool, r, **bounds))
        path = spool / f"{r.report_id}.json"
        if path.exists():
            os.utime(path, (1_000_000 + n, 1_000_000 + n))
    return dropped


def ids(spool: Path) -> list[str]:
    return [p.path.name.removesuffix(".json") for p in pending(spool)]


def test_the_spool_keeps_the_newest_files_within_its_bounds(tmp_path: Path) -> None:
    reports = [report(n) for n in range(5)]
    assert spool_in_order(tmp_path / "s", reports, max_files=3) == [0, 0, 0, 1, 1]
    assert ids(tmp_path / "s") == [r.report_id for r in reports[2:]]

    size = len(reports[0].encode())
    assert spool_in_order(tmp_path / "b", reports, max_bytes=2 * size + size // 2) == [
        0, 0, 1, 1, 1]
    assert ids(tmp_path / "b") == [r.report_id for r in reports[3:]]
    assert pending(tmp_path / "absent") == []


def test_an_unwritable_destination_spools_the_report_and_the_next_send_delivers_it_first(
        tmp_path: Path) -> None:
    spool, warnings = tmp_path / "spool", []
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    assert not send_report(report(1), str(blocker), "", 5.0, warnings.append, spool=spool)
    assert len(warnings) == 1 and warnings[0].startswith(
        f"warning: restore report not written to {blocker}")
    assert f"; kept in {spool} (sent by the next restore that can)" in warnings[0]
    assert ids(spool) == [report(1).report_id]

    out, warnings = tmp_path / "reports", []
    assert send_report(report(2), str(out), "", 5.0, warnings.append, spool=spool)
    assert warnings == [f"restore: sent 1 spooled restore report(s) to {out}"]
    assert ids(spool) == []
    got = sorted(decode_report(p.read_bytes(), source=str(p)).error or ""
                 for p in out.iterdir())
    assert got == ["run 1", "run 2"]


def test_without_a_spool_a_failed_report_is_only_a_warning(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    warnings: list[str] = []
    assert not send_report(report(1), str(blocker), "", 5.0, warnings.append)
    assert len(warnings) == 1 and "kept in" not in warnings[0]
    assert not send_report(report(1), "none", "", 5.0, warnings.append, spool=tmp_path / "s")
    assert not (tmp_path / "s").exists()


def test_sending_the_spool_drops_what_is_no_report_and_stops_at_its_time(
        tmp_path: Path) -> None:
    spool, out = tmp_path / "spool", tmp_path / "out"
    spool_in_order(spool, [report(1), report(2)])
    (spool / "ip-10-0-3-7-20261202T070809Z-deadbeef.json").write_text('{"kind": "neffcache.re')
    put = lambda r: write_report(r, str(out), "")  # noqa: E731
    assert send_spooled(spool, put, until=time.monotonic() - 1) == 0  # no time left: nothing
    assert len(pending(spool)) == 3
    assert send_spooled(spool, put, until=time.monotonic() + 60) == 2
    assert pending(spool) == [] and len(list(out.iterdir())) == 2


def test_a_warms_verdicts_share_the_spool_and_stay_when_restore_sends_it(
        tmp_path: Path) -> None:
    spool, out = tmp_path / "spool", tmp_path / "out"
    verdicts = Verdicts(make_report_id("ip-10-0-3-7", T0, "0000abcd"), T0,
                        (("a" * 64, "hit"), ("b" * 64, "compiled")))
    keep(spool, verdicts)
    keep(spool, report(1))
    assert send_spooled(spool, lambda r: write_report(r, str(out), ""), time.monotonic() + 5) == 1
    assert ids(spool) == [verdicts.report_id]  # for the index: the next warm sends it
    assert load(pending(spool)[0].path) == verdicts


@pytest.mark.parametrize("change, reason", [
    ({"verdicts": [{"entry_key": "a" * 63, "status": "hit"}]}, "entry_key: malformed"),
    ({"verdicts": [{"entry_key": "a" * 64, "status": "failed"}]}, "status: expected one of"),
    ({"verdicts": "all"}, "verdicts: expected a list"),
    ({"schema_version": 2}, "schema_version: expected 1"),
])
def test_verdicts_are_validated_when_read_back(change: dict[str, Any], reason: str) -> None:
    doc = {**Verdicts("h-20261202T070809Z-0000abcd", T0, (("a" * 64, "hit"),)).to_json(),
           **change}
    with pytest.raises(ReportError, match=reason):
        decode_document(json.dumps(doc).encode(), source="spool/x.json")
    with pytest.raises(ReportError, match="kind: expected"):  # not a restore report
        decode_report(Verdicts("h-20261202T070809Z-0000abcd", T0, ()).encode(), source="x")
