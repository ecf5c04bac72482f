"""The whole restore plan, cell by cell in priority order (pure, no I/O)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from neffcache.errors import ManifestError
from neffcache.manifest import FileRecord, Manifest, PackRecord, PartDigests
from neffcache.parts import part_count, part_ranges

FileId = tuple[str, str]  # (root, relative path)
MiB = 1 << 20


@dataclass(frozen=True, slots=True)
class PresentFile:
    """What a scan found at a wanted path: ``sha256`` is None when it was not worth hashing."""

    size: int
    sha256: str | None
    mode: int


# One file to have in place: root, relative path and the bytes it must hold. The manifest's
# own record, not a copy of it (72 bytes per file, 69 MiB per million, held through apply).
Target = FileRecord


@dataclass(frozen=True, slots=True)
class FetchGroup:
    """One blob: fetched into ``targets[0]``, copied locally to the others; ``owners[i]``: the cells
    (indices in the plan's manifest order) whose entries want ``targets[i]``'s path."""

    sha256: str
    size: int
    targets: tuple[Target, ...]
    owners: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class Conflict:
    """Entries wanting different bytes at one path; ``entry_keys[0]``'s record won (first in cell
    order), ``sha256s`` are the distinct digests wanted, the winner's first."""

    root: str
    path: str
    entry_keys: tuple[str, ...]
    sha256s: tuple[str, ...]

    @property
    def message(self) -> str:
        return (f"{self.root}/{self.path}: entries {', '.join(k[:12] for k in self.entry_keys)} "
                f"want different bytes (sha256 {', '.join(s[:12] for s in self.sha256s)}); "
                f"kept entry {self.entry_keys[0][:12]}'s")


@dataclass(frozen=True, slots=True)
class UnitPolicy:
    run_bytes: int = 8 * MiB  # a ranged read of a pack covers at most this (unless one member)
    gap_bytes: int = 1 * MiB  # unneeded pack bytes worth reading to save a request


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
    """Part ``index`` of ``count`` of a large blob: ``length`` bytes from ``start``, ``digest``."""

    group: FetchGroup
    index: int
    count: int
    start: int
    length: int
    digest: str


Unit = PackRun | BlobGet | BlobPart


@dataclass(frozen=True, slots=True)
class RestorePlan:
    """Files already in place, fetch groups, their store requests in run order, conflicts."""

    target_dirs: tuple[tuple[str, str], ...]
    fetch: tuple[FetchGroup, ...]
    present: tuple[Target, ...]
    conflicts: tuple[Conflict, ...]
    units: tuple[Unit, ...] = ()
    # Per manifest (cell), in order: how many of its paths are to be fetched (0: ready now).
    waiting: tuple[int, ...] = ()

    @property
    def files_to_fetch(self) -> int:
        return sum(len(g.targets) for g in self.fetch)

    @property
    def bytes_to_fetch(self) -> int:
        return sum(g.size for g in self.fetch)

    @property
    def requests(self) -> int:
        return len(self.units)


def wanted_sizes(manifests: Iterable[Manifest]) -> dict[FileId, tuple[int, ...]]:
    """Every path the entries want, with the distinct sizes wanted there."""
    # a tuple of sizes, not a set: 50, not 200, MiB per million paths
    out: dict[FileId, tuple[int, ...]] = {}
    for m in manifests:
        for f in m.files:
            fid = (f.root, f.path)
            have = out.get(fid)
            if have is None:
                out[fid] = (f.size,)
            elif f.size not in have:
                out[fid] = (*have, f.size)
    return out


def wanted_pairs(manifests: Sequence[Manifest]) -> Iterator[tuple[FileId, tuple[int, ...]]]:
    """``wanted_sizes(manifests).items()``, without the ~170 MiB map for one entry."""
    if len(manifests) == 1:
        return (((f.root, f.path), (f.size,)) for f in manifests[0].files)
    return iter(wanted_sizes(manifests).items())


def unwanted_files(manifests: Iterable[Manifest], have: Iterable[FileId]) -> set[FileId]:
    """The files of ``have`` that no entry wants (no map of every wanted path)."""
    left: dict[str, set[str]] = {}
    for root, path in have:
        left.setdefault(root, set()).add(path)
    for m in manifests if left else ():
        for f in m.files:
            paths = left.get(f.root)
            if paths:
                paths.discard(f.path)
    return {(root, p) for root, paths in left.items() for p in paths}


