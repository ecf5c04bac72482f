"""``neffcache ls``'s table of entries made at once (the streamed table must equal it)."""

from __future__ import annotations

from collections.abc import Sequence

from neffcache.cli._common import format_table
from neffcache.cli.coverage import HEADERS, entry_line
from neffcache.index import EntrySummary


def render_entries(entries: Sequence[EntrySummary]) -> str:
    return format_table(HEADERS, [entry_line(e) for e in entries])
