"""repair_store: damage a store (a blob, a pack member, a large-file part, a manifest; flipped
or deleted), repair it from a mirror store, a bundle or a restored directory; verify is clean."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from neffcache.backends import get_backend
from neffcache.errors import UsageError
from neffcache.lifecycle import ExportBundleRequest, RepairRequest, export_bundle, repair_store
from neffcache.lifecycle.copy import apply_copy
from neffcache.lifecycle.verify import audit_store as verify_store
from neffcache.manifest import Manifest
from neffcache.parts import REQUIRED_OVER
from neffcache.precompile.packing import PackPolicy
from neffcache.precompile.publish import publish_entry
from neffcache.restore.run import restore_cells
from neffcache.store import Store, blob_key, manifest_key, open_store, pack_key
from tests.support.lifecycle import cell, sdk_fingerprint
from tests.support.synthetic import make_neff_cache

FP = sdk_fingerprint("2.19")
MiB = 1 << 20
SMALL_PACKS = PackPolicy(member_max=64 << 10, min_files=4, target=32 << 10, min_bytes=8 << 10,
                         max_bytes=64 << 10)


@dataclass(frozen=True)
class Good:
    store: str
    bundle: Path
    restored: Path
    manifest: Manifest


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Good:
    """A good store with one entry (small packed files and one large file with parts), a
    bundle of it and a verified restore of it."""
    root = tmp_path_factory.mktemp("good")
    cache = make_neff_cache(root / "cache", seed=7, count=10, large=1, droppings=False,
                            large_size=(REQUIRED_OVER + MiB, REQUIRED_OVER + MiB + 1))
    store = open_store(str(root / "store"), create=True)
    published = publish_entry(store, cell(64), FP, get_backend(FP.backend),
                              {"neff": cache.root}, packing=SMALL_PACKS)
    m = published.manifest
    assert m.packs and m.parts, "the entry needs a pack and a large file with parts"
    export_bundle(ExportBundleRequest(root / "good.bundle", all_entries=True,
                                      store=store.url))
    restored = root / "restored"
    assert restore_cells(store, [cell(64)], get_backend("neuron"), FP, restored).error() is None
    return Good(store.url, root / "good.bundle", restored, m)


def _flip(store: Store, key: str, at: int) -> None:
    data = bytearray(store.read(key))
    data[at] ^= 0x01
    store.delete(key)
    import io

    store.put(key, io.BytesIO(bytes(data)), if_absent=True)


def _large(m: Manifest) -> str:
    return m.parts[0].sha256


def _unpacked_small(m: Manifest) -> str:
    packed = {x.sha256 for p in m.packs for x in p.members}
    small = [f.sha256 for f in m.files if f.sha256 not in packed and f.size < REQUIRED_OVER]
    return (small or [f.sha256 for f in m.files if f.size < REQUIRED_OVER])[0]


DAMAGE: dict[str, Callable[[Store, Manifest], None]] = {
    "blob-flipped": lambda s, m: _flip(s, blob_key(_unpacked_small(m)), 0),
    "blob-deleted": lambda s, m: s.delete(blob_key(_unpacked_small(m))),
    "pack-member-flipped": lambda s, m: _flip(s, pack_key(m.packs[0].sha256),
                                              m.packs[0].members[-1].offset),
    "large-part-flipped": lambda s, m: _flip(s, blob_key(_large(m)), m.parts[0].part_size + 5),
    "manifest-flipped": lambda s, m: _flip(s, manifest_key(m.entry_key), 3),
    "manifest-deleted": lambda s, m: s.delete(manifest_key(m.entry_key)),
}


def _source(kind: str, good: Good) -> dict[str, str]:
    return {"store": {"source": good.store}, "bundle": {"source": f"bundle:{good.bundle}"},
            "dir": {"from_dir": str(good.restored)}}[kind]


def _damaged_copy(good: Good, url: str, damage: str) -> Store:
    target = open_store(url, create=True)
    apply_copy(open_store(good.store), target, [good.manifest])
    assert verify_store(target).problems == ()
    DAMAGE[damage](target, good.manifest)
    if damage != "manifest-deleted":  # verify lists manifests; a pointer still names it
        assert verify_store(target).problems, "the damage must show"
    return target


@pytest.mark.parametrize("source", ["store", "bundle", "dir"])
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_repair_makes_a_damaged_local_store_verify_clean(good: Good, tmp_path: Path,
                                                         damage: str, source: str) -> None:
    target = _damaged_copy(good, str(tmp_path / "target"), damage)
    preview = repair_store(RepairRequest(store=target.url, dry_run=True,
                                         **_source(source, good)))  # type: ignore[arg-type]
    assert preview.planned and preview.error() is not None
    assert repair_store(RepairRequest(store=target.url, dry_run=True, **_source(
        source, good))).planned == preview.planned, "a dry run writes nothing"  # type: ignore[arg-type]
    result = repair_store(RepairRequest(store=target.url, confirmed=True,
                                        **_source(source, good)))  # type: ignore[arg-type]
    assert result.error() is None and result.count("repaired") >= 1, result.to_json()
    assert verify_store(target).problems == ()
    assert target.has(manifest_key(good.manifest.entry_key))
    assert result.to_json()["ok"] is True


@pytest.mark.parametrize("damage", ["blob-flipped", "large-part-flipped", "manifest-deleted"])
def test_repair_an_s3_store_from_a_bundle(good: Good, s3_url: str, damage: str) -> None:
    target = _damaged_copy(good, s3_url, damage)
    result = repair_store(RepairRequest(store=s3_url, source=f"bundle:{good.bundle}",
                                        confirmed=True))
    assert result.error() is None, result.to_json()
    assert verify_store(target).problems == ()
    assert target.has(manifest_key(good.manifest.entry_key))


def test_repair_never_overwrites_a_good_object_and_needs_consent(good: Good,
                                                                 tmp_path: Path) -> None:
    target = _damaged_copy(good, str(tmp_path / "t"), "blob-deleted")
    with pytest.raises(UsageError):
        repair_store(RepairRequest(store=target.url, source=good.store))
    bad = tmp_path / "bad"
    shutil.copytree(Path(good.store.removeprefix("file://")), bad)
    bad_store = open_store(str(bad))
    DAMAGE["blob-deleted"](bad_store, good.manifest)  # the source lacks the blob too
    result = repair_store(RepairRequest(store=target.url, source=str(bad), confirmed=True))
    assert result.count("unavailable") == 1 and result.error() is not None
    assert result.exit_code == 4


def test_repair_refuses_no_source_and_two_sources(good: Good) -> None:
    with pytest.raises(UsageError):
        repair_store(RepairRequest(store=good.store))
    with pytest.raises(UsageError):
        repair_store(RepairRequest(store=good.store, source=good.store, from_dir="/tmp"))


@pytest.mark.parametrize("writer", ["copy", "bundle-import", "push"])
@pytest.mark.parametrize("damage", ["deleted", "truncated", "quarantined"])
def test_writers_never_skip_a_known_bad_object(good: Good, tmp_path: Path, writer: str,
                                               damage: str) -> None:
    """push, copy and bundle import rewrite a blob of an entry the target already has when the
    blob is missing, has the wrong size or is quarantined under damaged/."""
    import io

    from neffcache.lifecycle import ImportBundleRequest, import_bundle
    from neffcache.store import DAMAGED

    target = _damaged_copy(good, str(tmp_path / "t"), "blob-deleted")
    key = blob_key(_unpacked_small(good.manifest))
    if damage != "deleted":
        src = open_store(good.store).read(key)
        body = src[:-1] if damage == "truncated" else bytes([src[0] ^ 1]) + src[1:]
        target.put(key, io.BytesIO(body), if_absent=True)
    if damage == "quarantined":
        target.put(DAMAGED + key, io.BytesIO(b"{}"), if_absent=True)
    assert verify_store(target).problems
    if writer == "copy":
        apply_copy(open_store(good.store), target, [good.manifest])
    elif writer == "bundle-import":
        import_bundle(ImportBundleRequest(good.bundle, store=target.url))
    else:
        cache = make_neff_cache(tmp_path / "cache", seed=7, count=10, large=1, droppings=False,
                                large_size=(REQUIRED_OVER + MiB, REQUIRED_OVER + MiB + 1))
        publish_entry(target, cell(64), FP, get_backend(FP.backend), {"neff": cache.root},
                      packing=SMALL_PACKS)
    assert verify_store(target).problems == ()
    assert not target.has(DAMAGED + key)


def test_verify_quarantine_makes_copy_rewrite_a_flipped_blob_of_the_same_size(
        good: Good, tmp_path: Path) -> None:
    """The issue's case: one byte flipped, size unchanged; verify --quarantine marks it and a
    copy from a good store then rewrites it."""
    from neffcache.lifecycle import VerifyStoreRequest
    from neffcache.lifecycle import verify_store as verify_use_case
    from neffcache.store import DAMAGED

    target = _damaged_copy(good, str(tmp_path / "t"), "blob-flipped")
    key = blob_key(_unpacked_small(good.manifest))
    apply_copy(open_store(good.store), target, [good.manifest])
    assert verify_store(target).problems, "without a mark, the same size is not known bad"
    verify_use_case(VerifyStoreRequest(store=target.url, quarantine=True))
    assert target.has(DAMAGED + key)
    apply_copy(open_store(good.store), target, [good.manifest])
    assert verify_store(target).problems == () and not target.has(DAMAGED + key)


@pytest.mark.parametrize("source", ["store", "bundle", "dir"])
def test_a_repaired_manifest_keeps_its_signature(tmp_path: Path, source: str) -> None:
    """A signed entry's manifest deleted, then repaired from each kind of source: the rewritten
    manifest still carries the publisher's signature, and a restore trusting that key takes it."""
    from neffcache.manifest import decode_manifest
    from neffcache.signing import check_trusted, generate_signing_key

    _, key = generate_signing_key()
    cache = make_neff_cache(tmp_path / "cache", seed=9, count=6, large=0, droppings=False)
    store = open_store(str(tmp_path / "store"), create=True)
    m = publish_entry(store, cell(128), FP, get_backend(FP.backend), {"neff": cache.root},
                      packing=SMALL_PACKS, signer=key).manifest
    assert m.signature is not None and m.signature.key_id == key.public.key_id
    export_bundle(ExportBundleRequest(tmp_path / "b.bundle", all_entries=True, store=store.url))
    restored = tmp_path / "restored"
    assert restore_cells(store, [cell(128)], get_backend("neuron"), FP, restored,
                         trusted=[key.public]).error() is None
    good = Good(store.url, tmp_path / "b.bundle", restored, m)
    target = _damaged_copy(good, str(tmp_path / "target"), "manifest-deleted")
    result = repair_store(RepairRequest(store=target.url, confirmed=True,
                                        **_source(source, good)))  # type: ignore[arg-type]
    assert result.error() is None, result.to_json()
    back = decode_manifest(target.read(manifest_key(m.entry_key)))
    assert back.signature == m.signature
    check_trusted(back, [key.public], "repaired")


