"""The restore face: ``restore(RestoreRequest)`` and ``preview_restore(RestoreRequest)`` against a
local store, judged by their results' ``exit_code`` and ``to_json()`` (public names only)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from neffcache.errors import IntegrityError, UsageError
from neffcache.restore import (
    STATE_FILE,
    RestorePreview,
    RestoreRequest,
    RestoreResult,
    preview_restore,
    restore,
)
from neffcache.store import BundleStore, blob_key, describe_store, open_store
from tests.support.host_entries import (
    INSTANCE_TYPE,
    MATRIX,
    Published,
    bundle_of_directory,
    publish_for_this_host,
)
from tests.support.synthetic import read_tree

CELL_64 = "tiny/compile/64x64/b1/tp1"
CELL_128 = "tiny/compile/128x128/b1/tp1"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str, Published]:
    """A matrix file and a local store holding an entry for its 64x64 cell only."""
    monkeypatch.setenv(*INSTANCE_TYPE)
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(MATRIX, encoding="utf-8")
    store_dir = tmp_path / "store"
    (published,) = publish_for_this_host(open_store(str(store_dir), create=True), matrix,
                                         tmp_path / "work", [CELL_64])
    return matrix, str(store_dir), published


def request(tmp_path: Path, matrix: Path, store: str, *cells: str,
            **extra: object) -> RestoreRequest:
    return RestoreRequest(matrix=matrix, to=tmp_path / "out", cells=cells, store=store,
                          report_to=str(tmp_path / "reports"), **extra)  # type: ignore[arg-type]


def test_every_cell_restored_is_exit_0_and_reported(tmp_path: Path, world) -> None:  # type: ignore[no-untyped-def]
    matrix, store, published = world
    told: list[str] = []
    result = restore(request(tmp_path, matrix, store, CELL_64, notice=told.append))
    assert isinstance(result, RestoreResult)
    assert result.exit_code == 0 and result.error() is None
    doc = result.to_json()
    assert (doc["status"], doc["exit_code"], doc["cells_restored"]) == ("ok", 0, [CELL_64])
    assert doc["files_fetched"] == len(published.files) and doc["files_skipped"] == 0
    assert doc["fingerprint_python"] == sys.executable
    assert doc["environment"]["TORCH_NEURONX_NEFF_CACHE_DIR"] == str(tmp_path / "out" / "neff")
    tree = read_tree(tmp_path / "out" / "neff")
    tree.pop(STATE_FILE)
    assert tree == published.files
    (report,) = (tmp_path / "reports").iterdir()  # the restore report, written by the call
    assert json.loads(report.read_bytes())["cells_restored"] == [CELL_64]
    assert told == []

    again = restore(request(tmp_path, matrix, store, CELL_64))  # all in place: no store needed
    assert again.exit_code == 0 and again.to_json()["files_skipped"] == len(published.files)


def test_a_cell_without_an_entry_is_exit_3(tmp_path: Path, world) -> None:  # type: ignore[no-untyped-def]
    matrix, store, _ = world
    result = restore(request(tmp_path, matrix, store))  # every cell: 128x128 has no entry
    doc = result.to_json()
    assert result.exit_code == 3 and doc["exit_code"] == 3 and doc["status"] == "partial"
    assert (doc["cells_restored"], doc["cells_missing"]) == ([CELL_64], [CELL_128])
    assert "no entry" in str(result.error())


def test_a_corrupt_blob_is_exit_4_and_never_installed(tmp_path: Path, world) -> None:  # type: ignore[no-untyped-def]
    matrix, store, published = world
    blob = Path(store, blob_key(published.large_sha256))
    data = blob.read_bytes()
    blob.write_bytes(bytes([data[0] ^ 0xFF]) + data[1:])
    result = restore(request(tmp_path, matrix, store, CELL_64))
    doc = result.to_json()
    assert result.exit_code == 4 and doc["exit_code"] == 4 and doc["status"] == "failed"
    assert doc["cells_restored"] == [] and doc["files_failed_count"] == 1
    assert doc["files_fetched"] == len(published.files) - 1


def test_the_dry_run_plans_and_writes_nothing(tmp_path: Path, world) -> None:  # type: ignore[no-untyped-def]
    matrix, store, published = world
    preview = preview_restore(request(tmp_path, matrix, store))
    assert isinstance(preview, RestorePreview)
    doc = preview.to_json()
    assert doc["dry_run"] is True
    assert preview.exit_code == 3 and doc["exit_code"] == 3  # 128x128 has no entry
    assert doc["files_to_fetch"] == len(published.files) and doc["files_present"] == 0
    assert doc["cells_missing"] == [CELL_128]
    assert not (tmp_path / "out").exists() and not (tmp_path / "reports").exists()

    only_64 = preview_restore(request(tmp_path, matrix, store, CELL_64))
    assert only_64.exit_code == 0 and only_64.error() is None


def test_the_environment_comes_before_the_store(tmp_path: Path, world) -> None:  # type: ignore[no-untyped-def]
    matrix, _, _ = world
    seen: list[dict[str, str]] = []
    with pytest.raises(UsageError, match="no such directory"):  # the store does not exist
        restore(request(tmp_path, matrix, str(tmp_path / "nowhere"), CELL_64,
                        on_environment=lambda env: seen.append(dict(env))))
    assert seen and seen[0]["TORCH_NEURONX_NEFF_CACHE_DIR"] == str(tmp_path / "out" / "neff")
    assert Path(seen[0]["TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR"]).is_dir()  # scratch dir made


def test_a_pattern_matching_no_cell_is_refused(tmp_path: Path, world) -> None:  # type: ignore[no-untyped-def]
    matrix, store, _ = world
    with pytest.raises(UsageError, match="matches no cell"):
        restore(request(tmp_path, matrix, store, "nope/*"))


def test_a_bundle_opens_as_a_store_and_restores_without_one(tmp_path: Path, world) -> None:  # type: ignore[no-untyped-def]
    matrix, store, published = world
    path = tmp_path / "entries.bundle"
    digest = bundle_of_directory(Path(store), path)
    bundle = open_store(f"bundle:{path}", expect_sha256=digest)
    assert isinstance(bundle, BundleStore) and bundle.url == describe_store(f"bundle:{path}")
    bundle.close()
    with pytest.raises(IntegrityError, match="is not the expected"):
        open_store(f"bundle:{path}", expect_sha256="0" * 64)
    with pytest.raises(UsageError, match="checks a bundle"):
        open_store(store, expect_sha256=digest)

    result = restore(request(tmp_path, matrix, str(tmp_path / "no-store"), CELL_64,
                             bundle=path, expect_sha256=digest))
    assert result.exit_code == 0 and result.to_json()["files_fetched"] == len(published.files)
    assert not (tmp_path / "reports").exists()  # a bundle restore reports nothing
    with pytest.raises(IntegrityError):
        restore(request(tmp_path, matrix, store, CELL_64, bundle=path, expect_sha256="0" * 64))
