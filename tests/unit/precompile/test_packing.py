"""Packs of small blobs, ranged/part fetches and the local no-op path (local/memory stores)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from neffcache.backends import NEURON
from neffcache.errors import ManifestError, exit_code_for
from neffcache.fingerprint import build_fingerprint
from neffcache.hashing import sha256_bytes
from neffcache.manifest import (
    FileRecord,
    Manifest,
    PackMember,
    PackRecord,
    PartDigests,
    decode_manifest,
    encode_manifest,
)
from neffcache.matrix import Cell
from neffcache.parts import PartPolicy
from neffcache.precompile.packing import PackPolicy, plan_packs
from neffcache.precompile.publish import publish_entry
from neffcache.restore.local import LOCAL_ENTRIES, restore_local
from neffcache.restore.plan import (
    BlobGet,
    BlobPart,
    FetchGroup,
    PackRun,
    Target,
    UnitPolicy,
    plan_units,
)
from neffcache.restore.run import restore_cells
from neffcache.store import blob_key
from neffcache.store.base import pack_key
from neffcache.store.local import LocalStore
from tests.support.faulty_store import FaultyStore
from tests.support.memory_store import MemoryStore
from tests.support.synthetic import make_neff_cache, read_tree

FP = build_fingerprint("neuron", {"target": "trn2"})
SMALL_PACKS = PackPolicy(member_max=64 << 10, min_files=4, target=32 << 10, min_bytes=8 << 10,
                         max_bytes=64 << 10)


def cell(h: int = 64) -> Cell:
    return Cell("p", "diffusers:P", "m", "main", "bfloat16", "compile", ("transformer",),
                h, h, 1, 1)


def rec(i: int, size: int = 1000) -> FileRecord:
    return FileRecord("neff", f"f{i}.neff", size, sha256_bytes(f"{i}".encode()), 0o644)


def tree(root: Path) -> dict[str, bytes]:
    out = read_tree(root)
    out.pop(".neffcache-state.json", None)
    return out


def temps(root: Path) -> list[Path]:
    return [p for p in root.rglob(".neffcache-*") if p.name.endswith(".tmp")]


@pytest.fixture
def packed(tmp_path: Path) -> tuple[LocalStore, Manifest, dict[str, bytes]]:
    cache = make_neff_cache(tmp_path / "src", seed=9, count=60, large=1,
                            small_size=(1000, 9000), duplicate_ratio=0.1)
    store = LocalStore(tmp_path / "store")
    r = publish_entry(store, cell(), FP, NEURON, {"neff": cache.root}, packing=SMALL_PACKS)
    assert r.manifest.packs and r.packs_uploaded == len(r.manifest.packs)
    return store, r.manifest, cache.files


# --- planning (pure) ---------------------------------------------------------------------------

def test_plan_packs_is_deterministic_deduped_and_bounded() -> None:
    files = [rec(i, 1000 + 37 * i) for i in range(300)] + [rec(5, 1000 + 37 * 5)]
    files.append(FileRecord("neff", "big.neff", 1 << 20, "f" * 64))
    policy = PackPolicy(member_max=64 << 10, min_files=4, target=40 << 10, min_bytes=4 << 10,
                        max_bytes=80 << 10)
    packs = plan_packs(files, policy)
    assert packs == plan_packs(list(reversed(files)), policy)
    members = [f.sha256 for p in packs for f in p]
    assert len(members) == len(set(members)) == 300  # each blob once, the large one left out
    assert members == sorted(members)
    assert all(sum(f.size for f in p) <= policy.max_bytes for p in packs)
    assert len(packs) > 3
    assert plan_packs(files[:3], policy) == ()  # too few small files: one request each is fine


def test_pack_boundaries_depend_on_contents_so_similar_entries_share_packs() -> None:
    policy = PackPolicy(member_max=64 << 10, min_files=4, target=20 << 10, min_bytes=2 << 10,
                        max_bytes=200 << 10)
    base = [rec(i, 1000 + (i * 7919) % 3000) for i in range(400)]
    a = plan_packs(base, policy)
    b = plan_packs([*base, rec(10_000, 1500)], policy)  # one new small file
    assert len(set(a) & set(b)) >= len(a) - 2


def test_plan_units_coalesces_pack_runs_and_splits_large_blobs() -> None:
    def group(i: int, size: int) -> FetchGroup:
        sha = f"{i:064x}"
        return FetchGroup(sha, size, (Target("neff", f"g{i}", size, sha, 0o644),))

    groups = [group(i, 100) for i in range(5)] + [group(9, 1000), group(10, 50),
                                                   group(11, 500)]
    members = (PackMember(groups[0].sha256, 0, 100), PackMember(groups[1].sha256, 100, 100),
               PackMember("e" * 64, 200, 5000),  # not needed: a gap
               PackMember(groups[2].sha256, 5200, 100), PackMember(groups[3].sha256, 5300, 100),
               PackMember(groups[4].sha256, 5400, 100))
    pack = PackRecord("a" * 64, 5500, members)
    policy = UnitPolicy(run_bytes=350, gap_bytes=1000)
    digests = [PartDigests(groups[5].sha256, 300, tuple(f"{i:064x}" for i in range(4))),
               PartDigests(groups[7].sha256, 300, tuple(f"{i:064x}" for i in range(4, 6)))]
    units = plan_units(groups, [pack], policy, digests)
    runs = [u for u in units if isinstance(u, PackRun)]
    assert [(r.start, r.length) for r in runs] == [(0, 200), (5200, 300)]  # gap > 1000: split
    parts = [u for u in units if isinstance(u, BlobPart)]
    # Split blobs first, the largest first (the longest work), parts in order.
    assert [(p.group.sha256, p.index, p.start, p.length, p.digest) for p in parts] == [
        (groups[5].sha256, 0, 0, 300, f"{0:064x}"), (groups[5].sha256, 1, 300, 300, f"{1:064x}"),
        (groups[5].sha256, 2, 600, 300, f"{2:064x}"), (groups[5].sha256, 3, 900, 100, f"{3:064x}"),
        (groups[7].sha256, 0, 0, 300, f"{4:064x}"), (groups[7].sha256, 1, 300, 200, f"{5:064x}")]
    assert units[:len(parts)] == tuple(parts)
    assert [u.group.sha256 for u in units if isinstance(u, BlobGet)] == [groups[6].sha256]
    # The rest follow their first group's place in the fetch list.
    assert units.index(runs[0]) < units.index(runs[1])


# --- manifest ----------------------------------------------------------------------------------

def test_manifest_packs_round_trip_and_absent_when_empty() -> None:
    files = tuple(sorted((rec(i) for i in range(3)), key=lambda f: f.path))
    plain = Manifest(cell(), FP, files)
    assert b'"packs"' not in encode_manifest(plain)  # older manifests stay byte-identical
    members = (PackMember(files[0].sha256, 0, 1000), PackMember(files[2].sha256, 1000, 1000))
    m = Manifest(cell(), FP, files, packs=(PackRecord("c" * 64, 2000, members),))
    assert decode_manifest(encode_manifest(m)) == m


@pytest.mark.parametrize("members,needle", [
    ([["0" * 64, 0, 1000]], "not a file of this entry"),
    ([[sha256_bytes(b"0"), 0, 999]], "not a file of this entry"),
    ([[sha256_bytes(b"0"), 0, 1000], [sha256_bytes(b"1"), 999, 1000]], "overlaps"),
    ([[sha256_bytes(b"0"), 1500, 1000]], "runs past"),
    ([["x", 0, 1]], "not a file of this entry"),
    ([], "non-empty"),
])
def test_hostile_pack_tables_are_refused(members: list, needle: str) -> None:  # type: ignore[type-arg]
    files = tuple(sorted((rec(i) for i in range(3)), key=lambda f: f.path))
    doc = json.loads(encode_manifest(Manifest(cell(), FP, files)))
    doc.pop("manifest_sha256", None)  # the field checks are under test, not the digest
    doc["packs"] = [{"sha256": "c" * 64, "size": 2000, "members": members}]
    with pytest.raises(ManifestError, match=needle):
        decode_manifest(json.dumps(doc))


# --- publish and restore -----------------------------------------------------------------------

def test_packed_round_trip_reads_packs_not_blobs(tmp_path: Path, packed) -> None:  # type: ignore[no-untyped-def]
    store, manifest, files = packed
    faulty = FaultyStore(store)
    r = restore_cells(faulty, [cell()], NEURON, FP, tmp_path / "t", workers=3)
    assert r.error() is None and r.files_fetched == len(files)
    assert tree(tmp_path / "t" / "neff") == files
    assert temps(tmp_path / "t") == []
    opened = [k for m, k in faulty.calls if m == "open"]
    packed_shas = {m.sha256 for p in manifest.packs for m in p.members}
    assert {k for k in opened if k.startswith("packs/")} == \
        {pack_key(p.sha256) for p in manifest.packs}
    assert not [k for k in opened if k.startswith("blobs/") and k.rsplit("/", 1)[1]
                in packed_shas]
    assert len(opened) < len({f.sha256 for f in manifest.files}) // 2  # far fewer requests


def test_corrupt_packed_member_without_its_blob_is_exit_4_and_never_installed(  # type: ignore[no-untyped-def]
        tmp_path: Path, packed) -> None:
    store, manifest, files = packed
    pack = manifest.packs[0]
    victim = pack.members[len(pack.members) // 2]
    path = store.root / pack_key(pack.sha256)
    data = bytearray(path.read_bytes())
    data[victim.offset + victim.size // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    store.delete(blob_key(victim.sha256))  # with its blob, the member comes from there

    r = restore_cells(store, [cell()], NEURON, FP, tmp_path / "t", workers=2)
    err = r.error()
    assert type(err).__name__ == "IntegrityError"
    bad = {f.path: f for f in r.failures}
    wanted = {p for p, b in files.items() if sha256_bytes(b) == victim.sha256}
    assert set(bad) == wanted and all("corrupt" in f.message for f in bad.values())
    got = tree(tmp_path / "t" / "neff")
    assert not wanted & set(got)
    assert got == {p: b for p, b in files.items() if p not in wanted}
    assert temps(tmp_path / "t") == [] and r.restored == ()
    assert exit_code_for(err) == 4  # type: ignore[arg-type]


def test_truncated_pack_fails_the_members_past_the_end(tmp_path: Path, packed) -> None:  # type: ignore[no-untyped-def]
    store, manifest, files = packed
    pack = max(manifest.packs, key=lambda p: len(p.members))
    assert len(pack.members) >= 3
    cut = pack.members[1].offset + 3
    path = store.root / pack_key(pack.sha256)
    path.write_bytes(path.read_bytes()[:cut])
    r = restore_cells(store, [cell()], NEURON, FP, tmp_path / "t", workers=2)
    lost = {m.sha256 for m in pack.members[1:]}
    failed = {f.path for f in r.failures}
    assert failed == {p for p, b in files.items() if sha256_bytes(b) in lost}
    assert all("truncated" in f.message for f in r.failures)
    assert type(r.error()).__name__ == "IntegrityError"
    assert temps(tmp_path / "t") == []


def test_missing_pack_falls_back_to_the_blobs(tmp_path: Path, packed) -> None:  # type: ignore[no-untyped-def]
    store, manifest, files = packed
    for p in manifest.packs:
        store.delete(pack_key(p.sha256))
    r = restore_cells(store, [cell()], NEURON, FP, tmp_path / "t", workers=2)
    assert r.error() is None and tree(tmp_path / "t" / "neff") == files


def test_dedupe_across_entries_blobs_once_shared_files_fetched_once(tmp_path: Path) -> None:
    a = make_neff_cache(tmp_path / "a", seed=11, count=40, large=0, duplicate_ratio=0)
    b = make_neff_cache(tmp_path / "b", seed=11, count=40, large=0, duplicate_ratio=0)
    for i in range(6):  # entry b: the same small files plus a few of its own
        (b.root / f"own{i}.neff").write_bytes(os.urandom(3000 + i))
    (a.root / "only-a.neff").write_bytes(b"a's own graph")
    store = MemoryStore()
    ra = publish_entry(store, cell(64), FP, NEURON, {"neff": a.root}, packing=SMALL_PACKS)
    rb = publish_entry(store, cell(128), FP, NEURON, {"neff": b.root}, packing=SMALL_PACKS)
    assert (rb.blobs_uploaded, rb.blobs_skipped) == (6, 40)
    assert len(list(store.list("blobs/"))) == 40 + 1 + 6  # content-addressed: each blob once
    shared_packs = {p.sha256 for p in ra.manifest.packs} & {p.sha256 for p in rb.manifest.packs}
    assert rb.packs_uploaded == len(rb.manifest.packs) - len(shared_packs)

    faulty = FaultyStore(store)
    r = restore_cells(faulty, [cell(64), cell(128)], NEURON, FP, tmp_path / "t", workers=2)
    assert r.error() is None, r.failures[:3]
    want = {**b.files, **{p: (b.root / p).read_bytes() for p in
                          (f"own{i}.neff" for i in range(6))}, "only-a.neff": b"a's own graph"}
    assert tree(tmp_path / "t" / "neff") == want
    # Each distinct small blob came over the wire once, from whichever pack held it first.
    assert r.bytes_fetched == sum(len(v) for v in {sha256_bytes(x): x for x in
                                                   want.values()}.values())
    # Entry b alone: from its own packs.
    alone = restore_cells(store, [cell(128)], NEURON, FP, tmp_path / "u", workers=2)
    assert alone.error() is None and alone.files_fetched == 46


def test_large_blob_in_parts_round_trip_and_corruption(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "ab" / "cd").mkdir(parents=True)
    big = os.urandom((5 << 20) + 12345)
    (src / "ab" / "cd" / "big.neff").write_bytes(big)
    (src / "copy.neff").write_bytes(big)  # the same bytes at a second path: copied locally
    (src / "small.neff").write_bytes(b"tiny")
    store = LocalStore(tmp_path / "store")
    publish_entry(store, cell(), FP, NEURON, {"neff": src},
                  parting=PartPolicy(part_bytes=1 << 20, over=2 << 20))
    faulty = FaultyStore(store)
    r = restore_cells(faulty, [cell()], NEURON, FP, tmp_path / "t", workers=4)
    assert r.error() is None and tree(tmp_path / "t" / "neff") == tree(src)
    assert len([k for m, k in faulty.calls if m == "open" and
                k == blob_key(sha256_bytes(big))]) == 6  # six ranged parts, one blob

    path = store.root / blob_key(sha256_bytes(big))
    path.write_bytes(big[:3 << 20] + bytes([big[3 << 20] ^ 1]) + big[(3 << 20) + 1:])
    r2 = restore_cells(store, [cell()], NEURON, FP, tmp_path / "t2", workers=4)
    assert type(r2.error()).__name__ == "IntegrityError"
    assert "part 4 of 6" in r2.failures[0].message
    assert {f.path for f in r2.failures} == {"ab/cd/big.neff", "copy.neff"}
    assert not (tmp_path / "t2" / "neff" / "ab" / "cd" / "big.neff").exists()
    assert (tmp_path / "t2" / "neff" / "small.neff").read_bytes() == b"tiny"
    assert temps(tmp_path / "t2") == []


def test_noop_restore_needs_no_store_and_notices_changes(tmp_path: Path, packed) -> None:  # type: ignore[no-untyped-def]
    store, manifest, files = packed
    target = tmp_path / "t"
    assert restore_local([cell()], NEURON, FP, target, store_url=store.url) is None
    assert restore_cells(store, [cell()], NEURON, FP, target).error() is None
    assert (target / LOCAL_ENTRIES / f"{manifest.entry_key}.json").is_file()

    again = restore_local([cell()], NEURON, FP, target, store_url=store.url)
    assert again is not None and again.error() is None
    assert (again.files_fetched, again.files_skipped) == (0, len(files))
    assert again.to_json()["cells_restored"] == [cell().id]

    victim = sorted(files)[0]
    (target / "neff" / victim).write_bytes(b"tampered")
    assert restore_local([cell()], NEURON, FP, target, store_url=store.url) is None
    fixed = restore_cells(store, [cell()], NEURON, FP, target)
    assert fixed.files_fetched == 1 and (target / "neff" / victim).read_bytes() == files[victim]
    (target / LOCAL_ENTRIES / f"{manifest.entry_key}.json").write_bytes(b"{not json")
    assert restore_local([cell()], NEURON, FP, target, store_url=store.url) is None


def test_noop_with_entries_sharing_a_path_is_planned_locally(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    for h, body in ((64, b"from the 64 cell"), (128, b"from the 128 cell")):
        src = tmp_path / f"src{h}"
        src.mkdir()
        (src / "k.so").write_bytes(body)
        (src / f"own{h}.neff").write_bytes(body * 3)
        publish_entry(store, cell(h), FP, NEURON, {"neff": src})
    target = tmp_path / "t"
    assert restore_cells(store, [cell(64), cell(128)], NEURON, FP, target).error() is None
    again = restore_local([cell(64), cell(128)], NEURON, FP, target, store_url=store.url)
    assert again is not None and again.error() is None
    assert again.files_skipped == 3 and len(again.conflicts) == 1
    assert again.to_json()["entries"] == [m.entry_key for m in again.resolution.found]


def test_window_serves_ranges_across_reads() -> None:
    import io

    from neffcache.restore import fetch as restore_files

    data = os.urandom(3 * restore_files.CHUNK + 123)
    w = restore_files.Window(io.BytesIO(data[100:]), 100)
    for off, size in ((100, 10), (200, restore_files.CHUNK), (restore_files.CHUNK + 500, 7),
                      (2 * restore_files.CHUNK - 3, restore_files.CHUNK + 50)):
        assert bytes(w.take(off, size)) == data[off:off + size]
    assert bytes(w.take(len(data) - 5, 100)) == data[-5:]  # short: the stream ended
    assert w.take(len(data) + 10, 5) == b""


def test_modes_survive_a_restrictive_umask(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name, mode in (("exe.neff", 0o755), ("shared.neff", 0o664), ("private.neff", 0o600)):
        (src / name).write_bytes(name.encode())
        os.chmod(src / name, mode)
    store = LocalStore(tmp_path / "store")
    publish_entry(store, cell(), FP, NEURON, {"neff": src})
    old = os.umask(0o077)
    try:
        from neffcache.restore import install as restore_files

        restore_files._UMASK = -1  # read again under this umask
        r = restore_cells(store, [cell()], NEURON, FP, tmp_path / "t")
    finally:
        os.umask(old)
        restore_files._UMASK = -1
    assert r.error() is None
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "t" / "neff").iterdir()
             if p.suffix == ".neff"}
    assert modes == {"exe.neff": 0o755, "shared.neff": 0o664, "private.neff": 0o600}


def test_verify_checks_packs_too(tmp_path: Path, packed) -> None:  # type: ignore[no-untyped-def]
    from neffcache.lifecycle.verify import audit_store as verify_store

    store, manifest, _files = packed
    ok = verify_store(store)
    assert ok.error() is None and ok.packs == len(manifest.packs)
    pack = manifest.packs[0]
    path = store.root / pack_key(pack.sha256)
    data = bytearray(path.read_bytes())
    data[pack.members[0].offset] ^= 1
    path.write_bytes(bytes(data))
    bad = verify_store(store)
    assert [(p.kind, p.key) for p in bad.problems] == [("sha256", pack_key(pack.sha256))]
    assert exit_code_for(bad.error()) == 4  # type: ignore[arg-type]
    path.unlink()
    assert [p.kind for p in verify_store(store, quick=True).problems] == ["missing"]