def plan_restore(manifests: Sequence[Manifest], target_dirs: Mapping[str, str],
                 present: Mapping[FileId, PresentFile], policy: UnitPolicy = DEFAULT_UNITS
                 ) -> RestorePlan:
    """Decide per wanted file: already valid, or fetch (grouped by sha256, for the first cell of
    ``manifests``, in priority order, that wants it). Where entries disagree, the first manifest's
    record wins (a present file valid for any of them is left): a ``Conflict``."""
    single = len(manifests) == 1
    wants = _one_claims(manifests[0], target_dirs) if single else \
        iter(_claims(manifests, target_dirs).items())
    index = {} if single else {m.entry_key: i for i, m in enumerate(manifests)}
    groups: dict[str, list[Target]] = {}
    owned: dict[str, list[tuple[int, ...]]] = {}  # per group, its paths' cells (several only)
    interned: dict[tuple[int, ...], tuple[int, ...]] = {}
    waiting = [0] * len(manifests)
    valid: list[Target] = []
    conflicts: list[Conflict] = []
    for fid, claim in wants:  # hot loop (up to 1,000,000 files): no generators inside
        claims = claim if isinstance(claim, list) else (claim,)
        t = claims[0][1]
        if len(claims) > 1 and any((c.sha256, c.size) != (t.sha256, t.size)
                                   for _, c in claims):
            conflicts.append(Conflict(fid[0], fid[1],
                                      tuple(dict.fromkeys(k for k, _ in claims)),
                                      tuple(dict.fromkeys(c.sha256 for _, c in claims))))
        have = present.get(fid)
        match = None
        if have is not None:
            for _, c in claims:
                if have.sha256 == c.sha256 and have.size == c.size and have.mode == c.mode:
                    match = c
                    break
        if match is not None:
            valid.append(match)
            continue
        group = groups.get(t.sha256)
        if group is None:
            groups[t.sha256] = [t]
        else:
            group.append(t)
        if not single:  # (one entry: it waits for every path to fetch, counted below)
            owned.setdefault(t.sha256, []).append(_wait(claims, index, interned, waiting))
    del wants
    if single:
        waiting[0] = sum(len(ts) for ts in groups.values())
    sole: dict[tuple[int, ...], tuple[tuple[int, ...]]] = {}
    fetch = tuple(FetchGroup(sha, ts[0].size, tuple(ts), _owners(ts, owned.get(sha), sole))
                  for sha, ts in groups.items())
    del groups, owned
    units = plan_units(fetch, [p for m in manifests for p in m.packs], policy,
                       [p for m in manifests for p in m.parts]) if fetch else ()
    return RestorePlan(target_dirs=tuple(sorted(target_dirs.items())), fetch=fetch,
                       present=tuple(valid), conflicts=tuple(conflicts), units=units,
                       waiting=tuple(waiting))


def _wait(claims: Sequence[_Claim], index: Mapping[str, int],
          interned: dict[tuple[int, ...], tuple[int, ...]], waiting: list[int]
          ) -> tuple[int, ...]:
    """The cells whose entries claim a path to fetch (each waits for one more path)."""
    who = (index[claims[0][0]],) if len(claims) == 1 else \
        tuple(dict.fromkeys(index[k] for k, _ in claims))
    who = interned.setdefault(who, who)
    for i in who:
        waiting[i] += 1
    return who


def _owners(targets: list[Target], owned: list[tuple[int, ...]] | None,
            sole: dict[tuple[int, ...], tuple[tuple[int, ...]]]) -> tuple[tuple[int, ...], ...]:
    """A group's ``owners``, the common shapes shared rather than one tuple per group."""
    if owned is None:  # a one-entry plan: one shared constant (``t * 1`` is ``t``)
        return ((0,),) * len(targets)
    if len(owned) == 1:
        return sole.setdefault(owned[0], (owned[0],))
    return tuple(owned)


_Claim = tuple[str, Target]  # (entry key, what it wants at a path)


def _one_claims(m: Manifest, target_dirs: Mapping[str, str]) -> Iterator[tuple[FileId, _Claim]]:
    key = m.entry_key
    for f in m.files:
        if f.root not in target_dirs:
            raise _no_target(key, f)
        yield (f.root, f.path), (key, f)


def _no_target(key: str, f: FileRecord) -> ManifestError:
    return ManifestError(f"entry {key[:12]}: file {f.root}/{f.path}: root {f.root!r} has no "
                         f"target directory")


def _claims(manifests: Sequence[Manifest], target_dirs: Mapping[str, str]
            ) -> dict[FileId, _Claim | list[_Claim]]:
    """Per wanted path: the one entry's claim, or a list of them in manifest order."""
    # a tuple for a path one entry claims, not a list: 90 MiB less per million files
    wants: dict[FileId, _Claim | list[_Claim]] = {}
    for m in manifests:
        for fid, claim in _one_claims(m, target_dirs):
            have = wants.get(fid)
            if have is None:
                wants[fid] = claim
            elif isinstance(have, list):
                have.append(claim)
            else:
                wants[fid] = [have, claim]
    return wants


