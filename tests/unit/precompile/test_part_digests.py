"""Part digests of large files: computed by publish in the same pass as the file's sha256,
validated (and, for files over 24 MiB, required) when a manifest is read, planned into ranged
parts, and checked by verify. How a
restore verifies parts with them is in test_restore_fetch_parts."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from neffcache.backends import NEURON
from neffcache.errors import IntegrityError, ManifestError
from neffcache.fingerprint import build_fingerprint
from neffcache.hashing import PartHasher, sha256_bytes, sha256_file_parts
from neffcache.lifecycle.verify import audit_store as verify_store
from neffcache.manifest import (
    FileRecord,
    Manifest,
    PartDigests,
    decode_manifest,
    encode_manifest,
    manifest_digest,
)
from neffcache.matrix import Cell
from neffcache.parts import REQUIRED_OVER, PartPolicy, needs_parts, part_ranges
from neffcache.precompile.publish import plan_publish, publish_entry
from neffcache.restore.plan import BlobGet, BlobPart, FetchGroup, Target, UnitPolicy, plan_units
from neffcache.store import blob_key
from neffcache.store.local import LocalStore

FP = build_fingerprint("neuron", {"target": "trn2"})
MiB = 1 << 20
MiB_PARTS = PartPolicy(part_bytes=MiB, over=MiB)


def cell(h: int = 64) -> Cell:
    return Cell("p", "diffusers:P", "m", "main", "bfloat16", "compile", ("transformer",),
                h, h, 1, 1)


def by_slicing(data: bytes, part: int) -> tuple[str, ...]:
    return tuple(sha256_bytes(data[i:i + part]) for i in range(0, max(1, len(data)), part))


# --- hashing -----------------------------------------------------------------------------------

@pytest.mark.parametrize("size", [0, 1, 999, 1000, 1001, 3 * 1000 + 7])
@pytest.mark.parametrize("piece", [1, 7, 1000, 4096])
def test_part_hasher_matches_slicing_whatever_the_pieces(size: int, piece: int) -> None:
    data = os.urandom(size)
    h = PartHasher(1000)
    for i in range(0, size, piece):
        h.update(data[i:i + piece])
    assert h.digests() == by_slicing(data, 1000)


@pytest.mark.parametrize("size", [MiB - 1, MiB, MiB + 1, 3 * MiB + 123])
def test_file_parts_and_whole_digest_come_from_one_pass(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    (tmp_path / "f").write_bytes(data)
    sha, n, parts = sha256_file_parts(tmp_path / "f", MiB)
    assert (sha, n, parts) == (hashlib.sha256(data).hexdigest(), size, by_slicing(data, MiB))


# --- policy and ranges (pure) ------------------------------------------------------------------

def test_only_distinct_files_larger_than_the_threshold_and_a_part_get_digests() -> None:
    files = [FileRecord("neff", "a", 5 * MiB, "a" * 64), FileRecord("neff", "b", 5 * MiB, "a" * 64),
             FileRecord("neff", "c", 2 * MiB, "c" * 64), FileRecord("neff", "d", MiB, "d" * 64)]
    def shas(policy: PartPolicy) -> list[str]:
        return [f.sha256[0] for f in needs_parts(files, policy)]

    assert shas(PartPolicy(part_bytes=MiB, over=0)) == ["a", "c"]
    assert shas(PartPolicy(part_bytes=MiB, over=3 * MiB)) == ["a"]
    # A threshold below the part size would record one-part files, which the manifest refuses.
    assert needs_parts(files, PartPolicy(part_bytes=8 * MiB, over=0)) == ()


@pytest.mark.parametrize("kwargs", [{"over": REQUIRED_OVER + 1}, {"part_bytes": 32 * MiB},
                                    {"part_bytes": 3 * MiB}, {"part_bytes": MiB // 2}])
def test_a_policy_that_would_leave_required_digests_out_or_be_refused_is_an_error(
        kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="expected"):
        PartPolicy(**kwargs)


def test_part_ranges_cover_the_file_in_order() -> None:
    assert part_ranges(10, 4) == ((0, 4), (4, 4), (8, 2))
    assert part_ranges(8, 4) == ((0, 4), (4, 4))
    assert part_ranges(0, 4) == ((0, 0),)


# --- manifest ----------------------------------------------------------------------------------

def files_and_parts() -> tuple[tuple[FileRecord, ...], PartDigests]:
    big = FileRecord("neff", "graph.neff", 3 * MiB + 5, "b" * 64)
    small = FileRecord("neff", "op.neff", 100, "c" * 64)
    return (big, small), PartDigests(big.sha256, MiB, tuple(f"{i:064x}" for i in range(4)))


def test_manifest_parts_round_trip_and_absent_when_empty() -> None:
    files, parts = files_and_parts()
    plain = Manifest(cell(), FP, files)
    assert b'"parts"' not in encode_manifest(plain)  # older manifests stay byte-identical
    m = Manifest(cell(), FP, files, parts=(parts,))
    assert decode_manifest(encode_manifest(m)) == m
    assert decode_manifest(encode_manifest(m)).parts[0].digests[3] == f"{3:064x}"


@pytest.mark.parametrize("change,needle", [
    ({"sha256": "0" * 64}, "not a file of this entry"),
    ({"sha256": "c" * 64}, "part_size"),  # op.neff is 100 bytes: not larger than a part
    ({"part_size": 3 * MiB}, "power of two"),
    ({"part_size": 1 << 19}, "power of two"),
    ({"part_size": True}, "power of two"),
    ({"part_size": 4 * MiB}, "smaller than the file"),
    ({"digests": [f"{i:064x}" for i in range(3)]}, "expected 4 sha256"),
    ({"digests": [f"{i:064x}" for i in range(5)]}, "expected 4 sha256"),
    ({"digests": ["X" * 64] * 4}, "expected 4 sha256"),
    ({"digests": "abc"}, "expected 4 sha256"),
])
def test_hostile_part_tables_are_refused(change: dict[str, Any], needle: str) -> None:
    files, parts = files_and_parts()
    doc = json.loads(encode_manifest(Manifest(cell(), FP, files, parts=(parts,))))
    doc.pop("manifest_sha256", None)  # the field checks are under test, not the digest
    doc["parts"][0].update(change)
    with pytest.raises(ManifestError, match=needle):
        decode_manifest(json.dumps(doc))


def required_case() -> tuple[FileRecord, FileRecord, PartDigests]:
    big = FileRecord("neff", "ab/graph.neff", REQUIRED_OVER + 1, "b" * 64)
    other = FileRecord("neff", "other.neff", 3 * MiB, "c" * 64)
    return big, other, PartDigests(big.sha256, 16 * MiB, (f"{1:064x}", f"{2:064x}"))


def test_a_file_over_24_mib_without_part_digests_is_refused_by_name() -> None:
    big, other, parts = required_case()
    other_parts = PartDigests(other.sha256, MiB, tuple(f"{i:064x}" for i in range(3)))
    for lacking in (Manifest(cell(), FP, (big, other)),
                    Manifest(cell(), FP, (big, other), parts=(other_parts,))):
        with pytest.raises(ManifestError) as err:
            decode_manifest(encode_manifest(lacking), source="manifests/k.json")
        assert str(err.value) == (
            f"manifests/k.json: file neff/ab/graph.neff ({REQUIRED_OVER + 1} bytes) has no part "
            f"digests: files over {REQUIRED_OVER} bytes need a 'parts' record (sha256 "
            f"{big.sha256[:12]}, a digest per part)")
    whole = Manifest(cell(), FP, (big, other), parts=(parts,))
    assert decode_manifest(encode_manifest(whole)) == whole
    # 24 MiB exactly, or less, needs none.
    at_limit = Manifest(cell(), FP, (FileRecord("neff", "g", REQUIRED_OVER, "d" * 64), other))
    assert decode_manifest(encode_manifest(at_limit)) == at_limit


def test_a_file_over_24_mib_at_two_paths_needs_one_record() -> None:
    big, _other, parts = required_case()
    twice = Manifest(cell(), FP, (big, FileRecord("neff", "copy.neff", big.size, big.sha256)),
                     parts=(parts,))
    assert decode_manifest(encode_manifest(twice)) == twice


def test_a_second_record_for_one_file_and_a_non_list_are_refused() -> None:
    files, parts = files_and_parts()
    doc = json.loads(encode_manifest(Manifest(cell(), FP, files, parts=(parts,))))
    doc.pop("manifest_sha256", None)  # the field checks are under test, not the digest
    doc["parts"].append(doc["parts"][0])
    with pytest.raises(ManifestError, match="second record"):
        decode_manifest(json.dumps(doc))
    doc["parts"] = {"a": 1}
    with pytest.raises(ManifestError, match="parts: expected a list"):
        decode_manifest(json.dumps(doc))


# --- planning (pure) ---------------------------------------------------------------------------

def group(i: int, size: int) -> FetchGroup:
    sha = f"{i:064x}"
    return FetchGroup(sha, size, (Target("neff", f"g{i}", size, sha, 0o644),))


def test_plan_splits_at_the_manifests_part_size_and_attaches_each_digest() -> None:
    with_digests, without, small = group(1, 3 * MiB + 5), group(2, 3 * MiB), group(3, MiB)
    parts = PartDigests(with_digests.sha256, MiB, tuple(f"{i:064x}" for i in range(10, 14)))
    units = plan_units([with_digests, without, small], [], UnitPolicy(), [parts])
    split = [(u.group.sha256, u.start, u.length, u.digest) for u in units
             if isinstance(u, BlobPart)]
    assert split == [(with_digests.sha256, i * MiB, MiB if i < 3 else 5, f"{10 + i:064x}")
                     for i in range(4)]
    # Blobs without part digests (decoding allows that only up to 24 MiB) are one GET each.
    assert [u.group.sha256 for u in units if isinstance(u, BlobGet)] == [without.sha256,
                                                                         small.sha256]


def test_digests_for_a_file_of_another_size_are_not_used() -> None:
    g = group(1, 3 * MiB + 5)
    wrong = PartDigests(g.sha256, MiB, tuple(f"{i:064x}" for i in range(3)))  # for 3 MiB
    assert plan_units([g], [], UnitPolicy(), [wrong]) == (BlobGet(g),)  # verified whole


# --- publish and verify ------------------------------------------------------------------------

@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    root = tmp_path / "src"
    root.mkdir()
    files = {"graph.neff": os.urandom(2 * MiB + 9), "op.neff": os.urandom(4096),
             "same-graph.neff": b""}
    files["same-graph.neff"] = files["graph.neff"]
    for name, data in files.items():
        (root / name).write_bytes(data)
    return root, files


def test_publish_records_digests_of_each_large_blob_once(tmp_path: Path, source) -> None:  # type: ignore[no-untyped-def]
    root, files = source
    store = LocalStore(tmp_path / "store")
    r = publish_entry(store, cell(), FP, NEURON, {"neff": root}, parting=MiB_PARTS)
    assert r.manifest.parts == (PartDigests(sha256_bytes(files["graph.neff"]), MiB,
                                            by_slicing(files["graph.neff"], MiB)),)
    assert decode_manifest(store.read(next(iter(store.list("manifests/"))))) == r.manifest
    # The default policy digests files over 24 MiB only.
    assert publish_entry(LocalStore(tmp_path / "s3"), cell(), FP, NEURON,
                         {"neff": root}).manifest.parts == ()


def test_a_large_file_changed_before_its_parts_are_digested_is_refused(tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                       source) -> None:
    """The blob is already stored (another entry), so the upload pass does not read the file;
    the part pass must notice it no longer has the planned sha256."""
    root, files = source
    store = LocalStore(tmp_path / "store")
    publish_entry(store, cell(), FP, NEURON, {"neff": root})  # 2 MiB: no part digests
    planned = plan_publish(NEURON, {"neff": root})
    changed = bytearray(files["graph.neff"])
    changed[-1] ^= 1
    for name in ("graph.neff", "same-graph.neff"):  # either copy may be the one read
        (root / name).write_bytes(bytes(changed))
    with pytest.raises(IntegrityError, match="changed while being published"):
        publish_entry(store, cell(128), FP, NEURON, {"neff": root}, files=planned,
                      parting=MiB_PARTS)
    assert len(list(store.list("manifests/"))) == 1  # only the first entry's
    assert list(store.list("pending/")) == []


def test_verify_reports_part_digests_that_do_not_match_the_blob(tmp_path: Path,  # type: ignore[no-untyped-def]
                                                               source) -> None:
    root, _files = source
    store = LocalStore(tmp_path / "store")
    r = publish_entry(store, cell(), FP, NEURON, {"neff": root}, parting=MiB_PARTS)
    assert verify_store(store).problems == ()
    key = next(iter(store.list("manifests/")))
    doc = json.loads(store.read(key))
    doc.pop("manifest_sha256", None)  # the field checks are under test, not the digest
    doc["parts"][0]["digests"][1] = "0" * 64
    (store.root / key).chmod(0o644)
    (store.root / key).write_bytes(encode_manifest(decode_manifest(json.dumps(doc))))
    # as its publisher wrote it: the cell pointer pins this manifest (no rewrite to report)
    pointer = next(store.root.glob("cells/*/*.json"))
    pin = json.loads(pointer.read_bytes())
    pin["manifest_sha256"] = manifest_digest(decode_manifest(store.read(key)))
    pointer.chmod(0o644)
    pointer.write_text(json.dumps(pin))
    bad = verify_store(store)
    assert [(p.kind, p.key) for p in bad.problems] == [("manifest", key)]
    assert "part 2 of 3" in bad.problems[0].message
    assert verify_store(store, quick=True).problems == ()  # quick reads no blob bytes
    # A corrupt blob is reported as such, once, not as a part mismatch too.
    blob = store.root / blob_key(r.manifest.parts[0].sha256)
    blob.chmod(0o644)
    blob.write_bytes(b"x" + blob.read_bytes()[1:])
    assert [p.kind for p in verify_store(store).problems] == ["sha256"]


def test_verify_reports_a_manifest_lacking_required_part_digests(tmp_path: Path) -> None:
    root = tmp_path / "src"
    root.mkdir()
    (root / "graph.neff").write_bytes(os.urandom(REQUIRED_OVER + 1))
    store = LocalStore(tmp_path / "store")
    r = publish_entry(store, cell(), FP, NEURON, {"neff": root})
    assert [len(p.digests) for p in r.manifest.parts] == [2]  # publish writes them by default
    assert verify_store(store, quick=True).problems == ()
    key = next(iter(store.list("manifests/")))
    doc = json.loads(store.read(key))
    doc.pop("manifest_sha256", None)  # the field checks are under test, not the digest
    del doc["parts"]
    (store.root / key).chmod(0o644)
    (store.root / key).write_text(json.dumps(doc))
    for quick in (True, False):
        bad = verify_store(store, quick=quick)
        assert [(p.kind, p.key) for p in bad.problems] == [("manifest", key)]
        assert "neff/graph.neff" in bad.problems[0].message
        assert "has no part digests" in bad.problems[0].message
