"""Bundles: export → read back as a store; every damaged, foreign or hostile bundle refused."""

from __future__ import annotations

import json
import random
import tarfile
from pathlib import Path

import pytest

from neffcache.documents import digest_of
from neffcache.errors import IntegrityError, ManifestError, UsageError
from neffcache.hashing import sha256_bytes
from neffcache.lifecycle.bundle import write_bundle
from neffcache.lifecycle.copy import apply_copy
from neffcache.lifecycle.entry_select import read_manifests, select_entry_keys
from neffcache.store import TOC_NAME, BundleStore, Member, Toc, blob_key, decode_toc, encode_toc
from tests.support.lifecycle import bundle_with, cell, publish_synthetic, sdk_fingerprint, write_tar
from tests.support.memory_store import MemoryStore


@pytest.fixture
def bundle(tmp_path: Path) -> tuple[Path, str, MemoryStore]:
    store = MemoryStore()
    for i, h in enumerate((64, 128)):
        publish_synthetic(store, cell(h), sdk_fingerprint("2.19"), tmp_path / f"c{h}", seed=i)
    manifests = read_manifests(store, select_entry_keys(store, None))
    path = tmp_path / "neff.bundle"
    digest, _ = write_bundle(store, manifests, path)
    return path, digest, store


def test_export_then_import_gives_the_same_objects(bundle: tuple[Path, str, MemoryStore]
                                                   ) -> None:
    path, digest, store = bundle
    with BundleStore(path, expect_sha256=digest) as b:
        assert b.verify_all() > 0
        assert sorted(b.list("blobs/")) == sorted(store.list("blobs/"))
        target = MemoryStore()
        result = apply_copy(b, target, read_manifests(b, [e.entry_key for e in b.toc.entries]))
    assert result.entries_copied == 2 and result.blobs_copied == len(list(store.list("blobs/")))
    for prefix in ("blobs/", "manifests/", "cells/", "packs/"):
        assert {k: store.objects[k] for k in store.list(prefix)} == \
            {k: target.objects[k] for k in target.list(prefix)}
    assert not list(target.list("pending/"))


def test_gzip_bundle_reads_the_same(tmp_path: Path, bundle: tuple[Path, str, MemoryStore]
                                    ) -> None:
    _, digest, store = bundle
    gz = tmp_path / "neff.bundle.gz"
    gz_digest, _ = write_bundle(store, read_manifests(store, select_entry_keys(store, None)),
                                 gz, gzip=True)
    assert gz.read_bytes()[:2] == b"\x1f\x8b"
    with BundleStore(gz, expect_sha256=gz_digest) as b:
        b.verify_all()
        key = next(iter(b.list("blobs/")))
        assert b.read(key) == store.objects[key]


def test_every_single_bit_flip_is_refused(tmp_path: Path,
                                          bundle: tuple[Path, str, MemoryStore]) -> None:
    path, _, _ = bundle
    data = path.read_bytes()
    rng = random.Random(7)
    for _ in range(60):
        pos = rng.randrange(len(data))
        bad = bytearray(data)
        bad[pos] ^= 1 << rng.randrange(8)
        (tmp_path / "bad").write_bytes(bad)
        with pytest.raises(IntegrityError):
            with BundleStore(tmp_path / "bad") as b:
                b.verify_all()


def test_a_flip_inside_the_toc_is_caught_by_the_expected_digest(
        tmp_path: Path, bundle: tuple[Path, str, MemoryStore]) -> None:
    path, digest, _ = bundle
    data = bytearray(path.read_bytes())
    at = data.index(b'"created_at":"') + len(b'"created_at":"')
    data[at] = ord("1") if data[at] != ord("1") else ord("2")  # still valid JSON
    (tmp_path / "bad").write_bytes(data)
    with pytest.raises(IntegrityError, match="not the expected"):
        BundleStore(tmp_path / "bad", expect_sha256=digest)


