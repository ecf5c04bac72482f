"""The trust gate as a forger meets it: each forged, stripped, re-signed, stale-signed and moved
manifest driven through restore (the primary, a store mirror, a bundle mirror), repair (from a
store, a bundle, a restored directory), copy, bundle import, verify and verify --local, with
and without trusted keys. With keys nothing forged is written or installed anywhere; without
keys a store whose cell pointer pins the digest still refuses a rewritten manifest."""

from __future__ import annotations

import io
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from neffcache.backends import get_backend
from neffcache.errors import IntegrityError
from neffcache.fingerprint import collect_fingerprint
from neffcache.lifecycle import (
    CopyEntriesRequest,
    ExportBundleRequest,
    ImportBundleRequest,
    RepairRequest,
    VerifyLocalDirRequest,
    VerifyStoreRequest,
    copy_entries,
    export_bundle,
    import_bundle,
    repair_store,
    verify_local_dir,
    verify_store,
)
from neffcache.manifest import Manifest, encode_manifest
from neffcache.matrix_io import load_matrix
from neffcache.precompile.publish import publish_entry
from neffcache.restore import RestoreRequest, cell_ready, restore
from neffcache.signing import generate_signing_key, sign_manifest
from neffcache.store import manifest_key, open_store
from tests.support.host_entries import INSTANCE_TYPE, MATRIX, bundle_of_directory
from tests.support.synthetic import make_neff_cache

CELL_64, CELL_128 = "tiny/compile/64x64/b1/tp1", "tiny/compile/128x128/b1/tp1"
KINDS = ("swapped", "stripped", "resigned", "stale-signature", "moved")
# Without keys only the pin stands guard: a stripped manifest has the pinned digest (its body
# is the publisher's), so it is the one forgery that passes there.
PINNED_REFUSES = ("swapped", "resigned", "stale-signature", "moved")


@dataclass(frozen=True)
class World:
    root: Path
    matrix: Path
    good: Path  # the publisher's store: both cells, signed by the trusted key
    key: str  # the trusted public key
    manifest: Manifest  # cell 64's, as published
    other: bytes  # cell 128's manifest bytes (for "moved")
    attacker: object


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("trust")
    mp = pytest.MonkeyPatch()
    mp.setenv(*INSTANCE_TYPE)
    matrix = root / "matrix.toml"
    matrix.write_text(MATRIX, encoding="utf-8")
    m = load_matrix(matrix)
    fp = collect_fingerprint("neuron", os.environ)
    _, signer = generate_signing_key()
    _, attacker = generate_signing_key()
    store = open_store(str(root / "good"), create=True)
    published = {}
    for i, c in enumerate(m.cells):
        cache = make_neff_cache(root / f"cache-{i}", seed=3 + i, count=6, large=0,
                                duplicate_ratio=0, droppings=False)
        published[c.id] = publish_entry(store, c, fp, get_backend("neuron"),
                                        {"neff": cache.root}, signer=signer).manifest
    mp.undo()
    return World(root, matrix, root / "good", signer.public.text, published[CELL_64],
                 store.read(manifest_key(published[CELL_128].entry_key)), attacker)


def forged(w: World, kind: str) -> bytes:
    m = w.manifest
    a, b = m.files[0], m.files[1]
    swapped = replace(m, files=(replace(a, sha256=b.sha256, size=b.size),
                                replace(b, sha256=a.sha256, size=a.size), *m.files[2:]))
    if kind == "swapped":  # self-consistent: its own manifest_sha256 recomputed
        return encode_manifest(replace(swapped, signature=None))
    if kind == "stripped":
        return encode_manifest(replace(m, signature=None))
    if kind == "resigned":
        return encode_manifest(sign_manifest(swapped, w.attacker))  # type: ignore[arg-type]
    if kind == "stale-signature":
        return encode_manifest(swapped)  # the publisher's signature over the old body
    assert kind == "moved"
    return w.other  # a genuinely signed manifest of another entry


