"""``neffcache ls``'s use case: list the entries the index knows, newest first."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from neffcache.config import read_settings
from neffcache.errors import ExitRule
from neffcache.index import listing
from neffcache.index.readers import open_reader
from neffcache.index.values import EntrySummary
from neffcache.request_rules import checked_request


@checked_request
class ListEntriesRequest:
    """``neffcache ls``: ``cell`` a cell id glob, ``fingerprint`` a key or a prefix of one,
    ``limit`` at most this many (the newest); ``after`` a cursor (a page's ``next``): only
    the entries after it; ``index`` the index URL (None: as the CLI)."""

    cell: str | None = None
    fingerprint: str | None = None
    limit: int | None = None
    index: str | None = None
    after: str | None = None


@dataclass(frozen=True, slots=True)
class ListEntriesResult(ExitRule):
    """The entries found, newest first; ``next``: the cursor of the next page (None: the
    listing is complete). Always a success (exit 0): the call returns one or raises."""

    entries: tuple[EntrySummary, ...]
    next: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"entries": [e.to_json() for e in self.entries], "count": len(self.entries),
                "next": self.next}


def list_entries(request: ListEntriesRequest) -> ListEntriesResult:
    """The entries the index knows, newest first. Raises UnavailableError (exit 6) or
    SchemaOutdatedError (7) for the index."""
    found = tuple(iter_entries(request))
    return ListEntriesResult(found, next_cursor(request, len(found),
                                                found[-1] if found else None))


def iter_entries(request: ListEntriesRequest) -> Iterator[EntrySummary]:
    """``list_entries``'s entries one at a time, in flat memory. The index is opened at the
    first ``next()``, which raises its errors and UsageError for a malformed ``after``."""
    with open_reader(read_settings(os.environ, index=request.index)) as reader:
        yield from listing.iter_entries(reader, request.cell, request.fingerprint,
                                        request.limit, request.after)


def next_cursor(request: ListEntriesRequest, count: int,
                last: EntrySummary | None) -> str | None:
    """The ``after`` of the next page; None when the listing is complete."""
    if request.limit is None or count < request.limit or last is None:
        return None
    return listing.entry_cursor(last)