@pytest.mark.parametrize("where", ["half", "inside last member", "inside end marker"])
def test_truncated_bundle_is_refused(tmp_path: Path, bundle: tuple[Path, str, MemoryStore],
                                     where: str) -> None:
    path, _, _ = bundle
    data = path.read_bytes()
    with tarfile.open(path) as tar:
        last = tar.getmembers()[-1]
    end = last.offset_data + last.size
    cut = {"half": len(data) // 2, "inside last member": end - 1,
           "inside end marker": -(-end // 512) * 512 + 700}[where]
    (tmp_path / "cut").write_bytes(data[:cut])
    with pytest.raises(IntegrityError):
        with BundleStore(tmp_path / "cut") as b:
            b.verify_all()


def test_foreign_files_are_refused(tmp_path: Path) -> None:
    write_tar(tmp_path / "plain.tar", [("hello.txt", b"hi")])
    with pytest.raises(IntegrityError, match="not a neffcache bundle"):
        BundleStore(tmp_path / "plain.tar")
    (tmp_path / "junk").write_bytes(b"x" * 3000)
    with pytest.raises(IntegrityError):
        BundleStore(tmp_path / "junk")
    with pytest.raises(UsageError):
        BundleStore(tmp_path / "absent")


def test_names_that_are_not_store_keys_are_refused(tmp_path: Path) -> None:
    data = b"evil"
    for name in ("../escape", "blobs/sha256/../../../etc/passwd", "/etc/passwd",
                 f"blobs/sha256/{sha256_bytes(data)[:2]}/{'0' * 64}"):
        bundle_with(tmp_path / "b", [(name, data)])
        with pytest.raises(IntegrityError):
            BundleStore(tmp_path / "b")


def test_members_the_toc_does_not_list_or_misses_are_refused(tmp_path: Path) -> None:
    data = b"some blob"
    good = (blob_key(sha256_bytes(data)), data)
    bundle_with(tmp_path / "extra", [good, ("../escape", b"x")], listed=[good])
    with pytest.raises(IntegrityError, match="foreign member"):
        BundleStore(tmp_path / "extra")
    bundle_with(tmp_path / "missing", [], listed=[good])
    with pytest.raises(IntegrityError, match="absent"):
        BundleStore(tmp_path / "missing")


def test_links_and_devices_are_refused(tmp_path: Path) -> None:
    key = blob_key(sha256_bytes(b""))
    for kind in (tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE, tarfile.DIRTYPE):
        link = tarfile.TarInfo(key)
        link.type, link.linkname = kind, "/etc/passwd"
        toc = Toc((), (Member(key, 0, sha256_bytes(b"")),))
        write_tar(tmp_path / "l", [(TOC_NAME, encode_toc(toc))], extra=[link])
        with pytest.raises(IntegrityError, match="links, directories and devices"):
            BundleStore(tmp_path / "l")


def test_a_hostile_manifest_inside_a_consistent_bundle_is_refused(
        tmp_path: Path, bundle: tuple[Path, str, MemoryStore]) -> None:
    _, _, store = bundle
    key = next(iter(store.list("manifests/")))
    doc = json.loads(store.objects[key])
    doc["files"][0]["path"] = "../../escape.neff"
    del doc["manifest_sha256"]  # a forger recomputes the self-digest: the path check must hold
    doc["manifest_sha256"] = digest_of(doc)
    bundle_with(tmp_path / "h", [(key, json.dumps(doc).encode())])
    with BundleStore(tmp_path / "h") as b:
        b.verify_all()  # consistent with its TOC: the manifest itself is what is refused
        with pytest.raises(ManifestError, match=r"'\.\.'"):
            read_manifests(b, [key[len("manifests/"):-len(".json")]])


def test_toc_validation_names_the_problem() -> None:
    with pytest.raises(IntegrityError, match="listed twice"):
        decode_toc(json.dumps({"format": "neffcache-bundle", "schema_version": 1,
                               "entries": [], "members": [[f"manifests/{'a' * 64}.json", 1,
                                                           "b" * 64]] * 2}).encode())
    with pytest.raises(IntegrityError, match="schema_version"):
        decode_toc(b'{"format": "neffcache-bundle", "schema_version": 9}')


def test_a_bundle_is_read_only(bundle: tuple[Path, str, MemoryStore]) -> None:
    import io

    with BundleStore(bundle[0]) as b, pytest.raises(UsageError, match="read-only"):
        b.put("blobs/sha256/aa/x", io.BytesIO(b""))
