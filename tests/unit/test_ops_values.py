"""Pure parts of the ops surface: restore outcomes, SDK versions, the grid page (coverage's
statuses and counts), the dashboard's worst-first order and card facts, totals per SDK, the
HTTP status table and the loopback check."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from neffcache import errors
from neffcache.fingerprint import Fingerprint, build_fingerprint
from neffcache.index.coverage_engine.rules import (
    CoverageFacts,
    FailureFact,
    build_coverage,
    grid_page,
    status_of,
)
from neffcache.index.ops_values import (
    FingerprintCounts,
    FingerprintDiff,
    FingerprintInfo,
    FingerprintStats,
    MatrixVersion,
    distinguish,
    fingerprint_target,
    group_by_sdk,
    known_versions,
    restore_outcome,
    sdk_version,
)
from neffcache.index.values import LiveLease
from neffcache.server import is_loopback
from neffcache.server.schemas import HTTP_STATUSES, error_document, http_status_for
from tests.support.coverage import by_severity
from tests.unit.test_index_factories import make_cell, make_fingerprint

NOW = datetime(2026, 3, 1, tzinfo=timezone.utc)
VERSION = MatrixVersion(1, "m", 1, "0" * 64, "neuron", 0, NOW, True)


@pytest.mark.parametrize(("code", "restored", "outcome"), [
    (0, 3, "hit"), (0, 0, "hit"), (3, 2, "partial"), (3, 0, "miss"), (5, 0, "miss"),
    (4, 2, "error"), (6, 0, "error"), (1, 0, "error"),
])
def test_restore_outcome(code: int, restored: int, outcome: str) -> None:
    assert restore_outcome(code, restored, 1) == outcome


def test_sdk_version_per_backend() -> None:
    assert sdk_version("neuron", {"version.neuronx-cc": "2.21.1", "version.torch": "2.9"}) \
        == "2.21.1"
    assert sdk_version("inductor", {"version.torch": "2.13.0"}) == "2.13.0"
    assert sdk_version("neuron", {}) == "unknown"
    assert sdk_version("other", {"version.torch": "2"}) == "unknown"


def _info(fp_n: int) -> FingerprintInfo:
    fp = make_fingerprint(fp_n)
    return FingerprintInfo(fp.key, fp.backend, f"2.{fp_n}.0", fp.fields, NOW)


statuses = st.lists(st.lists(st.sampled_from(["ready", "failed", "missing", "both", "leased",
                                              "leased_failed"]),
                             min_size=3, max_size=3), min_size=1, max_size=12)


@given(statuses)
def test_grid_page_shows_the_statuses_and_counts_of_build_coverage(table: list[list[str]]
                                                                    ) -> None:
    """Whatever the facts, a grid page's statuses and counts are those of the coverage report
    (the one engine), and each status is the rule's."""
    cells = [make_cell(n) for n in range(len(table))]
    fps = [make_fingerprint(i) for i in range(3)]
    facts = CoverageFacts()
    for cell, row in zip(cells, table, strict=True):
        for fp, status in zip(fps, row, strict=True):
            pair = (cell.key, fp.key)
            if status in ("ready", "both"):
                facts.entries[pair] = ("e", 1)
            if status in ("failed", "both", "leased_failed"):
                facts.failures[pair] = FailureFact(1, "log", NOW)
            if status.startswith("leased"):
                facts.leases[pair] = LiveLease(cell.key, fp.key, "h", NOW, NOW, NOW, 1)
    report = build_coverage(cells, fps, facts)
    grid = grid_page(VERSION, build_coverage(cells, fps, facts))
    assert [s for row in grid.rows for s in row.statuses] == [r.status for r in report.rows]
    for r in report.rows:
        pair = (r.cell_key, r.fingerprint_key)
        assert r.status == status_of(pair in facts.entries, pair in facts.leases,
                                     pair in facts.failures)
    for col, fp in zip(grid.fingerprints, report.fingerprints, strict=True):
        assert (col.ready, col.in_progress, col.failed, col.missing) == (
            fp.ready, fp.in_progress, fp.failed, fp.missing)
        assert col.ready + col.in_progress + col.failed + col.missing == len(cells)


