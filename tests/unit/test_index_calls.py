"""The index's use cases through its face only: each request in, a result out with its
``to_json`` (the command's --json document), ``error()`` and ``exit_code``."""

from __future__ import annotations

import io
from datetime import datetime, timezone
from pathlib import Path

import pytest

from neffcache.errors import IntegrityError, MatrixError, SchemaOutdatedError, UsageError
from neffcache.fingerprint import collect_fingerprint
from neffcache.index import (
    FAILED,
    MISSING,
    READY,
    CoverageRequest,
    IngestRestoreReportsRequest,
    ListEntriesRequest,
    ListRegisteredMatricesRequest,
    RegisterMatrixFileRequest,
    ReindexStoreRequest,
    ShowRegisteredMatrixRequest,
    ShowSchemaRequest,
    UpgradeSchemaRequest,
    coverage,
    ingest_restore_reports,
    list_entries,
    list_registered_matrices,
    open_index,
    register_matrix_file,
    reindex_store,
    show_registered_matrix,
    show_schema,
    upgrade_schema,
)
from neffcache.manifest import encode_manifest
from neffcache.matrix import parse_matrix
from neffcache.reports import build_report
from neffcache.store import manifest_key, open_store
from tests.support.ops_seed import matrix_text, sdk_fingerprint
from tests.unit.test_index_factories import make_cell, make_fingerprint, make_manifest


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A named index (never upgraded on use), upgraded through the face."""
    named = f"sqlite:///{tmp_path / 'index.db'}"
    upgrade_schema(UpgradeSchemaRequest(index=named))
    return named


@pytest.fixture
def matrix_file(tmp_path: Path) -> Path:
    path = tmp_path / "prod.toml"
    path.write_text(matrix_text("prod", shapes=3))
    return path


def test_schema_show_check_and_upgrade(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    before = show_schema(ShowSchemaRequest(index=url, check=True))
    assert before.to_json()["current"] is None and before.to_json()["up_to_date"] is False
    assert isinstance(before.error(), SchemaOutdatedError) and before.exit_code == 7
    assert show_schema(ShowSchemaRequest(index=url)).exit_code == 0  # no check: reported only
    first = upgrade_schema(UpgradeSchemaRequest(index=url))
    assert first.to_json() == {"url": url, "from": None, "to": first.after, "changed": True}
    again = upgrade_schema(UpgradeSchemaRequest(index=url))
    assert (again.changed, again.exit_code, again.error()) == (False, 0, None)
    after = show_schema(ShowSchemaRequest(index=url, check=True))
    assert after.exit_code == 0 and after.to_json()["current"] == first.after


def test_register_list_and_show_a_matrix(url: str, matrix_file: Path) -> None:
    first = register_matrix_file(RegisterMatrixFileRequest(file=matrix_file, index=url))
    doc = first.to_json()
    assert (doc["name"], doc["version"], doc["cells"], doc["changed"]) == ("prod", 1, 3, True)
    assert first.exit_code == 0 and first.error() is None
    again = register_matrix_file(RegisterMatrixFileRequest(file=str(matrix_file), index=url))
    assert again.to_json()["changed"] is False
    copy = register_matrix_file(RegisterMatrixFileRequest(file=matrix_file, name="copy",
                                                          index=url))
    assert copy.version.name == "copy"
    listed = list_registered_matrices(ListRegisteredMatricesRequest(index=url))
    assert [m["name"] for m in listed.to_json()] == ["copy", "prod"]
    shown = show_registered_matrix(ShowRegisteredMatrixRequest(name="prod", index=url))
    assert shown.to_json()["toml"] == matrix_file.read_text()  # type: ignore[index,call-overload]
    history = show_registered_matrix(ShowRegisteredMatrixRequest(name="prod", versions=True,
                                                                 index=url)).to_json()
    assert isinstance(history, list) and [v["version"] for v in history] == [1]
    assert "toml" not in history[0]


def test_register_refuses_a_missing_file_and_an_empty_name(url: str, tmp_path: Path,
                                                           matrix_file: Path) -> None:
    with pytest.raises(MatrixError, match="matrix file not found"):
        register_matrix_file(RegisterMatrixFileRequest(file=tmp_path / "nope.toml", index=url))
    with pytest.raises(MatrixError, match="--name"):
        register_matrix_file(RegisterMatrixFileRequest(file=matrix_file, name=" ", index=url))


def test_list_entries_newest_first_with_a_glob_and_a_limit(url: str) -> None:
    cells = [make_cell(n) for n in range(3)] + [make_cell(0, mode="eager")]
    fp = make_fingerprint(1)
    with open_index(url, auto_upgrade=True) as ix:
        ix.record_entries([make_manifest(c, fp) for c in cells], "/store")
    everything = list_entries(ListEntriesRequest(index=url))
    assert everything.to_json()["count"] == 4 and everything.exit_code == 0
    eager = list_entries(ListEntriesRequest(cell="*/eager/*", index=url)).to_json()
    assert [e["cell_id"] for e in eager["entries"]] == [cells[3].id]
    assert list_entries(ListEntriesRequest(limit=2, fingerprint=fp.key[:8],
                                           index=url)).to_json()["count"] == 2


def test_list_entries_on_the_embedded_default_creates_it(neffcache_home: Path) -> None:
    assert list_entries(ListEntriesRequest()).to_json() == {"entries": [], "count": 0,
                                                          "next": None}
    assert (neffcache_home / "index.db").is_file()


def test_reindex_store_indexes_manifests_and_reports_an_invalid_one(url: str,
                                                                    tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"), create=True)
    fp = make_fingerprint(2)
    good = [make_manifest(make_cell(n), fp) for n in range(2)]
    for m in good:
        store.put(manifest_key(m.entry_key), io.BytesIO(encode_manifest(m)), if_absent=False)
    store.put(manifest_key("f" * 64), io.BytesIO(b"{not json"), if_absent=False)
    result = reindex_store(ReindexStoreRequest(store=store.url, index=url))
    doc = result.to_json()
    assert (doc["store"], doc["scanned"], doc["added"], len(doc["invalid"])) == (
        store.url, 3, 2, 1)
    assert doc["reports"] == {"scanned": 0, "added": 0, "already_ingested": 0, "invalid": []}
    assert isinstance(result.error(), IntegrityError) and result.exit_code == 4
    seen: list[tuple[int, int]] = []
    store.delete(manifest_key("f" * 64))
    again = reindex_store(ReindexStoreRequest(store=store.url, index=url,
                                              progress=lambda d, t: seen.append((d, t))))
    assert (again.to_json()["already_indexed"], again.exit_code) == (2, 0)
    assert seen[-1] == (2, 2)


def test_ingest_restore_reports_from_files_once(url: str, tmp_path: Path) -> None:
    when = datetime(2026, 3, 1, tzinfo=timezone.utc)
    report = build_report({"status": "ok", "exit_code": 0, "cells_requested": ["c"],
                           "cells_restored": ["c"], "cells_missing": [], "entries": [],
                           "files_fetched": 1, "bytes_fetched": 10, "seconds": 0.1},
                          fingerprint=make_fingerprint(3), host="i-1", matrix="m", now=when,
                          nonce="00000001", version="0.1.0")
    folder = tmp_path / "reports"
    folder.mkdir()
    (folder / "one.json").write_bytes(report.encode())
    (folder / "bad.json").write_text("{")
    first = ingest_restore_reports(IngestRestoreReportsRequest(sources=[folder], index=url))
    doc = first.to_json()
    assert (doc["source"], doc["scanned"], doc["added"], len(doc["invalid"])) == (
        str(folder), 2, 1, 1)
    assert first.exit_code == 0  # a malformed report is a warning, not a failure
    again = ingest_restore_reports(IngestRestoreReportsRequest(sources=[folder], index=url))
    assert (again.to_json()["added"], again.to_json()["already_ingested"]) == (0, 1)


def test_ingest_restore_reports_from_an_empty_store(url: str, tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"), create=True)
    store.check()  # a new store: its marker, nothing else
    result = ingest_restore_reports(IngestRestoreReportsRequest(store=store.url, index=url,
                                                                days=2))
    assert result.to_json() == {"source": store.url, "scanned": 0, "added": 0,
                                "already_ingested": 0, "invalid": []}


def _seed_prod(url: str, matrix_file: Path) -> tuple[str, str]:
    """prod registered: fingerprint 1 has every cell; 2 has cell 0 and a failure on cell 1."""
    register_matrix_file(RegisterMatrixFileRequest(file=matrix_file, index=url))
    cells = parse_matrix(matrix_file.read_text(), str(matrix_file)).cells
    fp1, fp2 = sdk_fingerprint(1), sdk_fingerprint(2)
    with open_index(url, auto_upgrade=False) as ix:
        ix.record_entries([make_manifest(c, fp1) for c in cells]
                          + [make_manifest(cells[0], fp2)], "/store")
        ix.record_failure(None, cells[1], fp2, 1, 2.0, "boom")
    return fp1.key, fp2.key


def test_coverage_of_a_registered_matrix_and_the_check(url: str, matrix_file: Path) -> None:
    fp1, fp2 = _seed_prod(url, matrix_file)
    both = coverage(CoverageRequest(matrix="prod", fingerprints=[fp1[:12], fp2], index=url))
    doc = both.to_json()
    assert (doc["matrix"], doc["here"], [f["key"] for f in doc["fingerprints"]]) == (
        "prod", None, [fp1, fp2])
    assert [(f["ready"], f["failed"], f["missing"]) for f in doc["fingerprints"]] == [
        (3, 0, 0), (1, 1, 1)]
    assert [r["status"] for r in doc["rows"] if r["fingerprint_key"] == fp2] == [
        READY, FAILED, MISSING]
    assert "check" not in doc and both.exit_code == 0
    ok = coverage(CoverageRequest(matrix="prod", fingerprints=[fp1], check=True, index=url))
    assert ok.to_json()["check"] == {"ok": True, "not_ready": []} and ok.exit_code == 0
    gate = coverage(CoverageRequest(matrix="prod", fingerprints=[fp2], check=True, index=url,
                                    cells=["*/512x52*"]))
    assert gate.exit_code == 3 and gate.to_json()["check"]["ok"] is False
    assert {r["status"] for r in gate.to_json()["check"]["not_ready"]} == {FAILED, MISSING}
    assert "not ready" in str(gate.error())


def test_coverage_of_a_file_with_this_hosts_fingerprint(url: str, matrix_file: Path) -> None:
    result = coverage(CoverageRequest(matrix=matrix_file, index=url))
    here = collect_fingerprint("neuron", {})
    assert result.here is not None and result.here.backend == here.backend
    doc = result.to_json()
    assert doc["matrix"] == str(matrix_file) and doc["here"] == result.here.key
    assert [f["here"] for f in doc["fingerprints"]] == [True]
    assert {r["status"] for r in doc["rows"]} == {MISSING}
    host = coverage(CoverageRequest(matrix=matrix_file, fingerprints=["host"], check=True,
                                    index=url))
    assert host.exit_code == 3 and host.to_json()["here"] == result.here.key


def test_coverage_refuses_unknown_matrices_and_fingerprints(url: str,
                                                            matrix_file: Path) -> None:
    _seed_prod(url, matrix_file)
    with pytest.raises(MatrixError, match="no matrix of that name"):
        coverage(CoverageRequest(matrix="nope", index=url))
    with pytest.raises(UsageError, match="no fingerprint in the index"):
        coverage(CoverageRequest(matrix="prod", fingerprints=["abcdef"], index=url))
    with pytest.raises(UsageError, match="no fingerprint in the index"):  # malformed
        coverage(CoverageRequest(matrix="prod", fingerprints=["z" * 64], check=True, index=url))


def test_coverage_check_of_a_fingerprint_nothing_was_built_for_is_a_miss(
        url: str, matrix_file: Path) -> None:
    fp1, _ = _seed_prod(url, matrix_file)
    new = sdk_fingerprint(9).key  # a well-formed key the index has never seen
    shown = coverage(CoverageRequest(matrix="prod", fingerprints=[new.upper(), fp1], index=url))
    doc = shown.to_json()
    assert shown.exit_code == 0 and [f["key"] for f in doc["fingerprints"]] == [new, fp1]
    assert [(f["backend"], f["ready"], f["missing"]) for f in doc["fingerprints"]] == [
        ("unknown", 0, 3), ("neuron", 3, 0)]
    gate = coverage(CoverageRequest(matrix="prod", fingerprints=[new], check=True, index=url))
    assert gate.exit_code == 3 and "not ready" in str(gate.error())
    assert {(r["fingerprint_key"], r["status"]) for r in gate.to_json()["check"]["not_ready"]
            } == {(new, MISSING)}
