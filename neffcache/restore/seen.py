"""What a scan found in place, held small (issue 22). Pure."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from neffcache.restore.plan import FileId, PresentFile


class Present(Mapping[FileId, PresentFile]):
    """What is in place at each wanted path: ``odd`` as found, ``seen`` as ``against`` says."""

    __slots__ = ("against", "odd", "seen")

    def __init__(self, against: Mapping[FileId, Any]) -> None:
        self.against = against
        self.odd: dict[FileId, PresentFile] = {}
        self.seen: dict[str, set[str]] = {}

    def see(self, fid: FileId) -> None:
        """``fid`` is in place exactly as ``against`` vouches for it."""
        self.odd.pop(fid, None)
        self.seen.setdefault(fid[0], set()).add(fid[1])

    def holds(self, fid: FileId) -> bool:
        return fid[1] in self.seen.get(fid[0], ())

    def get(self, key: FileId, default: Any = None) -> Any:
        have = self.odd.get(key)
        if have is None and self.holds(key):
            r = self.against[key]
            return PresentFile(r.size, r.sha256, r.mode)
        return default if have is None else have

    def __getitem__(self, key: FileId) -> PresentFile:
        have = self.get(key)
        if have is None:
            raise KeyError(key)
        return have  # type: ignore[no-any-return]

    def __contains__(self, key: object) -> bool:
        return key in self.odd or (isinstance(key, tuple) and len(key) == 2
                                   and self.holds(key))  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[FileId]:
        yield from self.odd
        for root, paths in self.seen.items():
            yield from ((root, p) for p in paths if (root, p) not in self.odd)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def keep(self, wanted: Mapping[FileId, Any], drop: Mapping[FileId, Any]) -> Present:
        """Those of these files that are ``wanted`` and not in ``drop``."""
        out = Present(self.against)
        out.odd = {k: p for k, p in self.odd.items() if k in wanted and k not in drop}
        for root, paths in self.seen.items():
            mine = {p for p in paths if (root, p) in wanted and (root, p) not in drop}
            if mine:
                out.seen[root] = mine
        return out

    def merge(self, other: Present) -> Present:
        """These files and ``other``'s (compared with the same ``against``)."""
        if other.against is not self.against:
            raise ValueError("Present.merge: scans compared with different records")
        out = Present(self.against)
        out.odd = self.odd | other.odd
        for root in {*self.seen, *other.seen}:
            out.seen[root] = self.seen.get(root, set()) | other.seen.get(root, set())
        return out


class Vouched(Mapping[FileId, Any]):
    """The durable records kept: each ``seen`` file not ``replaced`` this run, and ``extra``."""

    __slots__ = ("_extra", "_present", "_replaced")

    def __init__(self, present: Present, replaced: Mapping[FileId, Any],
                 extra: Mapping[FileId, Any]) -> None:
        self._present, self._replaced, self._extra = present, replaced, extra

    def _seen(self, key: FileId) -> bool:
        return self._present.holds(key) and key not in self._replaced

    def __getitem__(self, key: FileId) -> Any:
        if key in self._extra:
            return self._extra[key]
        if isinstance(key, tuple) and self._seen(key):
            return self._present.against[key]
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return key in self._extra or (isinstance(key, tuple) and len(key) == 2
                                      and self._seen(key))  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[FileId]:
        extra = self._extra
        yield from extra
        for root, paths in self._present.seen.items():
            yield from (k for p in paths if (k := (root, p)) not in extra and self._seen(k))

    def __len__(self) -> int:
        return sum(1 for _ in self)
