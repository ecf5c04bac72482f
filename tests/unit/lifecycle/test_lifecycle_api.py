"""The lifecycle face, through its public names only: each use case from a typed request, its
result's exit code and --json document."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from neffcache.errors import IntegrityError, UsageError
from neffcache.lifecycle import (
    CollectGarbageRequest,
    CollectGarbageResult,
    CopyEntriesRequest,
    ExportBundleRequest,
    ImportBundleRequest,
    RetireEntriesRequest,
    RetireEntriesResult,
    ShowBundleRequest,
    VerifyLocalDirRequest,
    VerifyStoreRequest,
    collect_garbage,
    copy_entries,
    export_bundle,
    import_bundle,
    retire_entries,
    show_bundle,
    verify_local_dir,
    verify_store,
)
from neffcache.store import Store, blob_key, open_store
from tests.support.lifecycle import cell, publish_synthetic, sdk_fingerprint

OLD, NEW = sdk_fingerprint("2.18"), sdk_fingerprint("2.19")
HEAVY = ("sqlalchemy", "torch", "boto3", "botocore", "diffusers", "fastapi")


def test_the_face_is_light() -> None:
    code = ("import sys, neffcache.lifecycle; "
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[3])
    assert out.stdout.strip() == "[]"


def _store(tmp_path: Path, name: str = "store") -> tuple[Store, str]:
    """A local store with an entry of each SDK version (cells 64 and 128), and its URL."""
    path = tmp_path / name
    store = open_store(str(path), create=True)
    publish_synthetic(store, cell(64), OLD, tmp_path / f"{name}-64", seed=1)
    publish_synthetic(store, cell(128), NEW, tmp_path / f"{name}-128", seed=2)
    return store, str(path)


def test_verify_store_ok_then_a_corrupt_blob_exits_4(tmp_path: Path) -> None:
    store, url = _store(tmp_path)
    seen: list[tuple[int, int]] = []
    ok = verify_store(VerifyStoreRequest(store=url, progress=lambda d, t: seen.append((d, t))))
    assert ok.exit_code == 0 and ok.error() is None
    doc = ok.to_json()
    assert doc["ok"] is True and doc["manifests"] == 2 and doc["problem_count"] == 0
    assert doc["blobs"] > 0 and doc["bytes_checked"] > 0 and doc["quick"] is False
    assert seen[-1] == (doc["blobs"], doc["blobs"])

    victim = next(iter(store.list("blobs/")))
    path = tmp_path / "store" / victim
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF
    path.write_bytes(bytes(data))
    bad = verify_store(VerifyStoreRequest(store=url))
    assert bad.exit_code == 4 and isinstance(bad.error(), IntegrityError)
    doc = bad.to_json()
    assert doc["ok"] is False and doc["problem_count"] == 1
    assert doc["problems"] == [{"key": victim, "kind": "sha256",
                                "error": doc["problems"][0]["error"]}]
    assert verify_store(VerifyStoreRequest(store=url, quick=True)).exit_code == 0  # it exists


def test_verify_store_uses_the_configured_store(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _, url = _store(tmp_path)
    monkeypatch.setenv("NEFFCACHE_STORE", url)
    assert verify_store(VerifyStoreRequest()).to_json()["manifests"] == 2


def test_verify_local_dir_refuses_a_directory_restore_did_not_write(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a directory neffcache restore wrote"):
        verify_local_dir(VerifyLocalDirRequest(tmp_path))


def test_gc_dry_run_plans_without_deleting_and_deleting_needs_consent(tmp_path: Path) -> None:
    store, url = _store(tmp_path)
    orphan = tmp_path / "store" / blob_key("0" * 64)
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"left by a crashed publish")
    dry = collect_garbage(CollectGarbageRequest(store=url, dry_run=True))
    assert dry.exit_code == 0
    doc = dry.to_json()
    assert doc["delete"] == [blob_key("0" * 64)] and doc["deleted"] == []
    assert doc["dry_run"] is True and doc["uploads"] is None  # a local store has none
    assert doc["store"] == store.url and "uploads_error" not in doc
    assert orphan.exists()

    with pytest.raises(UsageError, match="not confirmed"):
        collect_garbage(CollectGarbageRequest(store=url))
    asked: list[CollectGarbageResult] = []

    def decline(preview: CollectGarbageResult) -> bool:
        asked.append(preview)
        return False

    declined = collect_garbage(CollectGarbageRequest(store=url, confirm=decline))
    assert asked[0].pending == "1 blob(s), 0 pack(s) and 0 multipart upload(s)"
    assert declined.to_json()["dry_run"] is True and orphan.exists()

    done = collect_garbage(CollectGarbageRequest(store=url, confirmed=True))
    doc = done.to_json()
    assert done.exit_code == 0 and doc["dry_run"] is False
    assert doc["deleted"] == [blob_key("0" * 64)] and doc["deleted_count"] == 1
    assert not orphan.exists()
    assert verify_store(VerifyStoreRequest(store=url)).exit_code == 0


def test_gc_uploads_only_on_a_local_store_and_the_grace_floor(tmp_path: Path) -> None:
    _, url = _store(tmp_path)
    only = collect_garbage(CollectGarbageRequest(store=url, uploads_only=True))
    assert only.to_json() == {"store": only.store, "dry_run": False, "uploads": None}
    with pytest.raises(UsageError, match="600 s floor"):
        collect_garbage(CollectGarbageRequest(store=url, grace=0, dry_run=True))
    forced = collect_garbage(CollectGarbageRequest(store=url, grace=0, force=True,
                                                   dry_run=True))
    assert forced.to_json()["delete"] == []


def test_copy_between_two_local_stores(tmp_path: Path) -> None:
    src, url = _store(tmp_path)
    target = str(tmp_path / "mirror")
    first = copy_entries(CopyEntriesRequest(url, target, all_entries=True))
    doc = first.to_json()
    assert first.exit_code == 0
    assert doc["entries_copied"] == 2 and doc["entries_present"] == 0
    assert doc["blobs_copied"] == len(list(src.list("blobs/"))) and doc["bytes_copied"] > 0
    assert doc["source"] == src.url and doc["target"] == open_store(target).url
    again = copy_entries(CopyEntriesRequest(url, target, all_entries=True)).to_json()
    assert (again["entries_copied"], again["entries_present"], again["blobs_copied"]) == (0, 2, 0)
    one = copy_entries(CopyEntriesRequest(url, str(tmp_path / "one"), all_entries=True,
                                          fingerprints=(NEW.key[:8],))).to_json()
    assert one["entries_copied"] == 1
    assert verify_store(VerifyStoreRequest(store=target)).to_json()["manifests"] == 2


def test_copy_refuses_a_bad_selection_and_the_same_store(tmp_path: Path) -> None:
    _, url = _store(tmp_path)
    with pytest.raises(UsageError, match="give a MATRIX or --all"):
        copy_entries(CopyEntriesRequest(url, str(tmp_path / "t")))
    with pytest.raises(UsageError, match="same store"):
        copy_entries(CopyEntriesRequest(url, url, all_entries=True))


def test_bundle_export_show_import_round_trip(tmp_path: Path) -> None:
    src, url = _store(tmp_path)
    out = tmp_path / "neff.bundle"
    exported = export_bundle(ExportBundleRequest(out, all_entries=True, store=url))
    doc = exported.to_json()
    assert exported.exit_code == 0 and doc["file"] == str(out) and out.stat().st_size == \
        doc["file_bytes"]
    assert len(doc["entries"]) == 2 and doc["members"] > 0 and len(doc["sha256"]) == 64

    shown = show_bundle(ShowBundleRequest(out, expect_sha256=doc["sha256"], verify=True))
    sdoc = shown.to_json()
    assert shown.exit_code == 0 and sdoc["verified"] is True
    assert (sdoc["sha256"], sdoc["entries"], sdoc["members"], sdoc["bytes"]) == \
        (doc["sha256"], doc["entries"], doc["members"], doc["bytes"])
    with pytest.raises(IntegrityError):
        show_bundle(ShowBundleRequest(out, expect_sha256="0" * 64))

    target = str(tmp_path / "other")
    imported = import_bundle(ImportBundleRequest(out, expect_sha256=doc["sha256"],
                                                 store=target))
    idoc = imported.to_json()
    assert imported.exit_code == 0 and idoc["sha256"] == doc["sha256"]
    assert idoc["file"] == str(out) and idoc["entries_copied"] == 2
    assert idoc["blobs_copied"] == len(list(src.list("blobs/")))
    assert verify_store(VerifyStoreRequest(store=target)).exit_code == 0


def test_retire_plans_first_and_needs_consent(tmp_path: Path) -> None:
    store, url = _store(tmp_path)
    plan = retire_entries(RetireEntriesRequest(keep_sdk_versions=1, store=url, dry_run=True))
    doc = plan.to_json()
    assert plan.exit_code == 0 and doc["dry_run"] is True and doc["record"] is None
    assert (doc["entries_kept"], doc["entries_retired"]) == (1, 1)
    assert doc["retire"][0]["fingerprint_key"] == OLD.key
    assert doc["keep"][0]["kept_by"] == ["sdk_version"]
    assert doc["store"] == store.url and len(list(store.list("manifests/"))) == 2

    with pytest.raises(UsageError, match="needs a policy"):
        retire_entries(RetireEntriesRequest(store=url, dry_run=True))
    with pytest.raises(UsageError, match="not confirmed"):
        retire_entries(RetireEntriesRequest(keep_sdk_versions=1, store=url))
    asked: list[RetireEntriesResult] = []
    done = retire_entries(RetireEntriesRequest(
        keep_sdk_versions=1, store=url, reason="2.18 is gone", by="ops@ci",
        confirm=lambda preview: asked.append(preview) or True))
    assert asked[0].dry_run and asked[0].plan.retire[0].fingerprint_key == OLD.key
    doc = done.to_json()
    assert done.exit_code == 0 and doc["dry_run"] is False
    assert doc["record"].startswith("retired/") and store.has(doc["record"])
    assert len(list(store.list("manifests/"))) == 1
    assert done.index_error is None  # no index here: nothing to update
