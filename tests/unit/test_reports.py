"""Restore report documents (pure): building from a restore's JSON, key naming, encoding,
validation of hostile input, credential scrubbing and the ingest plan."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest

from neffcache.config import load_settings
from neffcache.errors import ConfigError, ReportError
from neffcache.fingerprint import Fingerprint
from neffcache.reports import (
    MAX_BYTES,
    Report,
    build_report,
    date_prefixes,
    decode_report,
    make_report_id,
    report_id_of,
    safe_host,
    scrub,
)
from tests.support.plans import plan_ingest

FP = Fingerprint("neuron", (("target", "trn2"), ("torch", "2.9.0")), (("instance", "trn2.48x"),))
WHEN = datetime(2026, 12, 2, 7, 8, 9, 123456, tzinfo=timezone.utc)
ENTRY = "e" * 64
DOC: dict[str, Any] = {  # the shape of RestoreResult.to_json()
    "schema_version": 1, "status": "partial", "exit_code": 3, "error": "1 cell(s) missing",
    "backend": "neuron", "fingerprint_key": FP.key, "store": "s3://bucket/neff",
    "target": "/var/cache/neffcache", "cells_requested": ["a/compile/64x64/b1/tp1", "b"],
    "cells_restored": ["a/compile/64x64/b1/tp1"], "cells_missing": ["b"],
    "cells_incomplete": [], "cells_failed": [], "cells_elsewhere": {}, "entries": [ENTRY],
    "files_fetched": 20, "files_skipped": 1, "files_failed": [], "files_failed_count": 0,
    "bytes_fetched": 12345, "deadline_hit": False, "seconds": 1.25,
    "environment": {"TORCH_NEURONX_NEFF_CACHE_DIR": "/var/cache/neffcache/neff"},
    "conflicts": 0,
}


def build(doc: dict[str, Any] = DOC, host: str = "ip-10-0-0-1.ec2.internal") -> Report:
    return build_report(doc, fingerprint=FP, host=host, matrix="prod", now=WHEN,
                        nonce="0a1b2c3d", version="0.1.0")


def test_report_key_names_date_host_time_and_nonce() -> None:
    r = build()
    assert r.report_id == "ip-10-0-0-1.ec2.internal-20261202T070809Z-0a1b2c3d"
    assert r.key == f"reports/2026-12-02/{r.report_id}.json"
    assert report_id_of(r.key) == r.report_id


@pytest.mark.parametrize("key", [
    "reports/2026-12-02/x.json", "reports/x-20261202T070809Z-0a1b2c3d.json",
    "reports/2026-12-02/sub/h-20261202T070809Z-0a1b2c3d.json",
    "reports/2026-12-02/h-20261202T070809Z-0a1b2c3d.txt", "manifests/abc.json",
    "reports/../2026-12-02/h-20261202T070809Z-0a1b2c3d.json",
])
def test_report_id_of_refuses_other_keys(key: str) -> None:
    assert report_id_of(key) is None


@pytest.mark.parametrize("host, safe", [
    ("ip-10-0-0-1", "ip-10-0-0-1"), ("a b/c", "a_b_c"), ("", "unknown"), ("../..", "unknown"),
    ("x" * 100, "x" * 64),
])
def test_host_names_are_made_safe_for_keys(host: str, safe: str) -> None:
    assert safe_host(host) == safe
    assert make_report_id(host, WHEN, "00000000").startswith(safe + "-")


def test_round_trip_keeps_every_field_and_drops_the_rest() -> None:
    r = build()
    doc = json.loads(r.encode())
    assert "environment" not in doc and "cells_failed" not in doc
    assert doc["fingerprint"] == FP.to_json() and doc["time"] == "2026-12-02T07:08:09.123456Z"
    back = decode_report(r.encode(), source="k")
    assert back == r
    assert (back.exit_code, back.cells_missing, back.entries) == (3, ("b",), (ENTRY,))


def test_failure_document_builds_a_failed_report() -> None:
    early = {"status": "failed", "exit_code": 6, "error": "store s3://b/p unavailable",
             "fingerprint_key": FP.key, "target": "/t", "cells_requested": ["a"],
             "cells_restored": [], "cells_missing": ["a"], "files_fetched": 0,
             "files_skipped": 0, "bytes_fetched": 0, "seconds": 0.0}
    r = build(early)
    assert (r.status, r.exit_code, r.entries, r.backend) == ("failed", 6, (), "neuron")
    assert decode_report(r.encode(), source="k") == r


def test_credentials_never_enter_a_report() -> None:
    leaky = dict(DOC, error="GET https://AKIAIOSFODNN7EXAMPLE:secret@host/b/k?X-Amz-Signature=ab "
                            "failed; postgresql+psycopg://user:hunter2@db/neff down",
                 store="s3://AKIAIOSFODNN7EXAMPLE:pw@bucket/neff")
    text = build(leaky).encode().decode()
    for secret in ("hunter2", "secret", "X-Amz-Signature", "AKIAIOSFODNN7EXAMPLE", ":pw@"):
        assert secret not in text
    assert "https://host/b/k failed" in text and "s3://bucket/neff" in text
    assert scrub("see s3://bucket/prefix") == "see s3://bucket/prefix"


def mutate(**changes: Any) -> bytes:
    doc = json.loads(build().encode())
    for k, v in changes.items():
        if v is KeyError:
            del doc[k]
        else:
            doc[k] = v
    return json.dumps(doc).encode()


@pytest.mark.parametrize("data, field", [
    (b"[1, 2]", "not a JSON object"),
    (b"{not json", "not valid JSON"),
    (b"\xff\xfe", "not valid JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
    (mutate(kind="other"), "kind"),
    (mutate(schema_version=2), "schema_version"),
    (mutate(report_id="../../etc/passwd"), "report_id"),
    (mutate(time="yesterday"), "time"),
    (mutate(time="2026-12-03T07:08:09.000000Z"), "report_id: its time"),
    (mutate(time="2026-12-02T07:08:09Z"), "time"),
    (mutate(host=["x"]), "host"),
    (mutate(host="h" * 256), "host"),
    (mutate(fingerprint_key="F" * 64), "fingerprint_key"),
    (mutate(fingerprint={"backend": "neuron", "fields": {"target": "trn3"}}), "fingerprint"),
    (mutate(fingerprint={"backend": "neuron", "fields": {"t": 1}}), "fingerprint"),
    (mutate(status="great"), "status"),
    (mutate(exit_code=True), "exit_code"),
    (mutate(exit_code=-1), "exit_code"),
    (mutate(files_fetched=1.5), "files_fetched"),
    (mutate(bytes_fetched=2 ** 64), "bytes_fetched"),
    (mutate(seconds=float("nan")), "seconds"),
    (mutate(seconds=-1), "seconds"),
    (mutate(deadline_hit="no"), "deadline_hit"),
    (mutate(cells_restored="a"), "cells_restored"),
    (mutate(cells_restored=[1]), "cells_restored"),
    (mutate(entries=["nothex"]), "entries"),
    (mutate(error="x" * 2001), "error"),
    (mutate(store="s3://user:pw@bucket/p"), "credential"),
    (mutate(matrix=KeyError), "matrix: missing"),
    (b" " * (MAX_BYTES + 1), "larger than"),
])
def test_malformed_or_hostile_reports_are_refused(data: bytes, field: str) -> None:
    with pytest.raises(ReportError) as err:
        decode_report(data, source="reports/2026-12-02/x.json")
    message = str(err.value)
    assert message.startswith("reports/2026-12-02/x.json: ") and field in message


def test_date_prefixes_cover_the_window_oldest_first() -> None:
    assert date_prefixes(WHEN, 1) == ["reports/2026-12-01/", "reports/2026-12-02/",
                                      "reports/2026-12-03/"]
    assert len(date_prefixes(WHEN, 7)) == 9
    assert date_prefixes(datetime(2027, 1, 1, tzinfo=timezone.utc), 0, 0) == \
        ["reports/2027-01-01/"]


def test_plan_ingest_skips_settled_keys_and_sets_aside_strays() -> None:
    good = build().key
    other = "reports/2026-12-02/h-20261202T000000Z-ffffffff.json"
    wanted, stray = plan_ingest([other, good, "reports/2026-12-02/notes.txt", good],
                                skip={other})
    assert wanted == [(good, build().report_id)]
    assert stray == ["reports/2026-12-02/notes.txt"]


@pytest.mark.parametrize("value, expected", [
    (None, "store"), ("none", "none"), ("STORE", "store"), ("/var/log/r", "/var/log/r")])
def test_reports_setting(value: str | None, expected: str) -> None:
    assert load_settings({"NEFFCACHE_HOME": "/h"}, reports=value).reports_to == expected
    env = {"NEFFCACHE_HOME": "/h"} | ({"NEFFCACHE_REPORTS": value} if value else {})
    assert load_settings(env).reports_to == expected


@pytest.mark.parametrize("value", ["s3://bucket/reports", "  "])
def test_reports_setting_refuses_urls_and_blanks(value: str) -> None:
    with pytest.raises(ConfigError, match="expected 'store'"):
        load_settings({"NEFFCACHE_HOME": "/h"}, reports=value)
