"""Lifecycle on S3 (moto server), via the CLI: bundles (export → import → restore, restore with
no store or network, hostile bundles), copy killed midway and rerun, retire on a store with
three SDK versions while a restore is in flight, retire keeping the fingerprints restored
lately (from an ingested report), verify --local."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from neffcache.backends import get_backend
from neffcache.restore.run import restore_cells
from neffcache.store import open_store
from tests.conftest import CLOSED_METADATA_ENDPOINT
from tests.e2e.conftest import CELL_64, CELL_128, Cli, restored_tree, split_url
from tests.support.lifecycle import bundle_with, cell, publish_synthetic, sdk_fingerprint
from tests.support.synthetic import make_neff_cache, read_tree

pytestmark = pytest.mark.s3


def _push(cli: Cli, matrix: Path, cell_id: str, root: Path, *, seed: int, count: int = 30,
          env: dict[str, str] | None = None) -> dict[str, bytes]:
    cache = make_neff_cache(root, seed=seed, count=count, large=1)
    run = cli("push", "--matrix", str(matrix), "--cell", cell_id, "--root", f"neff={root}",
              env=env)
    assert run.code == 0, run.stderr
    return cache.files


def _new_store(s3: Any) -> str:
    bucket = f"nc-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    return f"s3://{bucket}/neff"


def _files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


def test_export_import_restore_is_byte_identical_and_needs_no_store(
        cli: Cli, matrix: Path, tmp_path: Path, s3: Any) -> None:
    files64 = _push(cli, matrix, CELL_64, tmp_path / "c64", seed=1)
    files128 = _push(cli, matrix, CELL_128, tmp_path / "c128", seed=2)
    bundle = tmp_path / "neff.bundle"
    export = cli("bundle", "export", str(matrix), "-o", str(bundle), "--json")
    assert export.code == 0, export.stderr
    digest = export.json["sha256"]
    assert len(export.json["entries"]) == 2

    empty = _new_store(s3)
    imported = cli("bundle", "import", str(bundle), "--store", empty, "--expect-sha256", digest,
                   "--json")
    assert imported.code == 0, imported.stderr
    assert imported.json["entries_copied"] == 2
    again = cli("bundle", "import", str(bundle), "--store", empty, "--json")
    assert (again.json["entries_copied"], again.json["blobs_copied"]) == (0, 0)
    out = tmp_path / "from-store"
    restored = cli("restore", str(matrix), "--to", str(out), "--cells", "tiny/*/64x64/*",
                   "--cells", "tiny/*/128x128/*", env={"NEFFCACHE_STORE": empty})
    assert restored.code == 0, restored.stderr
    assert restored_tree(out / "neff") == {**files64, **files128}
    assert cli("verify", "--store", empty).code == 0

    # An air-gapped host: no store configured, S3 and metadata endpoints closed.
    offline = {"NEFFCACHE_STORE": "", "AWS_ENDPOINT_URL": CLOSED_METADATA_ENDPOINT,
               "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}
    dark = tmp_path / "air-gapped"
    run = cli("restore", str(matrix), "--from-bundle", str(bundle), "--to", str(dark),
              "--cells", "tiny/*/64x64/*", "--cells", "tiny/*/128x128/*",
              "--expect-sha256", digest, "--json", env=offline)
    assert run.code == 0, run.stderr
    assert run.json["store"] == f"bundle:{bundle}"
    assert restored_tree(dark / "neff") == {**files64, **files128}
    check = cli("verify", "--local", str(dark), "--json", env=offline)
    assert check.code == 0 and check.json["files"] == len({**files64, **files128})


def test_bad_bundles_exit_4_and_install_nothing(cli: Cli, matrix: Path, tmp_path: Path,
                                                s3: Any) -> None:
    _push(cli, matrix, CELL_64, tmp_path / "c64", seed=3)
    good = tmp_path / "good.bundle"
    assert cli("bundle", "export", str(matrix), "-o", str(good)).code == 0
    data = good.read_bytes()
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x04
    (tmp_path / "flipped.bundle").write_bytes(flipped)
    (tmp_path / "truncated.bundle").write_bytes(data[: len(data) * 2 // 3])
    blob = b"evil bytes"
    bundle_with(tmp_path / "dotdot.bundle", [("../../escape.neff", blob)])
    empty = _new_store(s3)
    bucket, _ = split_url(empty)
    for name in ("flipped", "truncated", "dotdot"):
        before = _files_under(tmp_path)
        out = tmp_path / f"out-{name}"
        run = cli("restore", str(matrix), "--from-bundle", str(tmp_path / f"{name}.bundle"),
                  "--to", str(out), "--cells", "tiny/*/64x64/*")
        assert run.code == 4, (name, run.stderr)
        assert "Error: bundle" in run.stderr
        new = _files_under(tmp_path) - before
        assert all(p.startswith(f"out-{name}") for p in new), new
        assert not [p for p in out.rglob("*") if p.is_file()]
        imp = cli("bundle", "import", str(tmp_path / f"{name}.bundle"), "--store", empty)
        assert imp.code == 4, (name, imp.stderr)
        assert s3.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
    assert not (tmp_path.parent / "escape.neff").exists()
    wrong = cli("restore", str(matrix), "--from-bundle", str(good), "--to",
                str(tmp_path / "o"), "--expect-sha256", "0" * 64)
    assert wrong.code == 4 and "not the expected" in wrong.stderr


def test_copy_killed_midway_then_rerun_copies_each_blob_once(
        cli: Cli, matrix: Path, tmp_path: Path, s3: Any, s3_url: str,
        e2e_env: dict[str, str]) -> None:
    files = _push(cli, matrix, CELL_64, tmp_path / "c64", seed=4, count=400)
    target = _new_store(s3)
    bucket, prefix = split_url(target)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})

    def blobs() -> list[dict[str, Any]]:
        pages = s3.get_paginator("list_object_versions").paginate(Bucket=bucket,
                                                                   Prefix=f"{prefix}/blobs/")
        return [v for page in pages for v in page.get("Versions", [])]

    proc = subprocess.Popen([sys.executable, "-m", "neffcache.cli", "copy", str(matrix),
                             "--from", s3_url, "--to", target, "--workers", "1"],
                            env=e2e_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(blobs()) < 40 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    copied_before = len(blobs())
    assert copied_before >= 40
    assert s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/manifests/")["KeyCount"] == 0

    rerun = cli("copy", str(matrix), "--from", s3_url, "--to", target, "--json")
    assert rerun.code == 0, rerun.stderr
    doc = rerun.json
    assert doc["entries_copied"] == 1
    assert doc["blobs_skipped"] >= copied_before - 1  # one may have been cut mid-upload
    versions = blobs()
    keys = [v["Key"] for v in versions]
    assert len(keys) == len(set(keys)), "a blob was uploaded twice"
    assert len(set(keys)) == len(set(files.values()))
    src_bucket, src_prefix = split_url(s3_url)
    listing = s3.list_objects_v2(Bucket=src_bucket, Prefix=f"{src_prefix}/blobs/")
    assert sorted(o["Key"][len(src_prefix):] for o in listing["Contents"]) == \
        sorted(k[len(prefix):] for k in keys)
    out = tmp_path / "out"
    assert cli("restore", str(matrix), "--to", str(out), "--cells", CELL_64,
               env={"NEFFCACHE_STORE": target}).code == 0
    assert restored_tree(out / "neff") == files
    assert cli("copy", str(matrix), "--from", s3_url, "--to", target, "--json"
               ).json["blobs_copied"] == 0


class _RetireDuringRestore:
    """Delegates to a store; the first time a blob is opened (the restore has read its
    manifests), runs `retire` and `gc` through the CLI: a restore that started before."""

    def __init__(self, inner: Any, during: Any) -> None:
        self.inner, self.url, self._during = inner, inner.url, during

    def check(self) -> None:
        self.inner.check()

    def has(self, key: str) -> bool:
        return bool(self.inner.has(key))

    def open(self, key: str, start: int = 0, length: int | None = None) -> Any:
        if self._during is not None and key.startswith(("blobs/", "packs/")):
            during, self._during = self._during, None
            during()
        return self.inner.open(key, start, length)

    def read(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        with self.open(key, start, length) as fh:
            return bytes(fh.read())

    def put(self, key: str, source: Any, *, if_absent: bool = True) -> bool:
        return bool(self.inner.put(key, source, if_absent=if_absent))

    def list(self, prefix: str) -> Any:
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)


def test_retire_keeps_the_policy_entries_and_a_running_restore_finishes(
        cli: Cli, tmp_path: Path, s3_url: str) -> None:
    store = open_store(s3_url)
    published = {}
    for i, cc in enumerate(("2.18", "2.19", "2.21")):
        for j, h in enumerate((64, 128)):
            r = publish_synthetic(store, cell(h), sdk_fingerprint(cc), tmp_path / f"{cc}-{h}",
                                  seed=100 + 10 * i + j, count=20)
            published[(cc, h)] = r.manifest
    plan = cli("retire", "--keep-sdk-versions", "2", "--dry-run", "--json")
    assert plan.code == 0, plan.stderr
    doc = plan.json
    assert doc["dry_run"] and doc["record"] is None
    assert {e["entry_key"] for e in doc["retire"]} == \
        {published[("2.18", h)].entry_key for h in (64, 128)}
    assert doc["bytes_freed"] > 0 and doc["entries_kept"] == 4
    assert cli("retire", "--keep-sdk-versions", "2").code == 2  # no --yes, no terminal

    def retire_then_gc() -> None:
        done = cli("retire", "--keep-sdk-versions", "2", "--yes", "--reason", "SDK 2.18 EOL",
                   "--json")
        assert done.code == 0, done.stderr
        assert done.json["record"].startswith("retired/")
        swept = cli("gc", "--yes", "--json")
        assert swept.code == 0 and swept.json["deleted_count"] == 0  # within the grace

    old = sdk_fingerprint("2.18")
    target = tmp_path / "restore-during-retire"
    result = restore_cells(_RetireDuringRestore(store, retire_then_gc), [cell(64), cell(128)],
                           get_backend("neuron"), old, target, workers=2)
    assert result.error() is None, result.error()
    expected = {f.path for f in published[("2.18", 64)].files} | \
        {f.path for f in published[("2.18", 128)].files}
    assert set(read_tree(target / "neff")) - {".neffcache-state.json"} == expected

    left = {m.removeprefix("manifests/").removesuffix(".json")
            for m in store.list("manifests/")}
    assert left == {published[(cc, h)].entry_key for cc in ("2.19", "2.21") for h in (64, 128)}
    record = next(iter(store.list("retired/")))
    rec = json.loads(store.read(record))
    assert rec["reason"] == "SDK 2.18 EOL" and "@" in rec["by"] and rec["retired_at"]
    assert cli("verify").code == 0
    swept = cli("gc", "--yes", "--grace", "0", "--force", "--json")
    assert swept.code == 0 and swept.json["deleted_count"] > 0
    after = cli("verify", "--json")
    assert after.code == 0 and after.json["manifests"] == 4


def test_retire_keeps_the_fingerprints_restored_lately(cli: Cli, tmp_path: Path,
                                                       s3_url: str) -> None:
    from datetime import datetime, timezone

    from neffcache.config import REPORTS_TO_STORE
    from neffcache.reports import build_report
    from tests.support.report_writer import write_report

    store = open_store(s3_url)
    published = {}
    for i, cc in enumerate(("2.18", "2.19", "2.21")):
        for j, h in enumerate((64, 128)):
            r = publish_synthetic(store, cell(h), sdk_fingerprint(cc), tmp_path / f"{cc}-{h}",
                                  seed=200 + 10 * i + j, count=5)
            published[(cc, h)] = r.manifest
    policy = ("retire", "--keep-sdk-versions", "1", "--keep-restored-days", "7", "--dry-run",
              "--json")
    no_index = cli(*policy)
    assert no_index.code == 2 and "needs the index" in no_index.stderr
    assert "neffcache reindex" in no_index.stderr
    assert cli("reindex", "--json").code == 0

    old = sdk_fingerprint("2.18")
    used = published[("2.18", 64)]
    doc = {"status": "partial", "exit_code": 3, "cells_requested": [cell(64).id,
           "tiny/compile/999x999/bs1"], "cells_restored": [cell(64).id],
           "cells_missing": ["tiny/compile/999x999/bs1"], "entries": [used.entry_key]}
    report = build_report(doc, fingerprint=old, host="i-0abc", matrix="tiny",
                          now=datetime.now(timezone.utc), nonce="0123abcd", version="0.1.0")
    write_report(report, REPORTS_TO_STORE, s3_url)
    ingested = cli("reports", "ingest", "--json")
    assert ingested.code == 0, ingested.stderr
    assert ingested.json["added"] == 1
    assert cli("reports", "ingest", "--json").json["added"] == 0
    listed = {e["entry_key"]: e for e in cli("ls", "--json").json["entries"]}
    assert listed[used.entry_key]["restore_count"] == 1
    assert listed[published[("2.18", 128)].entry_key]["restore_count"] == 0

    plan = cli(*policy)
    assert plan.code == 0, plan.stderr
    kept = {e["entry_key"]: e["kept_by"] for e in plan.json["keep"]}
    assert kept == {published[("2.21", h)].entry_key: ["sdk_version"] for h in (64, 128)} | \
        {published[("2.18", h)].entry_key: ["restored"] for h in (64, 128)}
    assert {e["entry_key"] for e in plan.json["retire"]} == \
        {published[("2.19", h)].entry_key for h in (64, 128)}
    assert plan.json["policy"]["keep_restored_days"] == 7
    assert plan.json["policy"]["keep_fingerprints"] == [old.key]
    text = cli(*policy[:-1])
    assert text.code == 0, text.stderr
    assert "keep the fingerprints restored in the last 7 day(s) (1)" in text.stdout
    assert f"keep {used.entry_key[:12]}" in text.stdout and "restored lately" in text.stdout
    assert len(list(store.list("manifests/"))) == 6  # a dry run retires nothing