def test_repair_of_one_blob_reads_what_it_rewrites_after_one_verify(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store of 12 entries with one blob flipped: the repair's one verify reads each object
    once; beyond it, only the damaged blob is read (the target's copy before and after its
    rewrite, the source's once); what --dry-run lists is exactly what the run rewrites."""
    from neffcache import command_steps
    from neffcache.lifecycle import repair
    from tests.support.counting_store import CountingStore
    from tests.support.lifecycle import publish_synthetic

    good_store = open_store(str(tmp_path / "good"), create=True)
    entries = [publish_synthetic(good_store, cell(64 * (i + 1)), FP, tmp_path / f"c{i}",
                                 seed=i, count=8).manifest for i in range(12)]
    shutil.copytree(tmp_path / "good", tmp_path / "target")
    target_url = str(tmp_path / "target")
    victim = blob_key(entries[5].files[0].sha256)
    _flip(open_store(target_url), victim, 0)
    opened: dict[str, CountingStore] = {}

    def counting(url: str, **kw: object) -> CountingStore:
        opened[url] = CountingStore(open_store(url, **kw))  # type: ignore[arg-type]
        return opened[url]

    monkeypatch.setattr(command_steps, "open_store", counting)  # the target
    monkeypatch.setattr(repair, "open_store", counting)  # the source
    dry = repair_store(RepairRequest(store=target_url, source=str(tmp_path / "good"),
                                     dry_run=True))
    result = repair_store(RepairRequest(store=target_url, source=str(tmp_path / "good"),
                                        confirmed=True))
    assert [i.key for i in dry.planned] == [k for k, _ in result.outcomes] == [victim]
    assert result.outcomes == ((victim, "repaired"),) and result.exit_code == 0
    target, source = opened[target_url], opened[str(tmp_path / "good")]
    objects = [k for k in target.gets if k.startswith(("blobs/", "packs/"))]
    assert {k: target.gets[k] for k in objects if k != victim} == {
        k: 1 for k in objects if k != victim}, "the verify reads every other object once"
    size = entries[5].files[0].size
    assert target.gets[victim] == 3 and target.bytes[victim] == 3 * size  # verify, before, after
    assert dict(source.bytes) == {victim: size}, "the source gives only what is rewritten"
    assert verify_store(open_store(target_url)).problems == ()
