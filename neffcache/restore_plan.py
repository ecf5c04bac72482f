"""Restore planning (pure, no I/O): which files to fetch, which are already in place, which clash.

Input: the entries' manifests, the target directory of each cache root, and what a scan found
at each wanted path (size, sha256, mode). Output: a ``RestorePlan`` — fetch groups (one blob
fetched once, installed at every path that wants it), files already present and valid, and
conflicts. A conflict is two entries wanting different bytes at one path, which is common for
compile caches (files are named by their inputs, but .so/.gch/NEFF bytes are not always
reproducible): the first entry in the requested cell order wins that path, the others' records
are skipped and reported; a file already present and valid for any of the records is left.
Also the per-cell verdicts once the I/O is done, and the local state records that let a rerun
skip re-hashing unchanged files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from neffcache.errors import ManifestError
from neffcache.manifest import Manifest

STATE_FILE = ".neffcache-state.json"
STATE_SCHEMA = 1

FileId = tuple[str, str]  # (root, relative path)


@dataclass(frozen=True, slots=True)
class PresentFile:
    """What a scan found at a wanted path: ``sha256`` is None when it was not worth hashing."""

    size: int
    sha256: str | None
    mode: int


@dataclass(frozen=True, slots=True)
class Target:
    """One file to have in place: root, relative path and the bytes it must hold."""

    root: str
    path: str
    size: int
    sha256: str
    mode: int

    @property
    def id(self) -> FileId:
        return (self.root, self.path)


@dataclass(frozen=True, slots=True)
class FetchGroup:
    """One blob: fetched from the store into ``targets[0]``, copied locally to the others."""

    sha256: str
    size: int
    targets: tuple[Target, ...]


@dataclass(frozen=True, slots=True)
class Conflict:
    """Entries wanting different bytes at one path; ``entry_keys[0]``'s record won (first in
    cell order), ``sha256s`` are the distinct digests wanted, the winner's first."""

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
class RestorePlan:
    target_dirs: tuple[tuple[str, str], ...]
    fetch: tuple[FetchGroup, ...]
    present: tuple[Target, ...]
    conflicts: tuple[Conflict, ...]

    @property
    def files_to_fetch(self) -> int:
        return sum(len(g.targets) for g in self.fetch)

    @property
    def bytes_to_fetch(self) -> int:
        return sum(g.size for g in self.fetch)


def wanted_sizes(manifests: Iterable[Manifest]) -> dict[FileId, set[int]]:
    """Every path the entries want, with the sizes they want there (what a scan must look at)."""
    out: dict[FileId, set[int]] = {}
    for m in manifests:
        for f in m.files:
            out.setdefault((f.root, f.path), set()).add(f.size)
    return out


def plan_restore(manifests: Sequence[Manifest], target_dirs: Mapping[str, str],
                 present: Mapping[FileId, PresentFile]) -> RestorePlan:
    """Decide per wanted file: already valid, or fetch (grouped by sha256); note conflicts.

    Files are scheduled in manifest order (cell by cell) so a deadline leaves whole cells done.
    Where entries disagree about a path, the first manifest's record wins (a present file valid
    for any of the records is left in place) and the disagreement is listed in ``conflicts``.
    """
    wants: dict[FileId, list[tuple[str, Target]]] = {}
    for m in manifests:
        key = m.entry_key  # a digest: computed once per entry, not per file
        for f in m.files:
            if f.root not in target_dirs:
                raise ManifestError(f"entry {key[:12]}: file {f.root}/{f.path}: "
                                    f"root {f.root!r} has no target directory")
            fid = (f.root, f.path)
            claims = wants.get(fid)
            if claims is None:
                wants[fid] = [(key, Target(f.root, f.path, f.size, f.sha256, f.mode))]
            else:
                claims.append((key, Target(f.root, f.path, f.size, f.sha256, f.mode)))
    groups: dict[str, list[Target]] = {}
    valid: list[Target] = []
    conflicts: list[Conflict] = []
    for fid, claims in wants.items():  # hot loop (10,000s of files): no generators inside
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
        else:
            group = groups.get(t.sha256)
            if group is None:
                groups[t.sha256] = [t]
            else:
                group.append(t)
    fetch = tuple(FetchGroup(sha, ts[0].size, tuple(ts)) for sha, ts in groups.items())
    return RestorePlan(target_dirs=tuple(sorted(target_dirs.items())), fetch=fetch,
                       present=tuple(valid), conflicts=tuple(conflicts))


def cell_verdicts(manifests: Sequence[Manifest], in_place: set[FileId]
                  ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(restored, incomplete) cell ids: restored when every file of its entry is in place."""
    restored: list[str] = []
    incomplete: list[str] = []
    for m in manifests:
        ok = all((f.root, f.path) in in_place for f in m.files)
        (restored if ok else incomplete).append(m.cell.id)
    return tuple(restored), tuple(incomplete)


# --- the local state file: (path, size, mtime_ns, ctime_ns, inode) -> sha256, per root ------

@dataclass(frozen=True, slots=True)
class StateRecord:
    """A file as it was when neffcache last verified it; a match means "no need to re-hash"."""

    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    sha256: str
    mode: int

    def matches(self, size: int, mtime_ns: int, ctime_ns: int, inode: int) -> bool:
        return (self.size, self.mtime_ns, self.ctime_ns, self.inode) == \
            (size, mtime_ns, ctime_ns, inode)


def encode_state(records: Mapping[str, StateRecord]) -> bytes:
    files = {p: [r.size, r.mtime_ns, r.ctime_ns, r.inode, r.sha256, r.mode]
             for p, r in sorted(records.items())}
    return json.dumps({"schema_version": STATE_SCHEMA, "files": files},
                      separators=(",", ":")).encode("utf-8")


def decode_state(data: bytes) -> dict[str, StateRecord]:
    """Parse a state file; anything unexpected yields an empty state (files get re-hashed)."""
    try:
        doc: Any = json.loads(data)
        if doc.get("schema_version") != STATE_SCHEMA:
            return {}
        out = {}
        for path, (size, mtime, ctime, inode, sha, mode) in doc["files"].items():
            out[str(path)] = StateRecord(int(size), int(mtime), int(ctime), int(inode),
                                         str(sha), int(mode))
        return out
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}