def store_with(w: World, name: str, data: bytes | None) -> Path:
    """A copy of the publisher's store whose cell-64 manifest is ``data`` (None: deleted)."""
    path = w.root / name
    if path.exists():
        shutil.rmtree(path)
    shutil.copytree(w.good, path)
    s = open_store(str(path))
    key = manifest_key(w.manifest.entry_key)
    s.delete(key)
    if data is not None:
        s.put(key, io.BytesIO(data), if_absent=True)
    return path


def keys(w: World, trusted: bool) -> tuple[str, ...]:
    return (w.key,) if trusted else ()


def installed(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*.neff"))


@pytest.fixture(autouse=True)
def _host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(*INSTANCE_TYPE)
    monkeypatch.setenv("NEFFCACHE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("NEFFCACHE_TRUSTED_KEYS", raising=False)


def _restore(w: World, store: Path, out: Path, trusted: bool, mirrors: tuple[str, ...] = ()
             ) -> int:
    return restore(RestoreRequest(matrix=w.matrix, to=out, cells=[CELL_64], store=str(store),
                                  report_to="none", mirrors=mirrors,
                                  trusted_keys=keys(w, trusted))).exit_code


@pytest.mark.parametrize("kind", KINDS)
def test_restore_with_keys_installs_nothing_forged_from_the_store_or_any_mirror(
        world: World, tmp_path: Path, kind: str) -> None:
    data = forged(world, kind)
    forged_store = store_with(world, f"forged-{kind}", data)
    assert _restore(world, forged_store, tmp_path / "a", True) == 4
    assert installed(tmp_path / "a") == [] and not cell_ready(tmp_path / "a", CELL_64)
    empty = store_with(world, f"lacking-{kind}", None)
    bundle = tmp_path / "forged.bundle"
    bundle_of_directory(forged_store, bundle)
    for n, mirror in enumerate((str(forged_store), f"bundle:{bundle}")):
        out = tmp_path / f"m{n}"
        assert _restore(world, empty, out, True, (mirror,)) != 0
        assert installed(out) == [] and not cell_ready(out, CELL_64), mirror
    assert _restore(world, world.good, tmp_path / "good", True) == 0  # the key is right
    assert cell_ready(tmp_path / "good", CELL_64)


@pytest.mark.parametrize("trusted", [True, False], ids=["keys", "no-keys"])
@pytest.mark.parametrize("kind", KINDS)
def test_repair_writes_no_forged_manifest_from_a_store_a_bundle_or_a_directory(
        world: World, tmp_path: Path, kind: str, trusted: bool) -> None:
    if not trusted and kind not in PINNED_REFUSES:
        pytest.skip("without keys the publisher's own body (stripped) is what the pin names")
    source = store_with(world, f"src-{kind}", forged(world, kind))
    bundle = tmp_path / "src.bundle"
    bundle_of_directory(source, bundle)
    sources: list[dict[str, object]] = [{"source": str(source)},
                                        {"source": f"bundle:{bundle}"}]
    if kind != "moved":  # a restore of a moved manifest fails: there is no directory of it
        restored = tmp_path / "restored"
        assert _restore(world, source, restored, False) == 0
        sources.append({"from_dir": str(restored)})
    key = manifest_key(world.manifest.entry_key)
    for how in sources:
        target = store_with(world, "target", b"{damaged")
        result = repair_store(RepairRequest(store=str(target), confirmed=True,
                                            trusted_keys=keys(world, trusted),
                                            **how))  # type: ignore[arg-type]
        assert result.exit_code == 4, (how, result.to_json())
        assert [p.key for p in result.refused] == [key], how
        assert open_store(str(target)).read(key) == b"{damaged", how  # nothing written
        dry = repair_store(RepairRequest(store=str(target), dry_run=True,
                                         trusted_keys=keys(world, trusted), **how))  # type: ignore[arg-type]
        assert key not in {i.key for i in dry.planned}


@pytest.mark.parametrize("trusted", [True, False], ids=["keys", "no-keys"])
@pytest.mark.parametrize("kind", KINDS)
def test_copy_and_bundle_import_write_no_forged_manifest(
        world: World, tmp_path: Path, kind: str, trusted: bool) -> None:
    if not trusted and kind not in PINNED_REFUSES:
        pytest.skip("without keys the publisher's own body (stripped) is what the pin names")
    source = store_with(world, f"src-{kind}", forged(world, kind))
    bundle = tmp_path / "src.bundle"
    key = manifest_key(world.manifest.entry_key)
    if kind != "moved":  # export refuses what does not decode as its entry
        export_bundle(ExportBundleRequest(bundle, all_entries=True, store=str(source)))
    # into the publisher's store that lost the manifest (its pointer still pins the digest)
    for how in ("copy", "import")[:1 if kind == "moved" else 2]:
        target = store_with(world, "target", None)
        if kind == "moved":  # it does not decode as its entry: the copy stops, writes nothing
            with pytest.raises(IntegrityError, match="describes entry"):
                copy_entries(CopyEntriesRequest(str(source), str(target), all_entries=True,
                                                trusted_keys=keys(world, trusted)))
            assert not open_store(str(target)).has(key)
            continue
        if how == "copy":
            r = copy_entries(CopyEntriesRequest(str(source), str(target), all_entries=True,
                                                trusted_keys=keys(world, trusted)))
            refused = r.refused
        else:
            imported = import_bundle(ImportBundleRequest(bundle, store=str(target),
                                                         trusted_keys=keys(world, trusted)))
            r, refused = imported, imported.copy.refused
        if kind == "moved":  # it never decodes as cell 64's entry: not even selected
            assert not open_store(str(target)).has(key)
            continue
        assert r.exit_code == 4, how
        assert [k for k, _ in refused] == [world.manifest.entry_key], how
        assert not open_store(str(target)).has(key), how
    if trusted and kind != "moved":  # a fresh store pins nothing: the keys alone refuse
        fresh = tmp_path / "fresh"
        r = copy_entries(CopyEntriesRequest(str(source), str(fresh), all_entries=True,
                                            trusted_keys=keys(world, True)))
        assert not open_store(str(fresh), create=True).has(key)
        assert r.exit_code == 4


@pytest.mark.parametrize("kind", KINDS)
def test_verify_flags_every_forgery_with_keys_and_a_rewritten_one_by_its_pin(
        world: World, kind: str) -> None:
    path = store_with(world, f"v-{kind}", forged(world, kind))
    with_keys = verify_store(VerifyStoreRequest(store=str(path), trusted_keys=(world.key,)))
    assert with_keys.exit_code == 4
    assert {p.key for p in with_keys.problems} >= {manifest_key(world.manifest.entry_key)}
    without = verify_store(VerifyStoreRequest(store=str(path)))
    kinds = {p.kind for p in without.problems}
    if kind in ("swapped", "resigned", "stale-signature"):
        assert "pin" in kinds, without.to_json()
    if kind == "stripped":
        assert "pin" not in kinds
    clean = verify_store(VerifyStoreRequest(store=str(world.good), trusted_keys=(world.key,)))
    assert clean.exit_code == 0, clean.to_json()  # and silent on the publisher's store


def test_keys_turned_on_evict_what_no_trusted_key_signed(world: World, tmp_path: Path) -> None:
    """Restore an unsigned entry without keys, then with keys: verify --local with the key
    fails while its files are there; the keyed restore removes them (exit 4: the store has
    nothing trusted for the cell) and verify --local then passes."""
    unsigned = store_with(world, "unsigned", forged(world, "stripped"))
    out = tmp_path / "dir"
    assert _restore(world, unsigned, out, False) == 0
    before = installed(out)
    assert before and cell_ready(out, CELL_64)
    local = verify_local_dir(VerifyLocalDirRequest(out, trusted_keys=(world.key,)))
    assert local.exit_code == 4 and {p.kind for p in local.problems} == {"untrusted"}
    assert verify_local_dir(VerifyLocalDirRequest(out)).exit_code == 0  # no keys: fine
    result = restore(RestoreRequest(matrix=world.matrix, to=out, cells=[CELL_64],
                                    store=str(unsigned), report_to="none",
                                    trusted_keys=(world.key,)))
    assert result.exit_code == 4
    doc = result.to_json()
    assert doc["evicted_entries"] == [world.manifest.entry_key]
    assert doc["evicted_files"] == len(before)
    assert installed(out) == [] and not cell_ready(out, CELL_64)  # evicted: never ready
    assert verify_local_dir(VerifyLocalDirRequest(out, trusted_keys=(world.key,))).exit_code == 0
    # the signed entry then restores into the same directory, and stays on the next run
    assert _restore(world, world.good, out, True) == 0
    again = restore(RestoreRequest(matrix=world.matrix, to=out, cells=[CELL_64],
                                   store=str(world.good), report_to="none",
                                   trusted_keys=(world.key,)))
    assert again.exit_code == 0 and again.evicted == ()
    assert installed(out) == before and cell_ready(out, CELL_64)


def test_signers_are_named_when_nothing_is_checked(world: World, tmp_path: Path) -> None:
    notices: list[str] = []
    result = restore(RestoreRequest(matrix=world.matrix, to=tmp_path / "o", cells=[CELL_64],
                                    store=str(world.good), report_to="none",
                                    notice=notices.append))
    doc = result.to_json()
    key_id = world.manifest.signature.key_id  # type: ignore[union-attr]
    assert doc["signers"] == [key_id] and doc["signatures_checked"] is False
    assert [n for n in notices if key_id in n and "no signature was checked" in n]
    notices.clear()
    checked = restore(RestoreRequest(matrix=world.matrix, to=tmp_path / "o", cells=[CELL_64],
                                     store=str(world.good), report_to="none",
                                     trusted_keys=(world.key,), notice=notices.append))
    assert checked.to_json()["signatures_checked"] is True
    assert not [n for n in notices if "no signature was checked" in n]


def test_require_signatures_without_keys_fails_closed(world: World, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from neffcache.errors import ConfigError

    with pytest.raises(ConfigError, match="no trusted key is configured"):
        restore(RestoreRequest(matrix=world.matrix, to=tmp_path / "o", cells=[CELL_64],
                               store=str(world.good), report_to="none",
                               require_signatures=True))
    monkeypatch.setenv("NEFFCACHE_REQUIRE_SIGNATURES", "1")
    with pytest.raises(ConfigError):
        verify_store(VerifyStoreRequest(store=str(world.good)))
    monkeypatch.setenv("NEFFCACHE_TRUSTED_KEYS", world.key)
    assert verify_store(VerifyStoreRequest(store=str(world.good))).exit_code == 0


@pytest.mark.s3
@pytest.mark.parametrize("kind", KINDS)
def test_an_s3_mirror_serves_nothing_forged_with_keys(world: World, tmp_path: Path,
                                                      s3_url: str, kind: str) -> None:
    """The primary lacks the manifest; an S3 mirror (moto) holds the forged one, object for
    object as the forger wrote it: with keys the cell fails and nothing is installed."""
    forged_store = store_with(world, f"s3src-{kind}", forged(world, kind))
    mirror = open_store(s3_url, create=True)
    for path in sorted(p for p in forged_store.rglob("*") if p.is_file()):
        mirror.put(path.relative_to(forged_store).as_posix(), io.BytesIO(path.read_bytes()),
                   if_absent=False)
    empty = store_with(world, f"lacking-s3-{kind}", None)
    out = tmp_path / "out"
    assert _restore(world, empty, out, True, (s3_url,)) != 0
    assert installed(out) == []
    if kind == "stripped":  # the control: without keys the publisher's body restores from it
        assert _restore(world, empty, tmp_path / "plain", False, (s3_url,)) == 0
