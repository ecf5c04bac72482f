"""Which small blobs go into which pack (pure, no I/O)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from neffcache.manifest import FileRecord

KiB, MiB = 1 << 10, 1 << 20
_SPAN = 1 << 64


@dataclass(frozen=True, slots=True)
class PackPolicy:
    """Files up to ``member_max`` bytes are packed when an entry has at least ``min_files``
    of them (below that, one request per file costs little); packs average ``target`` bytes,
    never exceed ``max_bytes`` (unless one member is larger) and are at least ``min_bytes``."""

    member_max: int = 1 * MiB
    min_files: int = 128
    target: int = 16 * MiB
    min_bytes: int = 2 * MiB
    max_bytes: int = 32 * MiB


DEFAULT_POLICY = PackPolicy()


def plan_packs(files: Iterable[FileRecord], policy: PackPolicy = DEFAULT_POLICY
               ) -> tuple[tuple[FileRecord, ...], ...]:
    """The members of each pack, in pack order; () when packing would not pay."""
    small = sorted({f.sha256: f for f in files if f.size <= policy.member_max}.values(),
                   key=lambda f: f.sha256)
    if len(small) < policy.min_files:
        return ()
    packs: list[list[FileRecord]] = [[]]  # the last one is being filled
    size = 0
    for f in small:
        if packs[-1] and size + f.size > policy.max_bytes:
            packs.append([])
            size = 0
        packs[-1].append(f)
        size += f.size
        if size >= policy.min_bytes and _cuts_after(f, policy.target):
            packs.append([])
            size = 0
    return tuple(tuple(p) for p in packs if p)


def _cuts_after(f: FileRecord, target: int) -> bool:
    """True with probability size/target, decided by the member's sha256 alone: entries with
    the same small files build the same packs, which the store keeps once."""
    return int(f.sha256[:16], 16) < _SPAN * min(f.size, target) // target
