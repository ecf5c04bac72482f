"""Synthetic TorchNeuron-layout caches for tests: deterministic from a seed, no compiler needed.

Layout as TorchNeuron writes it: ``<k[0:2]>/<k[2:4]>/<k>.neff`` (32-hex key) for graphs and
``<sha256>/<sha256>.neff`` for kernels; mostly small files (KiB), a few large ones (MiB), and a
share of duplicate contents (the same bytes at several paths). Also the droppings a real cache
has that must never be captured: a lock file, a temp file and a dotfile.
"""

from __future__ import annotations

import hashlib
import random
from collections import deque
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class SyntheticCache:
    root: Path
    files: dict[str, bytes]  # relative path -> contents (only what a publish must capture)

    @property
    def total_bytes(self) -> int:
        return sum(len(b) for b in self.files.values())

    @property
    def unique_contents(self) -> int:
        return len(set(self.files.values()))


def make_neff_cache(root: Path, *, seed: int = 0, count: int = 100, large: int = 2,
                    small_size: tuple[int, int] = (512, 8192),
                    large_size: tuple[int, int] = (1 << 20, 3 << 20),
                    duplicate_ratio: float = 0.1, kernel_ratio: float = 0.2,
                    droppings: bool = True) -> SyntheticCache:
    """Write ``count`` files (``large`` of them MiB-sized) under ``root``; return what was
    written. The same arguments always give the same paths and bytes."""
    rng = random.Random(seed)
    files: dict[str, bytes] = {}
    previous: list[bytes] = []
    for i in range(count):
        if previous and rng.random() < duplicate_ratio:
            data = rng.choice(previous)
        else:
            lo, hi = large_size if i < large else small_size
            data = _payload(rng, rng.randint(lo, hi))
            previous.append(data)
        if rng.random() < kernel_ratio:
            digest = hashlib.sha256(f"{seed}/{i}".encode()).hexdigest()
            rel = f"{digest}/{digest}.neff"
        else:
            key = hashlib.md5(f"{seed}/{i}".encode()).hexdigest()  # noqa: S324 - a name only
            rel = f"{key[:2]}/{key[2:4]}/{key}.neff"
        files[rel] = data
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    if droppings:
        root.mkdir(parents=True, exist_ok=True)
        (root / "ab.lock").write_bytes(b"")
        (root / "tmpx1y2z3.neff").write_bytes(b"partial")
        (root / ".hidden").write_bytes(b"not a cache file")
    return SyntheticCache(root=root, files=files)


def _payload(rng: random.Random, size: int) -> bytes:
    """Pseudo-random bytes with a NEFF-like header, cheap to make in bulk."""
    head = b"NEFF\x00\x01" + rng.getrandbits(64).to_bytes(8, "little")
    block = rng.randbytes(min(size, 4096))
    body = (block * (size // max(len(block), 1) + 1))[: max(size - len(head), 0)]
    # Vary every 4 KiB so repeated blocks do not make large files identical to one another.
    out = bytearray(head + body)
    for off in range(len(head), len(out), 4096):
        out[off] = rng.getrandbits(8)
    return bytes(out[:size])


def read_tree(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` (no symlinks), by relative POSIX path."""
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


# --- benchmark profiles -----------------------------------------------------------------------

KiB, MiB = 1 << 10, 1 << 20


@dataclass(frozen=True, slots=True)
class Profile:
    """A cache shape: ``small`` files log-uniform in ``small_size``, ``large`` files spread
    geometrically over ``large_size`` (bytes), a share of repeated contents."""

    name: str
    small: int
    small_size: tuple[int, int]
    large: int = 0
    large_size: tuple[int, int] = (16 * MiB, 256 * MiB)
    duplicate_ratio: float = 0.02


PROFILES = {
    # Eager mode: one NEFF per op, thousands of them, KiB-sized.
    "eager": Profile("eager", small=3000, small_size=(8 * KiB, 256 * KiB)),
    # Compiled mode: a few whole-graph NEFFs of tens to hundreds of MiB, plus small files.
    "compiled": Profile("compiled", small=200, small_size=(1 * KiB, 64 * KiB), large=3,
                        large_size=(16 * MiB, 256 * MiB)),
    # Many tiny files: what a no-op restore (everything present) has to look at.
    "noop": Profile("noop", small=10_000, small_size=(512, 4 * KiB)),
}


@dataclass(frozen=True, slots=True)
class ProfileTree:
    root: Path
    files: dict[str, tuple[int, str]]  # relative path -> (size, sha256)

    @property
    def total_bytes(self) -> int:
        return sum(size for size, _ in self.files.values())

    @property
    def unique_bytes(self) -> int:
        return sum(size for size, _ in {sha: (size, sha) for size, sha in
                                        self.files.values()}.values())


def make_profile_cache(root: Path, profile: Profile, *, seed: int = 0) -> ProfileTree:
    """Write ``profile`` under ``root`` in TorchNeuron's layout with incompressible contents
    (servers that compress must not get an easy ride); deterministic from the seed. Contents
    are written as they are made; only the last few small ones are kept for repeats."""
    rng = random.Random(f"{profile.name}/{seed}")
    files: dict[str, tuple[int, str]] = {}
    previous: deque[bytes] = deque(maxlen=64)
    lo, hi = profile.large_size
    for i in range(profile.large + profile.small):
        if i < profile.large:
            frac = i / (profile.large - 1) if profile.large > 1 else 1.0
            data = _random_neff(rng, int(lo * (hi / lo) ** frac))
        elif previous and rng.random() < profile.duplicate_ratio:
            data = rng.choice(previous)
        else:
            a, b = profile.small_size
            data = _random_neff(rng, int(a * (b / a) ** rng.random()))
            previous.append(data)
        if i % 5 == 4:  # kernels: <sha256>/<sha256>.neff
            digest = hashlib.sha256(f"{profile.name}/{seed}/{i}".encode()).hexdigest()
            rel = f"{digest}/{digest}.neff"
        else:
            key = hashlib.md5(f"{profile.name}/{seed}/{i}".encode()).hexdigest()  # noqa: S324
            rel = f"{key[:2]}/{key[2:4]}/{key}.neff"
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        files[rel] = (len(data), hashlib.sha256(data).hexdigest())
    return ProfileTree(root=root, files=files)


def _random_neff(rng: random.Random, size: int) -> bytes:
    head = b"NEFF\x00\x01"
    return (head + rng.randbytes(max(size - len(head), 0)))[:size]
