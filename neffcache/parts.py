"""Large files in parts (pure): which files publish records per-part digests for, and the
byte ranges of a file's parts.

A restore fetches a large file as parallel ranged reads of ``part_bytes`` each; with a digest
per part in the manifest (``Manifest.parts``) each part is verified as it arrives, on the thread
that fetched it, instead of the whole file being hashed in order at the end.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from neffcache.manifest import FileRecord, part_count

MiB = 1 << 20


@dataclass(frozen=True, slots=True)
class PartPolicy:
    """Files larger than ``over`` bytes are fetched (and, from publish, digested) in parts of
    ``part_bytes`` (a power of two, at least 1 MiB: the manifest accepts no other)."""

    part_bytes: int = 16 * MiB
    over: int = 24 * MiB


DEFAULT_PARTS = PartPolicy()


def needs_parts(files: Iterable[FileRecord], policy: PartPolicy = DEFAULT_PARTS
                ) -> tuple[FileRecord, ...]:
    """One record per distinct large blob, in sha256 order."""
    over = max(policy.over, policy.part_bytes)  # a file of one part has no part digests
    return tuple(sorted({f.sha256: f for f in files if f.size > over}.values(),
                        key=lambda f: f.sha256))


def part_ranges(size: int, part_bytes: int) -> tuple[tuple[int, int], ...]:
    """(start, length) of each part of a ``size``-byte file, in order."""
    return tuple((i * part_bytes, min(part_bytes, size - i * part_bytes))
                 for i in range(part_count(size, part_bytes)))
