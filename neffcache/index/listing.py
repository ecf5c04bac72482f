"""How ``ls`` reads entries over a ``Reader`` (no SQLAlchemy); the listings' keyset cursors."""

from __future__ import annotations

import fnmatch
import itertools
import re
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from neffcache.errors import UsageError
from neffcache.index.values import EntrySummary, as_utc

Shape = tuple[tuple[str, Any], ...]  # a statement's variant: which filters it has
LIKE_ESCAPE = "\\"
_LIKE = {"*": "%", "?": "_", **{ch: LIKE_ESCAPE + ch for ch in ("%", "_", LIKE_ESCAPE)}}
HEX = re.compile(r"[0-9a-f]{1,64}")
BATCH = 1000  # rows per fetch when streaming
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

CURSOR_PATTERN = r"^[0-9]{1,17}\.[0-9a-f]{1,64}$"  # every string it matches is a cursor
ID_CURSOR_PATTERN = r"^[0-9]{1,17}\.[0-9]{1,18}$"  # a cursor of a listing keyed by integer ids
NAME_CURSOR_PATTERN = r"^[0-9]{1,17}\.[0-9A-Za-z_-]{1,64}$"  # ... keyed by names (run ids)
_PATTERNS = {p: re.compile(p) for p in (CURSOR_PATTERN, ID_CURSOR_PATTERN,
                                        NAME_CURSOR_PATTERN)}


def entry_cursor(entry: EntrySummary) -> str:
    """An opaque keyset cursor: the listing continues after ``entry``."""
    return keyset_cursor(entry.created_at, entry.entry_key)


def keyset_cursor(at: datetime, key: str | int) -> str:
    """Microseconds since the epoch of ``at``, a dot, ``key``."""
    micros = (at - EPOCH) // timedelta(microseconds=1)
    return f"{micros}.{key}"


def parse_cursor(cursor: str, pattern: str = CURSOR_PATTERN) -> tuple[datetime, str]:
    """(time, key) of a cursor; UsageError if malformed."""
    if not _PATTERNS[pattern].fullmatch(cursor):
        raise UsageError(f"bad cursor {cursor[:40]!r}", hint="pass the `next` cursor of "
                         "the previous page unchanged")
    micros, key = cursor.split(".", 1)
    return EPOCH + timedelta(microseconds=int(micros)), key