def unit_groups(unit: Unit) -> tuple[FetchGroup, ...]:
    return tuple(s.group for s in unit.slices) if isinstance(unit, PackRun) else (unit.group,)


def plan_units(fetch: Sequence[FetchGroup], packs: Iterable[PackRecord],
               policy: UnitPolicy = DEFAULT_UNITS,
               parts: Iterable[PartDigests] = ()) -> tuple[Unit, ...]:
    """Requests for every group: from the first of ``packs`` that holds it, else in parts (of the
    first of ``parts`` for its size), else one GET. Cell by cell; within a cell the parts first,
    largest blob first (the longest work must not be its cell's tail), then fetch order."""
    order = {g.sha256: i for i, g in enumerate(fetch)}
    where: dict[str, tuple[str, int]] = {}
    for p in packs:
        for m in p.members:
            if m.sha256 in order:  # not a map of every member for a few files to fetch
                where.setdefault(m.sha256, (p.sha256, m.offset))
    digests: dict[str, PartDigests] = {}
    for d in parts:
        digests.setdefault(d.sha256, d)
    keyed: list[tuple[tuple[int, int, int, int, int], Unit]] = []
    in_packs: dict[str, list[Slice]] = {}
    for g in fetch:
        if g.sha256 in where and g.size > 0:
            pack, offset = where[g.sha256]
            in_packs.setdefault(pack, []).append(Slice(g, offset))
        elif (pd := _digests_for(g, digests)) is not None:
            ranges = part_ranges(g.size, pd.part_size)
            for i, (start, length) in enumerate(ranges):
                keyed.append(((_rank(g), 0, -g.size, order[g.sha256], i), BlobPart(
                    g, i, len(ranges), start, length, pd.digests[i])))
        else:
            keyed.append(((_rank(g), 1, 0, order[g.sha256], 0), BlobGet(g)))
    for pack, slices in in_packs.items():
        for run in _runs(pack, sorted(slices, key=lambda s: s.offset), policy):
            keyed.append(((min(_rank(s.group) for s in run.slices), 1, 0,
                           min(order[s.group.sha256] for s in run.slices), 0), run))
    keyed.sort(key=lambda k: k[0])
    return tuple(u for _, u in keyed)


def _rank(g: FetchGroup) -> int:
    owners = g.owners
    if len(owners) == 1:
        return owners[0][0]
    return min(o[0] for o in owners) if owners else 0


def _digests_for(g: FetchGroup, digests: dict[str, PartDigests]) -> PartDigests | None:
    d = digests.get(g.sha256)
    if d is None or g.size <= d.part_size or len(d.digests) != part_count(g.size, d.part_size):
        return None  # not for a file of this size (a manifest that disagrees on it)
    return d


def _runs(pack: str, slices: list[Slice], policy: UnitPolicy) -> list[PackRun]:
    """Cut offset-sorted slices into runs within the policy's gap and length."""
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


def cell_verdicts(manifests: Sequence[Manifest], in_place: set[FileId]
                  ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(restored, incomplete) cell ids: restored when every file of its entry is in place."""
    restored: list[str] = []
    incomplete: list[str] = []
    for m in manifests:
        ok = all((f.root, f.path) in in_place for f in m.files)
        (restored if ok else incomplete).append(m.cell.id)
    return tuple(restored), tuple(incomplete)


def short_cells(manifests: Sequence[Manifest], target_dirs: Mapping[str, str],
                present: Mapping[FileId, PresentFile]) -> set[str]:
    """The cells ``cell_verdicts`` would call incomplete after ``plan_restore``, without the plan:
    nothing is held per file but for those whose own record is not what is there."""
    doubt: dict[FileId, list[str]] = {}  # a path, and the cells whose record it did not match
    for m in manifests:
        for f in m.files:
            if f.root not in target_dirs:
                raise _no_target(m.entry_key, f)
            if not _is(present.get((f.root, f.path)), f):
                doubt.setdefault((f.root, f.path), []).append(m.cell.id)
    saved: set[FileId] = set()  # valid for another entry's record there: in place after all
    for m in manifests if doubt else ():
        for f in m.files:
            fid = (f.root, f.path)
            if fid in doubt and fid not in saved and _is(present.get(fid), f):
                saved.add(fid)
    return {c for fid, cells in doubt.items() if fid not in saved for c in cells}


def _is(have: PresentFile | None, f: FileRecord) -> bool:
    return have is not None and (have.sha256, have.size, have.mode) == (f.sha256, f.size, f.mode)
