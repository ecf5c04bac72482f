"""Fetch planning (pure, no I/O): which store requests bring the blobs a restore plan needs.

A blob the entries' packs hold is read from its pack: needed members close together in one
pack become one ranged read (``PackRun``), joining across gaps of unneeded bytes up to
``gap_bytes`` and stopping at ``run_bytes``, so thousands of small files cost a few dozen
requests. Other blobs are one GET each (``BlobGet``), and large ones several ranged GETs in
parallel (``BlobPart``), written in place; each part is verified against its own digest where
the manifest has part digests for the blob (split at the manifest's part size), else the whole
file is hashed in order as the parts land. Units come out in the order of the plan's groups
(cell by cell), so a deadline still leaves whole cells done.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from neffcache.manifest import PackRecord, PartDigests, part_count
from neffcache.parts import DEFAULT_PARTS, part_ranges
from neffcache.restore_plan import FetchGroup

MiB = 1 << 20


@dataclass(frozen=True, slots=True)
class UnitPolicy:
    run_bytes: int = 8 * MiB  # a ranged read of a pack covers at most this (unless one member)
    gap_bytes: int = 1 * MiB  # unneeded pack bytes worth reading to save a request
    part_bytes: int = DEFAULT_PARTS.part_bytes  # large blobs are fetched in parts this size...
    split_over: int = DEFAULT_PARTS.over  # ...when they are larger than this (without digests)


DEFAULT_UNITS = UnitPolicy()


@dataclass(frozen=True, slots=True)
class Slice:
    """A group's bytes inside a pack, at ``offset`` from the pack's start."""

    group: FetchGroup
    offset: int


@dataclass(frozen=True, slots=True)
class PackRun:
    """One ranged read of a pack: ``length`` bytes from ``start``, holding ``slices``."""

    pack: str  # the pack's sha256
    start: int
    length: int
    slices: tuple[Slice, ...]


@dataclass(frozen=True, slots=True)
class BlobGet:
    """One GET of a whole blob."""

    group: FetchGroup


@dataclass(frozen=True, slots=True)
class BlobPart:
    """Part ``index`` of ``count`` of a large blob: ``length`` bytes from ``start``, with their
    sha256 when the manifest has it (then every part of the blob has one)."""

    group: FetchGroup
    index: int
    count: int
    start: int
    length: int
    digest: str = ""


Unit = PackRun | BlobGet | BlobPart


def unit_groups(unit: Unit) -> tuple[FetchGroup, ...]:
    return tuple(s.group for s in unit.slices) if isinstance(unit, PackRun) else (unit.group,)


def plan_units(fetch: Sequence[FetchGroup], packs: Iterable[PackRecord],
               policy: UnitPolicy = DEFAULT_UNITS,
               parts: Iterable[PartDigests] = ()) -> tuple[Unit, ...]:
    """Requests for every group of ``fetch``; a blob held by several packs is read from the
    first of ``packs`` (pass them in cell order) that holds it, and split at the part size of
    the first of ``parts`` that describes it.

    Order: the parts of split blobs first, largest blob first, then the rest in fetch order.
    A split blob's sha256 runs through its parts in order, one part after another, so the
    largest blob is the restore's critical path: starting it first overlaps its hashing with
    everything else instead of leaving it as the tail."""
    where: dict[str, tuple[str, int]] = {}
    for p in packs:
        for m in p.members:
            where.setdefault(m.sha256, (p.sha256, m.offset))
    digests: dict[str, PartDigests] = {}
    for d in parts:
        digests.setdefault(d.sha256, d)
    order = {g.sha256: i for i, g in enumerate(fetch)}
    keyed: list[tuple[tuple[int, int, int, int], Unit]] = []
    in_packs: dict[str, list[Slice]] = {}
    for g in fetch:
        if g.sha256 in where and g.size > 0:
            pack, offset = where[g.sha256]
            in_packs.setdefault(pack, []).append(Slice(g, offset))
        elif (d := _digests_for(g, digests)) is not None or g.size > policy.split_over:
            ranges = part_ranges(g.size, d.part_size if d else policy.part_bytes)
            for i, (start, length) in enumerate(ranges):
                keyed.append(((0, -g.size, order[g.sha256], i), BlobPart(
                    g, i, len(ranges), start, length, d.digests[i] if d else "")))
        else:
            keyed.append(((1, 0, order[g.sha256], 0), BlobGet(g)))
    for pack, slices in in_packs.items():
        for run in _runs(pack, sorted(slices, key=lambda s: s.offset), policy):
            keyed.append(((1, 0, min(order[s.group.sha256] for s in run.slices), 0), run))
    keyed.sort(key=lambda k: k[0])
    return tuple(u for _, u in keyed)


def _digests_for(g: FetchGroup, digests: dict[str, PartDigests]) -> PartDigests | None:
    d = digests.get(g.sha256)
    if d is None or g.size <= d.part_size or len(d.digests) != part_count(g.size, d.part_size):
        return None  # not for a file of this size (a manifest that disagrees on it)
    return d


def _runs(pack: str, slices: list[Slice], policy: UnitPolicy) -> list[PackRun]:
    """Cut offset-sorted slices into runs: a new run when the gap or the length would grow
    past the policy's limits."""
    runs: list[PackRun] = []
    current: list[Slice] = []
    start = end = 0
    for s in slices:
        s_end = s.offset + s.group.size
        if current and (s.offset - end > policy.gap_bytes or s_end - start > policy.run_bytes):
            runs.append(PackRun(pack, start, end - start, tuple(current)))
            current = []
        if not current:
            start = s.offset
        current.append(s)
        end = s_end
    if current:
        runs.append(PackRun(pack, start, end - start, tuple(current)))
    return runs