def test_status_rule() -> None:
    assert status_of(True, True, True) == "ready"
    assert status_of(False, True, True) == "in_progress"
    assert status_of(False, False, True) == "failed"
    assert status_of(False, False, False) == "missing"


def test_grid_page_pages_rows_and_counts_over_all_cells() -> None:
    cells = [(f"p/compile/{n}x64/b1/tp1", f"k{n}") for n in range(10)]
    fp = make_fingerprint(0)
    facts = CoverageFacts(entries={(f"k{n}", fp.key): (None, None) for n in range(0, 10, 2)},
                          fingerprints={fp.key: fp})
    grid = grid_page(VERSION, build_coverage(cells, (), facts), pattern="p/compile/*",
                     offset=8, limit=5)
    assert grid.total_cells == 10
    assert [r.cell_id for r in grid.rows] == ["p/compile/8x64/b1/tp1", "p/compile/9x64/b1/tp1"]
    assert [r.statuses for r in grid.rows] == [("ready",), ("missing",)]
    (counts,) = grid.fingerprints
    assert (counts.ready, counts.failed, counts.missing, counts.ratio) == (5, 0, 5, 0.5)
    assert counts.sdk_version == sdk_version(fp.backend, dict(fp.fields))
    doc = grid.to_json()
    assert doc["limit"] == 5 and doc["offset"] == 8 and doc["cells_pattern"] == "p/compile/*"
    assert doc["fingerprints"][0]["in_progress"] == 0


def test_group_by_sdk_sums_fingerprints_sharing_an_sdk_version() -> None:
    a, b, c = _info(1), _info(2), _info(3)
    b = FingerprintInfo(b.key, "neuron", "2.1.0", b.fields, NOW)  # same SDK as a, other fields
    a = FingerprintInfo(a.key, "neuron", "2.1.0", a.fields, NOW)
    rows = group_by_sdk([FingerprintStats(a, 2, 100), FingerprintStats(b, 3, 50),
                         FingerprintStats(c, 1, 10)])
    assert [(r.backend, r.sdk_version, r.fingerprints, r.entries, r.total_bytes)
            for r in rows] == [("neuron", "2.1.0", 2, 5, 150), ("inductor", "2.3.0", 1, 1, 10)]


def test_every_error_class_has_an_http_status_resolved_through_the_hierarchy() -> None:
    assert http_status_for(errors.MatrixError("x")) == 400  # via UsageError
    assert http_status_for(errors.ManifestError("x")) == 500  # via IntegrityError
    assert http_status_for(errors.NotFoundError("x")) == 404
    assert http_status_for(errors.UnavailableError("x")) == 503
    assert http_status_for(errors.SchemaOutdatedError("x")) == 503
    assert http_status_for(ValueError("x")) == 500
    for cls in errors.EXIT_CODES:
        assert cls in HTTP_STATUSES, cls
    doc = error_document(errors.SchemaOutdatedError("index  at\nrevision 0"))
    assert doc == {"error": "index at revision 0", "type": "SchemaOutdatedError",
                   "hint": "neffcache db upgrade"}


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("0.0.0.0", False), ("10.0.0.5", False), ("::", False),
    ("example.internal", False),
])
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def _col(key: str, ready: int, failed: int, missing: int, restores: int = 0,
         sdk: str = "2.1.0") -> FingerprintCounts:
    return FingerprintCounts(key, "neuron", sdk, ready, failed, missing, restores=restores)


