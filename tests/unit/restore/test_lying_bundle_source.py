"""A bundle used as a mirror or a repair source is checked as strictly as ``bundle show
--verify``: one member that does not match its table of contents and the whole bundle is
refused (a mirror passed over, a repair source an error), so nothing is taken from it, not even
its intact members; the same bundle with an honest member serves them. Its gzip cap is the one
``bundle import`` applies, set per mirror (``NEFFCACHE_MIRROR_<N>_BUNDLE_MAX_BYTES``)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from neffcache.errors import IntegrityError
from neffcache.lifecycle import RepairRequest, repair_store
from neffcache.restore import STATE_FILE, RestoreRequest, restore
from neffcache.store import BLOBS, CELLS, MANIFESTS, PACKS, BundleStore, blob_key, open_store
from tests.support.host_entries import INSTANCE_TYPE, MATRIX, publish_for_this_host
from tests.support.lifecycle import bundle_with
from tests.support.synthetic import read_tree

CELL_64 = "tiny/compile/64x64/b1/tp1"


def objects_of(store_dir: Path) -> list[tuple[str, bytes]]:
    return [(key, p.read_bytes()) for p in sorted(store_dir.rglob("*")) if p.is_file()
            and (key := p.relative_to(store_dir).as_posix()).startswith(
                (MANIFESTS, CELLS, BLOBS, PACKS))]


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path, Path, str]:
    """(matrix, primary store dir lacking two blobs, honest bundle, lying bundle, the blob the
    primary lacks that the lying bundle holds intact): the lying bundle's member for the other
    lacking blob (the large one) has a byte flipped, its table unchanged."""
    monkeypatch.setenv(*INSTANCE_TYPE)
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(MATRIX, encoding="utf-8")
    primary = tmp_path / "primary"
    (published,) = publish_for_this_host(open_store(str(primary), create=True), matrix,
                                         tmp_path / "work", [CELL_64], count=12)
    large = blob_key(published.large_sha256)
    objects = objects_of(primary)
    intact = next(k for k, _ in objects if k.startswith(BLOBS) and k != large)
    honest, lying = tmp_path / "honest.bundle", tmp_path / "lying.bundle"
    bundle_with(honest, objects)
    flipped = [(k, b if k != large else b[:-1] + bytes([b[-1] ^ 1])) for k, b in objects]
    bundle_with(lying, flipped, objects)
    (primary / large).unlink()
    (primary / intact).unlink()
    return matrix, primary, honest, lying, intact


def test_a_lying_bundle_is_refused_by_its_check_as_by_show_verify(
        setup: tuple[Path, Path, Path, Path, str]) -> None:
    _, _, honest, lying, intact = setup
    with BundleStore(lying) as b:
        assert b.read(intact)  # its structure is fine: only hashing every member shows it
        with pytest.raises(IntegrityError, match="does not match its sha256"):
            b.check()
    with open_store(f"bundle:{honest}") as b:  # type: ignore[attr-defined]
        b.check()


def test_a_lying_bundle_mirror_serves_nothing(
        setup: tuple[Path, Path, Path, Path, str], tmp_path: Path) -> None:
    matrix, primary, honest, lying, _ = setup

    def run(out: str, bundle: Path) -> tuple[int, dict[str, bytes]]:
        result = restore(RestoreRequest(matrix=matrix, to=tmp_path / out, cells=[CELL_64],
                                        store=str(primary), report_to="none",
                                        mirrors=[f"bundle:{bundle}"]))
        files = read_tree(tmp_path / out / "neff") if (tmp_path / out / "neff").exists() else {}
        files.pop(STATE_FILE, None)
        return result.exit_code, files

    code, good = run("honest", honest)
    assert code == 0
    code, installed = run("lying", lying)
    assert code != 0  # the intact blob it holds is not taken from it either
    assert len(installed) == len(good) - 2 and set(installed) < set(good)


def test_repair_from_a_lying_bundle_writes_nothing(
        setup: tuple[Path, Path, Path, Path, str]) -> None:
    _, primary, honest, lying, intact = setup
    with pytest.raises(IntegrityError, match="does not match its sha256"):
        repair_store(RepairRequest(store=str(primary), source=f"bundle:{lying}",
                                   confirmed=True))
    assert not (primary / intact).exists()
    fixed = repair_store(RepairRequest(store=str(primary), source=f"bundle:{honest}",
                                       confirmed=True))
    assert dict(fixed.outcomes)[intact] == "repaired" and fixed.exit_code == 0


def test_a_gzip_bundle_mirror_is_capped_per_mirror(
        setup: tuple[Path, Path, Path, Path, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    matrix, primary, honest, _, _ = setup
    packed = tmp_path / "honest.bundle.gz"
    packed.write_bytes(gzip.compress(honest.read_bytes()))

    def run(out: str) -> int:
        return restore(RestoreRequest(matrix=matrix, to=tmp_path / out, cells=[CELL_64],
                                      store=str(primary), report_to="none",
                                      mirrors=[str(tmp_path / "other"), f"bundle:{packed}"]
                                      )).exit_code

    open_store(str(tmp_path / "other"), create=True).check()  # an empty first mirror
    assert run("free") == 0
    monkeypatch.setenv("NEFFCACHE_MIRROR_2_BUNDLE_MAX_BYTES", str(honest.stat().st_size // 2))
    with pytest.raises(IntegrityError, match="its cap"):
        run("capped")
