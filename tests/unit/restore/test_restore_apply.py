"""restore_cells / apply_restore against a local store in a temp dir: atomic, verified, safe."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import pytest

from neffcache.backends import NEURON
from neffcache.fingerprint import build_fingerprint
from neffcache.matrix import Cell
from neffcache.precompile.publish import publish_entry
from neffcache.restore import scan as restore_scan
from neffcache.restore.run import restore_cells
from neffcache.store import blob_key
from neffcache.store.local import LocalStore
from tests.support.synthetic import make_neff_cache, read_tree

FP = build_fingerprint("neuron", {"target": "trn2"})


def cell(h: int = 64) -> Cell:
    return Cell("p", "diffusers:P", "m", "main", "bfloat16", "compile", ("transformer",),
                h, h, 1, 1)


@pytest.fixture
def published(tmp_path: Path) -> tuple[LocalStore, dict[str, bytes]]:
    cache = make_neff_cache(tmp_path / "src", seed=5, count=40, large=1)
    store = LocalStore(tmp_path / "store")
    publish_entry(store, cell(), FP, NEURON, {"neff": cache.root})
    return store, cache.files


def temps(root: Path) -> list[Path]:
    return [p for p in root.rglob(".neffcache-*") if p.name.endswith(".tmp")]


def test_round_trip_then_nothing_to_do(tmp_path: Path, published, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    store, files = published
    r = restore_cells(store, [cell()], NEURON, FP, tmp_path / "t", workers=4)
    assert r.error() is None and r.restored == (cell().id,)
    tree = read_tree(tmp_path / "t" / "neff")
    tree.pop(".neffcache-state.json")
    assert tree == files
    assert r.files_fetched == len(files)

    hashed: list[str] = []
    real = restore_scan._hash_at
    monkeypatch.setattr(restore_scan, "_hash_at",
                        lambda dfd, name, dl: hashed.append(name) or real(dfd, name, dl))
    again = restore_cells(store, [cell()], NEURON, FP, tmp_path / "t", workers=4)
    assert (again.files_fetched, again.files_skipped) == (0, len(files))
    assert hashed == []  # the state file vouched for every unchanged file

    victim = sorted(files)[0]
    (tmp_path / "t" / "neff" / victim).write_bytes(b"tampered")
    third = restore_cells(store, [cell()], NEURON, FP, tmp_path / "t", workers=4)
    assert third.files_fetched == 1
    assert (tmp_path / "t" / "neff" / victim).read_bytes() == files[victim]


def test_corrupt_blob_is_never_installed(tmp_path: Path, published) -> None:  # type: ignore[no-untyped-def]
    store, files = published
    victim = sorted(files)[1]
    from neffcache.hashing import sha256_bytes

    path = store.root / blob_key(sha256_bytes(files[victim]))
    path.write_bytes(b"X" + path.read_bytes()[1:])
    r = restore_cells(store, [cell()], NEURON, FP, tmp_path / "t", workers=4)
    err = r.error()
    assert err is not None and type(err).__name__ == "IntegrityError"
    bad = {f.path for f in r.failures}
    assert victim in bad
    for rel, data in files.items():
        p = tmp_path / "t" / "neff" / rel
        if data == files[victim]:
            assert not p.exists()
        else:
            assert p.read_bytes() == data
    assert temps(tmp_path / "t") == []
    assert r.restored == () and r.incomplete == (cell().id,)


def test_symlinked_directory_in_target_is_not_followed(tmp_path: Path, published) -> None:  # type: ignore[no-untyped-def]
    store, files = published
    nested = sorted(p for p in files if "/" in p)[0]
    top = nested.split("/")[0]
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "t" / "neff").mkdir(parents=True)
    os.symlink(outside, tmp_path / "t" / "neff" / top)
    r = restore_cells(store, [cell()], NEURON, FP, tmp_path / "t", workers=4)
    assert list(outside.iterdir()) == []
    assert any(f.path == nested and "symlink" in f.message for f in r.failures)
    assert r.error() is not None


def test_past_deadline_starts_nothing_and_leaves_no_temp(tmp_path: Path, published) -> None:  # type: ignore[no-untyped-def]
    store, _files = published
    r = restore_cells(store, [cell()], NEURON, FP, tmp_path / "t",
                      deadline=time.monotonic() - 1)
    assert r.deadline_hit and r.files_fetched == 0
    assert type(r.error()).__name__ == "DeadlineExceededError"
    assert temps(tmp_path / "t") == []


def test_transfer_stops_at_the_deadline(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    root = tmp_path / "src"
    root.mkdir()
    (root / "big.neff").write_bytes(os.urandom(8 << 20))
    publish_entry(store, cell(), FP, NEURON, {"neff": root})

    class Slow(io.RawIOBase):
        def __init__(self, raw: io.BufferedReader) -> None:
            self.raw = raw

        def readable(self) -> bool:
            return True

        def read(self, n: int = -1) -> bytes:
            time.sleep(0.05)
            return self.raw.read(n)

    class SlowStore(LocalStore):
        def open(self, key: str, start: int = 0, length: int | None = None):  # type: ignore[no-untyped-def]
            fh = super().open(key, start, length)
            return Slow(fh) if key.startswith("blobs/") else fh  # type: ignore[arg-type]

    slow = SlowStore(tmp_path / "store")
    started = time.monotonic()
    r = restore_cells(slow, [cell()], NEURON, FP, tmp_path / "t", deadline=started + 0.12)
    assert r.deadline_hit and r.files_fetched == 0
    assert not (tmp_path / "t" / "neff" / "big.neff").exists()
    assert temps(tmp_path / "t") == []


def test_missing_cell_built_elsewhere_is_reported(tmp_path: Path, published) -> None:  # type: ignore[no-untyped-def]
    store, _ = published
    here = build_fingerprint("neuron", {"target": "trn3"})
    r = restore_cells(store, [cell()], NEURON, here, tmp_path / "t")
    assert r.resolution.elsewhere == ((cell().id, (FP.key,)),)
    assert type(r.error()).__name__ == "FingerprintMismatchError"


def test_shared_blob_is_fetched_once_and_an_unreachable_store_is_exit_6(tmp_path: Path) -> None:
    from neffcache.errors import UnavailableError
    from tests.support.faulty_store import FaultyStore
    from tests.support.memory_store import MemoryStore

    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    for name in ("a/1.neff", "a/2.neff", "3.neff"):
        (src / name).write_bytes(b"same bytes everywhere")
    (src / "4.neff").write_bytes(b"other")
    inner = MemoryStore()
    publish_entry(inner, cell(), FP, NEURON, {"neff": src})
    store = FaultyStore(inner)
    r = restore_cells(store, [cell()], NEURON, FP, tmp_path / "t")
    assert r.error() is None and r.files_fetched == 4
    assert len([c for c in store.calls if c[0] == "open"]) == 2  # one per distinct blob
    assert read_tree(tmp_path / "t" / "neff").keys() >= {"a/1.neff", "a/2.neff", "3.neff"}

    down = FaultyStore(inner, fail_on=1, fail_count=None, fail_methods={"open"})
    r2 = restore_cells(down, [cell()], NEURON, FP, tmp_path / "t2")
    assert isinstance(r2.error(), UnavailableError)
    assert {f.kind for f in r2.failures} == {"unavailable"}
    assert temps(tmp_path / "t2") == []


def test_conflicting_entries_first_cell_wins_and_rerun_keeps_it(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    for h, body in ((64, b"built by the 64 cell"), (128, b"built by the 128 cell!")):
        src = tmp_path / f"src{h}"
        (src / "ab").mkdir(parents=True)
        (src / "ab" / "k.so").write_bytes(body)
        (src / f"own{h}.neff").write_bytes(body * 2)
        publish_entry(store, cell(h), FP, NEURON, {"neff": src})
    target = tmp_path / "t"
    r = restore_cells(store, [cell(128), cell(64)], NEURON, FP, target)
    assert r.error() is None and r.restored == (cell(128).id, cell(64).id)
    assert len(r.conflicts) == 1 and r.conflicts[0].path == "ab/k.so"
    assert r.to_json()["conflicts"] == 1
    assert (target / "neff" / "ab" / "k.so").read_bytes() == b"built by the 128 cell!"
    # The other order wants the 64 cell's bytes first, but the 128 cell's are valid: left.
    again = restore_cells(store, [cell(64), cell(128)], NEURON, FP, target)
    assert again.error() is None and again.files_fetched == 0
    assert (target / "neff" / "ab" / "k.so").read_bytes() == b"built by the 128 cell!"
