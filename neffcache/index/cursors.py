"""Keyset cursors of the index's listings. Pure: no database here."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from neffcache.errors import UsageError

if TYPE_CHECKING:
    from neffcache.index.values import EntrySummary

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
