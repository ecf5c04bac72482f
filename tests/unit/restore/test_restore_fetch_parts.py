"""A large blob fetched in ranged parts by many workers: hashed in part order, from the receive
buffer when a part is next in turn and from the page cache when it landed early, or, where the
manifest has part digests, each part checked against its own as it arrives; corrupt or short
parts never install the file. Parts are made tiny so a few MiB exercise every path."""

from __future__ import annotations

import io
import json
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from neffcache.backends import NEURON
from neffcache.fingerprint import build_fingerprint
from neffcache.manifest import Manifest, decode_manifest, encode_manifest
from neffcache.matrix import Cell
from neffcache.parts import PartPolicy
from neffcache.precompile.publish import publish_entry
from neffcache.restore import fetch as restore_fetch
from neffcache.restore.plan import UnitPolicy
from neffcache.restore.run import restore_cells
from neffcache.store import blob_key, manifest_key
from neffcache.store.local import LocalStore

FP = build_fingerprint("neuron", {"target": "trn2"})
KiB = 1 << 10
TINY_PARTS = UnitPolicy(part_bytes=64 * KiB, split_over=128 * KiB)
CELL = Cell("p", "diffusers:P", "m", "main", "bfloat16", "compile", ("transformer",),
            64, 64, 1, 1)


class Jittery(io.RawIOBase):
    """A stream that hands out a few KiB at a time after a random pause, so parts finish in
    a different order run by run."""

    def __init__(self, inner: io.RawIOBase, rng: random.Random) -> None:
        self.inner, self.rng = inner, rng

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        time.sleep(self.rng.random() * 0.002)
        return self.inner.read(min(n, 24 * KiB) if n and n > 0 else 24 * KiB)

    def close(self) -> None:
        self.inner.close()
        super().close()


class JitteryStore(LocalStore):
    def __init__(self, root: Path, seed: int) -> None:
        super().__init__(root)
        self.rng = random.Random(seed)
        self.lock = threading.Lock()

    def open(self, key: str, start: int = 0, length: int | None = None):  # type: ignore[no-untyped-def]
        fh = super().open(key, start, length)
        with self.lock:
            rng = random.Random(self.rng.random())
        return Jittery(fh, rng) if key.startswith("blobs/") else fh  # type: ignore[arg-type]


def publish_two_graphs(tmp_path: Path, **publish: Any) -> tuple[Path, dict[str, bytes], Manifest]:
    """graph-a (3 MiB + 123) and graph-b (exactly 1 MiB), published to a local store."""
    root = tmp_path / "src"
    root.mkdir()
    files = {"graph-a.neff": os.urandom(3 * 1024 * KiB + 123),
             "graph-b.neff": os.urandom(1024 * KiB)}
    for name, data in files.items():
        (root / name).write_bytes(data)
    r = publish_entry(LocalStore(tmp_path / "store"), CELL, FP, NEURON, {"neff": root},
                      **publish)
    return tmp_path / "store", files, r.manifest


def rewrite(path: Path, data: bytes) -> None:
    """Replace a stored object's bytes (the store leaves them read-only)."""
    path.chmod(0o644)
    path.write_bytes(data)


def flip_byte(path: Path, where: int) -> None:
    data = bytearray(path.read_bytes())
    data[where] ^= 0x01
    rewrite(path, bytes(data))


