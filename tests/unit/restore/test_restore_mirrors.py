"""restore with mirrors: a primary store with 10 % of its blobs and packs corrupted and one blob
deleted; each object missing or failing verification is fetched from the mirror."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from neffcache.restore import STATE_FILE, RestoreRequest, restore
from neffcache.store import BLOBS, PACKS, blob_key, open_store
from tests.support.host_entries import (
    INSTANCE_TYPE,
    MATRIX,
    bundle_of_directory,
    publish_for_this_host,
)
from tests.support.synthetic import read_tree

CELL_64 = "tiny/compile/64x64/b1/tp1"


def _damage(store_dir: Path, large: str) -> int:
    """Flip one byte in every 10th blob or pack (sorted), delete the large blob; how many
    objects were damaged."""
    keys = sorted(p for p in store_dir.rglob("*") if p.is_file() and
                  p.relative_to(store_dir).as_posix().startswith((BLOBS, PACKS)))
    victims = keys[::10]
    for p in victims:
        data = bytearray(p.read_bytes())
        data[len(data) // 2] ^= 0x40
        p.write_bytes(bytes(data))
    (store_dir / blob_key(large)).unlink()
    return len(victims) + 1


@pytest.mark.parametrize("kind", ["store", "bundle"])
def test_restore_from_a_damaged_primary_with_one_mirror_is_byte_identical(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    monkeypatch.setenv(*INSTANCE_TYPE)
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(MATRIX, encoding="utf-8")
    primary = tmp_path / "primary"
    (published,) = publish_for_this_host(open_store(str(primary), create=True), matrix,
                                         tmp_path / "work", [CELL_64], count=40)
    if kind == "store":
        shutil.copytree(primary, tmp_path / "mirror")
        mirror = str(tmp_path / "mirror")
    else:
        bundle_of_directory(primary, tmp_path / "mirror.bundle")
        mirror = f"bundle:{tmp_path / 'mirror.bundle'}"
    damaged = _damage(primary, published.large_sha256)
    assert damaged >= 3

    def run(out: str, mirrors: tuple[str, ...]) -> dict[str, object]:
        result = restore(RestoreRequest(matrix=matrix, to=tmp_path / out, cells=[CELL_64],
                                        store=str(primary), report_to="none",
                                        mirrors=mirrors))
        doc = result.to_json()
        doc["exit"] = result.exit_code
        return doc

    alone = run("alone", ())
    assert alone["exit"] != 0, "the damage must break a restore without a mirror"
    assert alone["repair_hint"] is None
    doc = run("out", (mirror,))
    assert doc["exit"] == 0, doc
    served = [u for u in doc["served_by"] if u != doc["store"]]  # type: ignore[union-attr]
    assert len(served) == 1 and mirror.rsplit(":", 1)[-1] in served[0].rsplit(":", 1)[-1]
    assert doc["repair_hint"] == f"neffcache repair --store {doc['store']} --from {served[0]}"
    tree = read_tree(tmp_path / "out" / "neff")
    tree.pop(STATE_FILE)
    assert tree == published.files
    served = doc["served_by"]
    assert isinstance(served, dict)
    mirror_url = open_store(mirror).url
    assert served.get(mirror_url, 0) >= 1, served
    assert served.get(open_store(str(primary)).url, 0) >= 1, served


def test_mirrors_come_from_the_environment_or_the_config_file() -> None:
    from neffcache.config import load_settings, parse_config_file

    env = {"NEFFCACHE_HOME": "/h", "NEFFCACHE_MIRRORS": "s3://b/m bundle:/opt/x.bundle"}
    assert load_settings(env).mirrors == ("s3://b/m", "bundle:/opt/x.bundle")
    file = parse_config_file('mirrors = "/srv/m"', "config.toml")
    assert load_settings({"NEFFCACHE_HOME": "/h"}, file).mirrors == ("/srv/m",)
    assert load_settings(env, file).mirrors[0] == "s3://b/m"
    assert load_settings({"NEFFCACHE_HOME": "/h"}).mirrors == ()


def test_an_s3_primary_with_damage_restores_from_a_local_mirror(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, s3_url: str) -> None:
    import io

    from neffcache.lifecycle.copy import apply_copy
    from neffcache.lifecycle.entry_select import read_manifests, select_entry_keys

    monkeypatch.setenv(*INSTANCE_TYPE)
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(MATRIX, encoding="utf-8")
    mirror = open_store(str(tmp_path / "mirror"), create=True)
    (published,) = publish_for_this_host(mirror, matrix, tmp_path / "work", [CELL_64],
                                         count=40)
    primary = open_store(s3_url)
    apply_copy(mirror, primary, read_manifests(mirror, select_entry_keys(mirror, None)))
    keys = sorted(k for k in primary.list("") if k.startswith((BLOBS, PACKS)))
    for key in keys[::10]:
        data = bytearray(primary.read(key))
        data[len(data) // 2] ^= 0x40
        primary.delete(key)
        primary.put(key, io.BytesIO(bytes(data)), if_absent=True)
    primary.delete(blob_key(published.large_sha256))
    result = restore(RestoreRequest(matrix=matrix, to=tmp_path / "out", cells=[CELL_64],
                                    store=s3_url, report_to="none", mirrors=[mirror.url]))
    assert result.exit_code == 0, result.to_json()
    tree = read_tree(tmp_path / "out" / "neff")
    tree.pop(STATE_FILE)
    assert tree == published.files
    assert result.to_json()["served_by"][mirror.url] >= len(keys[::10]) + 1