def test_worst_first_restored_with_nothing_built_then_most_failed_then_most_missing() -> None:
    cols = [_col("a", 90, 0, 10), _col("b", 50, 50, 0), _col("c", 0, 0, 100, restores=3),
            _col("d", 80, 10, 10), _col("e", 0, 0, 100), _col("f", 60, 10, 30),
            _col("g", 80, 10, 10, sdk="2.0.0"), _col("h", 1, 0, 99, restores=9)]
    assert [c.key for c in by_severity(cols)] == ["c", "b", "f", "g", "d", "e", "h", "a"]


def test_a_card_names_the_target_and_what_a_fingerprint_without_its_sdk_knows() -> None:
    assert fingerprint_target("neuron", {"target": "trn2", "lnc": "default"}) == "trn2"
    assert fingerprint_target("neuron", {"target": "trn2", "lnc": "1"}) == "trn2 lnc=1"
    assert fingerprint_target("neuron", {}) == "unknown"
    assert fingerprint_target("inductor", {"cpu.arch": "x86_64"}) == "x86_64"
    absent = {"version.neuronx-cc": "absent", "version.torch": "2.9.0",
              "version.torch-neuronx": "absent", "target": "trn1"}
    assert known_versions("neuron", absent) == "torch 2.9.0 · torch-neuronx absent"
    assert known_versions("neuron", {**absent, "version.neuronx-cc": "2.21.0"}) == ""
    doc = FingerprintCounts("k", "neuron", "absent", 0, 0, 4, target="trn1",
                            known="torch 2.9.0", restores=2).to_json()
    assert (doc["target"], doc["known"], doc["restores"]) == ("trn1", "torch 2.9.0", 2)


def _column(key: str, sdk: str = "2.5.0") -> FingerprintCounts:
    return FingerprintCounts(key, "neuron", sdk, 1, 0, 0, target="trn2")


def test_distinguish_names_the_fields_that_tell_alike_cards_apart() -> None:
    def fp(sdk: str, **more: str) -> Fingerprint:
        return build_fingerprint("neuron", {"version.neuronx-cc": sdk, "target": "trn2",
                                            **more})
    a, b = fp("2.5.0", cc_flags="-O1"), fp("2.5.0", cc_flags="-O2", lnc="2")
    c, d = fp("2.6.0", cc_flags="-O1"), fp("2.5.0")
    prints = {x.key: x for x in (a, b, c, d)}
    cols = [_column(a.key), _column(b.key), _column(c.key, "2.6.0"), _column(d.key),
            _column("unknownkey")]
    out = {x.key: x for x in distinguish(cols, prints)}
    # a, b and d read the same (neuron 2.5.0 trn2): each names the fields any of them differ in
    assert out[a.key].distinct == (("cc_flags", "-O1"), ("lnc", "absent"))
    assert out[b.key].distinct == (("cc_flags", "-O2"), ("lnc", "2"))
    assert out[d.key].distinct == (("cc_flags", "absent"), ("lnc", "absent"))
    assert out[c.key].distinct == ()  # alone with its SDK: its title tells it apart
    assert out[c.key].nearest == a.key  # one field from a, more from the others
    assert out[a.key].nearest == c.key  # a ties c and d at one field: column order
    assert out["unknownkey"] == cols[4]  # not in the index: nothing to compare
    assert out[a.key].to_json()["distinct"] == {"cc_flags": "-O1", "lnc": "absent"}
    assert [x.key for x in distinguish(cols, prints)] == [x.key for x in cols]


def test_a_fingerprint_diff_carries_each_fields_note() -> None:
    from neffcache.fingerprint import diff_fingerprints

    a = build_fingerprint("neuron", {"cc_flags": "-O1", "custom": "x"})
    b = build_fingerprint("neuron", {"cc_flags": "-O2"})
    doc = FingerprintDiff(a.key, b.key, diff_fingerprints(a, b)).to_json()
    assert [(d["field"], d["value"], d["against"]) for d in doc["differences"]] == [
        ("cc_flags", "-O1", "-O2"), ("custom", "x", "absent")]
    assert "NEURON_CC_FLAGS" in doc["differences"][0]["note"]
    assert doc["differences"][1]["note"] == ""