class Reader(Protocol):
    """Runs a named statement in one of its shapes."""

    dialect: str  # "sqlite" or "postgresql"

    def rows(self, name: str, shape: Shape, params: Mapping[str, Any]
             ) -> Iterator[tuple[Any, ...]]:
        """At most BATCH rows in memory."""
        ...

    def all(self, name: str, shape: Shape, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """Every row in one round trip."""
        ...


def glob_to_like(pattern: str) -> str:
    """A LIKE pattern matching at least what the glob does: callers re-check with fnmatch."""
    head, bracket, _ = pattern.partition("[")  # from a class on: anything
    return "".join(_LIKE.get(ch, ch) for ch in head) + ("%" if bracket else "")


def glob_filter(dialect: str, pattern: str) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """The cell-id filter's shape, parameters and exactness: SQLite's GLOB is fnmatch's syntax
    (its literal prefix's range serves ix_cells_id); Postgres LIKE is exact without ``[...]``."""
    if dialect != "sqlite":
        return {"glob": True}, {"glob": glob_to_like(pattern)}, "[" not in pattern
    shape: dict[str, Any] = {"glob": True, "prefix": None}
    params: dict[str, Any] = {"glob": pattern.replace("[!", "[^")}
    prefix = re.split(r"[*?\[]", pattern, maxsplit=1)[0]  # what every match starts with
    if prefix and ord(prefix[-1]) < 0x10FFFF:  # hi: above every string starting with prefix
        shape["prefix"] = "range"
        params.update(lo=prefix, hi=prefix[:-1] + chr(ord(prefix[-1]) + 1))
    elif prefix:  # it ends in the last code point: nothing is above all its strings
        shape["prefix"] = "from"
        params["lo"] = prefix
    return shape, params, True


def entry_filter(fingerprint_key: str | None, position: tuple[datetime, str] | None
                 ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fingerprint filter (a hex prefix as a range: LIKE uses no index under C.UTF-8)."""
    p = (fingerprint_key or "").lower()
    fp = ("range" if HEX.fullmatch(p) else "never") if p else None
    # "g" sorts after every hex digit
    params: dict[str, Any] = {"fp_lo": p, "fp_hi": p + "g"} if fp == "range" else {}
    if position is not None:
        params.update(pos_at=position[0], pos_key=position[1])
    return {"fp": fp, "pos": position is not None}, params


def shape_of(*parts: Mapping[str, Any]) -> Shape:
    """Merged and sorted: a stable cache key."""
    return tuple(sorted({k: v for p in parts for k, v in p.items()}.items()))


def iter_entries(reader: Reader, cell_glob: str | None = None,
                 fingerprint_key: str | None = None,
                 limit: int | None = None, after: str | None = None) -> Iterator[EntrySummary]:
    """Entries newest first, as the database returns them (one batch in memory).

    With a glob and a limit, the cheaper of two plans, neither depending on table statistics:
    each matching cell's newest ``limit`` entries (an index probe per cell), or for a broad
    glob a walk of the entries newest first (``_walk``)."""
    position = parse_cursor(after) if after else None
    fshape, fparams = entry_filter(fingerprint_key, position)
    gshape, gparams, exact = (glob_filter(reader.dialect, cell_glob) if cell_glob
                              else ({"glob": False}, {}, True))
    check = None if exact else cell_glob  # LIKE ignores [...] classes: fnmatch re-checks
    if not cell_glob or not limit:
        yield from _rows(reader, "entries", {**fshape, **gshape}, {**fparams, **gparams},
                         check, limit)
        return
    # the walk counts from the newest entry: a page further on is read per cell
    plan = (walk_plan(reader, gshape, gparams, limit, bool(fingerprint_key))
            if position is None else None)
    found = plan and _walk(reader, fshape, fparams, gshape, gparams, check, limit, plan)
    if found is not None:
        yield from found
        return
    # the fnmatch re-check keeps or drops a cell's entries all together: each cell's newest
    # ``limit`` still hold the newest ``limit`` of the cells it keeps
    whole = check is None
    since = (newest_bound(reader, gshape, gparams, limit)
             if whole and fshape["fp"] is None and not fshape["pos"] else None)
    yield from _rows(reader, "entries_newest",
                     {**fshape, **gshape, "whole": whole, "since": since is not None},
                     {**fparams, **gparams, "per_cell": limit,
                      **({} if since is None else {"since": since})}, check, limit)


def newest_bound(reader: Reader, gshape: Mapping[str, Any], gparams: Mapping[str, Any],
                 limit: int) -> datetime | None:
    """The ``limit``-th newest of the matching cells' newest entries: a statement of its own (as
    a subquery it inflated the planner's estimates)."""
    rows = reader.all("newest_bound", shape_of(gshape), {**gparams, "skip": limit - 1})
    return None if not rows or rows[0][0] is None else as_utc(rows[0][0])


def _walk(reader: Reader, fshape: Mapping[str, Any], fparams: Mapping[str, Any],
          gshape: Mapping[str, Any], gparams: Mapping[str, Any], check: str | None,
          limit: int, plan: tuple[int, int]) -> list[EntrySummary] | None:
    """The newest entries whose cell matches, up to ``limit``; None when the per-cell plan
    should answer. Widened eightfold while it finds too few, up to half of the per-cell plan's
    rows: an old pipeline costs at most about three times that plan."""
    budget, per_cell_rows = plan
    while True:
        found = list(_rows(reader, "walk", {**fshape, **gshape},
                           {**fparams, **gparams, "budget": budget, "epoch": EPOCH},
                           check, limit))
        if len(found) >= limit:
            return found
        budget *= 8  # the newest entries are not spread like the rest: walk further
        if budget > per_cell_rows // 2:
            return None


def _rows(reader: Reader, name: str, shape: Mapping[str, Any], params: Mapping[str, Any],
          check: str | None, limit: int | None) -> Iterator[EntrySummary]:
    """Rows whose cell id matches the glob ``check`` (None: all), up to ``limit``."""
    limited = limit is not None and check is None
    rows = reader.rows(name, shape_of(shape, {"limited": limited}),
                       {**params, "limit": limit} if limited else params)
    kept = (row for row in rows if check is None or fnmatch.fnmatchcase(row[1], check))
    yield from map(summary, itertools.islice(kept, limit))


def walk_plan(reader: Reader, gshape: Mapping[str, Any], gparams: Mapping[str, Any],
              limit: int, by_fingerprint: bool) -> tuple[int, int] | None:
    """(rows to walk first, the per-cell plan's rows) if a walk is cheaper, else None."""
    matching, all_cells, n_fps = reader.all("walk_counts", shape_of(gshape), gparams)[0]
    if not matching:
        return None
    n_fps = max(1, n_fps)  # entries per cell, at most
    walked = int(4 * limit * all_cells / matching * (n_fps if by_fingerprint else 1)) + limit
    per_cell_rows = matching * min(n_fps, limit) if by_fingerprint else matching + limit
    return None if walked > per_cell_rows else (walked, per_cell_rows)


def summary(row: tuple[Any, ...]) -> EntrySummary:
    """A row of the entry statements: EntrySummary's fields, in order."""
    *head, created_at, verified_status, verified_at, last_used_at, restore_count, signed_by = row
    return EntrySummary(*head, as_utc(created_at), verified_status,  # type: ignore[call-arg]
                        as_utc(verified_at), as_utc(last_used_at), int(restore_count or 0),
                        signed_by)
