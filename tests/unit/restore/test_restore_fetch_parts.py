"""A large blob fetched in ranged parts by many workers, each part checked against its own
digest from the manifest as it arrives; parts may land in any order; corrupt or short parts
never install the file. Publish digests 1 MiB parts here, so a few MiB exercise every path."""

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
from neffcache.restore.run import restore_cells
from neffcache.store import blob_key, manifest_key
from neffcache.store.local import LocalStore

FP = build_fingerprint("neuron", {"target": "trn2"})
KiB = 1 << 10
MiB_PARTS = PartPolicy(part_bytes=1024 * KiB, over=1024 * KiB)  # the smallest the manifest takes
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
def digested(tmp_path: Path) -> tuple[Path, dict[str, bytes], str]:
    """graph-a (3 MiB + 123) with four part digests; graph-b (exactly 1 MiB, one part) none: it
    comes in one GET."""
    store_dir, files, manifest = publish_two_graphs(tmp_path, parting=MiB_PARTS)
    assert [(len(p.digests), p.part_size) for p in manifest.parts] == [(4, 1024 * KiB)]
    return store_dir, files, manifest.parts[0].sha256


def spy_part_checks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(blob sha256, the part's digest) for each part fetched."""
    seen: list[tuple[str, str]] = []
    real = restore_fetch.Fetcher._fetch_part

    def counted(self, part, asm):  # type: ignore[no-untyped-def]
        seen.append((part.group.sha256, part.digest))
        return real(self, part, asm)

    monkeypatch.setattr(restore_fetch.Fetcher, "_fetch_part", counted)
    return seen


@pytest.mark.parametrize("seed", range(6))
def test_parts_in_any_order_install_the_exact_bytes(tmp_path: Path, digested, seed: int,  # type: ignore[no-untyped-def]
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    store_dir, files, sha = digested
    manifest = decode_manifest((next((store_dir / "manifests").rglob("*.json"))).read_bytes())
    seen = spy_part_checks(monkeypatch)
    r = restore_cells(JitteryStore(store_dir, seed), [CELL], NEURON, FP, tmp_path / "t",
                      workers=8)
    assert r.error() is None, r.failures
    for name, data in files.items():
        assert (tmp_path / "t" / "neff" / name).read_bytes() == data
    # graph-a in the manifest's 1 MiB parts, each with its own digest; graph-b in one GET.
    assert sorted(seen) == sorted((sha, d) for d in manifest.parts[0].digests)


@pytest.mark.parametrize("where", [0, 1024 * KiB - 1, 2 * 1024 * KiB + 5, 3 * 1024 * KiB + 122])
def test_a_flipped_byte_fails_its_part_and_the_file_is_never_installed(  # type: ignore[no-untyped-def]
        tmp_path: Path, digested, where: int) -> None:
    store_dir, files, sha = digested
    flip_byte(store_dir / blob_key(sha), where)
    r = restore_cells(JitteryStore(store_dir, 3), [CELL], NEURON, FP, tmp_path / "t", workers=8)
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
    doc.pop("manifest_sha256", None)  # the field checks are under test, not the digest
    doc["parts"][0]["digests"][2] = "0" * 64
    path = store_dir / key
    rewrite(path, encode_manifest(decode_manifest(json.dumps(doc))))
    assert key == manifest_key(decode_manifest(path.read_bytes()).entry_key)
    r = restore_cells(JitteryStore(store_dir, 4), [CELL], NEURON, FP, tmp_path / "t", workers=8)
    assert [f.kind for f in r.failures] == ["integrity"]
    assert "part 3 of 4" in r.failures[0].message
    assert not (tmp_path / "t" / "neff" / "graph-a.neff").exists()


def test_a_short_blob_with_digests_is_truncated_not_installed(tmp_path: Path, digested  # type: ignore[no-untyped-def]
                                                              ) -> None:
    store_dir, _files, sha = digested
    blob = store_dir / blob_key(sha)
    rewrite(blob, blob.read_bytes()[:2 * 1024 * KiB + 7])
    r = restore_cells(JitteryStore(store_dir, 5), [CELL], NEURON, FP, tmp_path / "t", workers=8)
    assert {f.kind for f in r.failures} == {"integrity"}
    assert "truncated" in r.failures[0].message
    assert not (tmp_path / "t" / "neff" / "graph-a.neff").exists()
