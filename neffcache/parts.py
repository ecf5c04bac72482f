"""Large files in parts: which need per-part digests, and their byte ranges (pure)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

MiB = 1 << 20
PART_BYTES = 16 * MiB  # the part size publish digests at
REQUIRED_OVER = 24 * MiB  # larger files need part digests: restore checks each ranged read
MIN_PART_SIZE = 1 << 20
MAX_PART_SIZE = 1 << 30


class _Sized(Protocol):
    @property
    def size(self) -> int: ...

    @property
    def sha256(self) -> str: ...


F = TypeVar("F", bound=_Sized)


@dataclass(frozen=True, slots=True)
class PartPolicy:
    """Files larger than ``over`` bytes are digested by publish in parts of ``part_bytes`` (a
    power of two); at most ``REQUIRED_OVER`` each: more files than required, never fewer."""

    part_bytes: int = PART_BYTES
    over: int = REQUIRED_OVER

    def __post_init__(self) -> None:
        if not MIN_PART_SIZE <= self.part_bytes <= MAX_PART_SIZE \
                or self.part_bytes & (self.part_bytes - 1):
            raise ValueError(f"part_bytes {self.part_bytes}: expected a power of two from "
                             f"{MIN_PART_SIZE} to {MAX_PART_SIZE}")
        if max(self.over, self.part_bytes) > REQUIRED_OVER:
            raise ValueError(f"over {self.over} and part_bytes {self.part_bytes}: expected at "
                             f"most {REQUIRED_OVER} (files larger than that need part digests)")


DEFAULT_PARTS = PartPolicy()


def part_count(size: int, part_size: int) -> int:
    return max(1, -(-size // part_size))


def needs_parts(files: Iterable[F], policy: PartPolicy = DEFAULT_PARTS) -> tuple[F, ...]:
    """One record per distinct large blob, in sha256 order."""
    over = max(policy.over, policy.part_bytes)  # a file of one part has no part digests
    return tuple(sorted({f.sha256: f for f in files if f.size > over}.values(),
                        key=lambda f: f.sha256))


def part_ranges(size: int, part_bytes: int) -> tuple[tuple[int, int], ...]:
    return tuple((i * part_bytes, min(part_bytes, size - i * part_bytes))
                 for i in range(part_count(size, part_bytes)))