@pytest.fixture
def big(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    store_dir, files, _ = publish_two_graphs(tmp_path)
    return store_dir, files


def spy_hashing(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the two ways a part gets hashed."""
    seen = {"streamed": 0, "from_cache": 0}
    claim = restore_fetch._Assembly.claim_head
    real_hash = restore_fetch.hash_range

    def counted_claim(self, index):  # type: ignore[no-untyped-def]
        won = claim(self, index)
        seen["streamed"] += won
        return won

    def counted_hash(fd, start, length, h):  # type: ignore[no-untyped-def]
        seen["from_cache"] += length > 0
        return real_hash(fd, start, length, h)

    monkeypatch.setattr(restore_fetch._Assembly, "claim_head", counted_claim)
    monkeypatch.setattr(restore_fetch, "hash_range", counted_hash)
    return seen


@pytest.mark.parametrize("seed", range(6))
def test_parts_in_any_order_install_the_exact_bytes(tmp_path: Path, big, seed: int,  # type: ignore[no-untyped-def]
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    store_dir, files = big
    seen = spy_hashing(monkeypatch)
    r = restore_cells(JitteryStore(store_dir, seed), [CELL], NEURON, FP, tmp_path / "t",
                      workers=8, units=TINY_PARTS)
    assert r.error() is None, r.failures
    for name, data in files.items():
        assert (tmp_path / "t" / "neff" / name).read_bytes() == data
    assert seen["streamed"] >= 2  # at least the first part of each file hashed as it arrived
    assert seen["streamed"] < 66  # 50 + 16 parts: not every part can be next in turn...


def test_both_hashing_paths_are_taken_across_runs(tmp_path: Path, big,  # type: ignore[no-untyped-def]
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    store_dir, _ = big
    seen = spy_hashing(monkeypatch)
    for seed in range(4):
        r = restore_cells(JitteryStore(store_dir, seed), [CELL], NEURON, FP,
                          tmp_path / f"t{seed}", workers=8, units=TINY_PARTS)
        assert r.error() is None
    assert seen["streamed"] > 0 and seen["from_cache"] > 0


@pytest.mark.parametrize("where", [0, 1_500_000, 3 * 1024 * KiB + 122])
def test_one_flipped_byte_in_any_part_is_never_installed(tmp_path: Path, big,  # type: ignore[no-untyped-def]
                                                         where: int) -> None:
    store_dir, files = big
    sha = next(m for m in (p.name for p in (store_dir / "blobs").rglob("*"))
               if len(m) == 64 and (store_dir / blob_key(m)).stat().st_size ==
               len(files["graph-a.neff"]))
    flip_byte(store_dir / blob_key(sha), where)
    r = restore_cells(JitteryStore(store_dir, 1), [CELL], NEURON, FP, tmp_path / "t",
                      workers=8, units=TINY_PARTS)
    assert [f.kind for f in r.failures] == ["integrity"]
    assert "corrupt" in r.failures[0].message
    assert not (tmp_path / "t" / "neff" / "graph-a.neff").exists()
    assert (tmp_path / "t" / "neff" / "graph-b.neff").read_bytes() == files["graph-b.neff"]
    assert [p for p in (tmp_path / "t").rglob("*") if p.name.endswith(".tmp")] == []


def test_a_short_blob_is_truncated_not_installed(tmp_path: Path, big) -> None:  # type: ignore[no-untyped-def]
    store_dir, files = big
    blob = next(p for p in (store_dir / "blobs").rglob("*")
                if p.is_file() and p.stat().st_size == len(files["graph-a.neff"]))
    rewrite(blob, blob.read_bytes()[:2 * 1024 * KiB])
    r = restore_cells(JitteryStore(store_dir, 2), [CELL], NEURON, FP, tmp_path / "t",
                      workers=8, units=TINY_PARTS)
    assert r.failures and {f.kind for f in r.failures} == {"integrity"}
    assert "truncated" in r.failures[0].message
    assert not (tmp_path / "t" / "neff" / "graph-a.neff").exists()


# --- with part digests in the manifest ---------------------------------------------------------

MiB_PARTS = PartPolicy(part_bytes=1024 * KiB, over=1024 * KiB)  # the smallest the manifest takes


@pytest.fixture
def digested(tmp_path: Path) -> tuple[Path, dict[str, bytes], str]:
    """graph-a (3 MiB + 123) with four part digests; graph-b (exactly 1 MiB) without."""
    store_dir, files, manifest = publish_two_graphs(tmp_path, parting=MiB_PARTS)
    assert [(len(p.digests), p.part_size) for p in manifest.parts] == [(4, 1024 * KiB)]
    return store_dir, files, manifest.parts[0].sha256


def spy_part_checks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """(blob sha256, whether the part had its own digest) for each part fetched."""
    seen: list[tuple[str, bool]] = []
    real = restore_fetch.Fetcher._fetch_part

    def counted(self, part, asm, progress):  # type: ignore[no-untyped-def]
        seen.append((part.group.sha256, bool(part.digest)))
        return real(self, part, asm, progress)

    monkeypatch.setattr(restore_fetch.Fetcher, "_fetch_part", counted)
    return seen


@pytest.mark.parametrize("seed", range(4))
def test_parts_with_digests_install_the_exact_bytes(tmp_path: Path, digested, seed: int,  # type: ignore[no-untyped-def]
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    store_dir, files, sha = digested
    seen = spy_part_checks(monkeypatch)
    hashing = spy_hashing(monkeypatch)
    r = restore_cells(JitteryStore(store_dir, seed), [CELL], NEURON, FP, tmp_path / "t",
                      workers=8, units=TINY_PARTS)
    assert r.error() is None, r.failures
    for name, data in files.items():
        assert (tmp_path / "t" / "neff" / name).read_bytes() == data
    # graph-a in the manifest's 1 MiB parts, each with its digest; graph-b (no digests) in the
    # policy's 64 KiB parts through the whole-file hash.
    assert sorted(d for s, d in seen if s == sha) == [True] * 4
    assert [d for s, d in seen if s != sha] == [False] * 16
    assert hashing["streamed"] <= 16


@pytest.mark.parametrize("where", [0, 1024 * KiB - 1, 2 * 1024 * KiB + 5, 3 * 1024 * KiB + 122])
def test_a_flipped_byte_fails_its_part_and_the_file_is_never_installed(  # type: ignore[no-untyped-def]
        tmp_path: Path, digested, where: int) -> None:
    store_dir, files, sha = digested
    flip_byte(store_dir / blob_key(sha), where)
    r = restore_cells(JitteryStore(store_dir, 3), [CELL], NEURON, FP, tmp_path / "t",
                      workers=8, units=TINY_PARTS)
    assert [f.kind for f in r.failures] == ["integrity"]
    assert f"part {where // (1024 * KiB) + 1} of 4" in r.failures[0].message
    assert "corrupt" in r.failures[0].message
    assert not (tmp_path / "t" / "neff" / "graph-a.neff").exists()
    assert (tmp_path / "t" / "neff" / "graph-b.neff").read_bytes() == files["graph-b.neff"]
    assert [p for p in (tmp_path / "t").rglob("*") if p.name.endswith(".tmp")] == []


def test_a_manifest_whose_part_digest_is_wrong_installs_nothing(tmp_path: Path, digested  # type: ignore[no-untyped-def]
                                                                ) -> None:
    """The blob is intact, but a part digest names other bytes: the file is refused, not
    installed on the strength of the other parts."""
    store_dir, _files, _sha = digested
    store = LocalStore(store_dir)
    key = next(k for k in store.list("manifests/"))
    doc = json.loads(store.read(key))
    doc["parts"][0]["digests"][2] = "0" * 64
    path = store_dir / key
    rewrite(path, encode_manifest(decode_manifest(json.dumps(doc))))
    assert key == manifest_key(decode_manifest(path.read_bytes()).entry_key)
    r = restore_cells(JitteryStore(store_dir, 4), [CELL], NEURON, FP, tmp_path / "t",
                      workers=8, units=TINY_PARTS)
    assert [f.kind for f in r.failures] == ["integrity"]
    assert "part 3 of 4" in r.failures[0].message
    assert not (tmp_path / "t" / "neff" / "graph-a.neff").exists()


def test_a_short_blob_with_digests_is_truncated_not_installed(tmp_path: Path, digested  # type: ignore[no-untyped-def]
                                                              ) -> None:
    store_dir, _files, sha = digested
    blob = store_dir / blob_key(sha)
    rewrite(blob, blob.read_bytes()[:2 * 1024 * KiB + 7])
    r = restore_cells(JitteryStore(store_dir, 5), [CELL], NEURON, FP, tmp_path / "t",
                      workers=8, units=TINY_PARTS)
    assert {f.kind for f in r.failures} == {"integrity"}
    assert "truncated" in r.failures[0].message
    assert not (tmp_path / "t" / "neff" / "graph-a.neff").exists()
