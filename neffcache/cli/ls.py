"""``neffcache ls``: list the entries the index knows, newest first."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import click

from neffcache.cli._common import encode_line, human_bytes, stream_json, stream_lines, stream_table
from neffcache.cli._options import ranged, shared
from neffcache.cli._process import without_cyclic_gc
from neffcache.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from neffcache.index import EntrySummary


HEADERS = ["CELL", "FINGERPRINT", "BACKEND", "SIZE", "FILES", "COMPILE", "CREATED (UTC)",
            "ENTRY"]


def entry_line(e: EntrySummary) -> list[Any]:
    return [e.cell_id, e.fingerprint_key[:12], e.backend, human_bytes(e.total_bytes),
            e.file_count, "-" if e.compile_seconds is None else f"{e.compile_seconds:.1f}s",
            e.created_at.strftime("%Y-%m-%d %H:%M"), e.entry_key[:12]]


@click.command("ls")
@click.option("--cell", "cell", metavar="GLOB", default=None,
              help="Only cells whose id matches this glob, e.g. 'flux2-klein/compile/*'.")
@click.option("--fingerprint", "fingerprint", metavar="KEY", default=None,
              help="Only entries built under this fingerprint (full key or a prefix).")
@click.option("--limit", type=ranged("ListEntriesRequest", "limit"), default=None, metavar="N",
              help="At most N entries (the newest); the cursor of the next page goes to "
                   "stderr (JSON: `next`).")
@click.option("--after", metavar="CURSOR", default=None,
              help="Continue after this cursor (printed by the previous page).")
@shared("index", "json", "jsonl")
@without_cyclic_gc
def ls(as_json: bool, as_jsonl: bool, **params: Any) -> None:
    """List entries in the index, newest first.

    An entry is one cell warmed under one fingerprint. The index can be rebuilt from the
    store with `neffcache reindex`. Entries are printed as they are read (the first at
    once, in flat memory at any count; a table's column widths come from its first 500
    rows).

    \b
    Examples:
      neffcache ls
      neffcache ls --cell 'flux2-klein/*/1024x1024/*' --limit 20
      neffcache ls --fingerprint 3fc2ffe4a216 --json
      neffcache ls --limit 100 --after CURSOR   # the next page
      neffcache ls --jsonl | jq -r .entry_key    # every entry, one JSON object a line

    JSON output: {"entries": [{"entry_key", "cell_id", "cell_key", "fingerprint_key",
    "backend", "store_url", "total_bytes", "file_count", "compile_seconds", "created_at",
    "verified_status", "verified_at", "last_used_at", "restore_count", "signed_by"}], "count",
    "next"}; signed_by is the key id that signed the entry's manifest (null: unsigned);
    last_used_at is the time of the newest ingested restore report that found the entry (null:
    none yet), restore_count how many ingested ok/partial restore reports found it; next the
    --after of the next page (null: no more). The document is written as it is read:
    "entries" first, then "count" and "next".

    JSON lines (--jsonl): one entry object (as above) per line; with --limit the next
    page's cursor goes to stderr.
    """
    from neffcache.index import ListEntriesRequest, iter_entries, next_cursor

    if as_json and as_jsonl:
        raise UsageError("--json and --jsonl: choose one")
    request = ListEntriesRequest(**params)
    found = iter_entries(request)
    first = next(found, None)  # the index's errors and a bad cursor, before any output
    seen = _Seen()
    rows = seen.track(itertools.chain(() if first is None else (first,), found))
    if as_json:
        stream_json({}, "entries", (encode_line(e.to_json()) for e in rows),
                    lambda: {"count": seen.count,
                             "next": next_cursor(request, seen.count, seen.last)})
        return
    if as_jsonl:
        stream_lines(encode_line(e.to_json()) for e in rows)
    elif not stream_table(HEADERS, (entry_line(e) for e in rows)):
        click.echo("no entries", err=True)
    cursor = next_cursor(request, seen.count, seen.last)
    if cursor:
        click.echo(f"next: {cursor} (pass as --after for the next page)", err=True)


class _Seen:
    """How many entries went by, and the last one (for the next page's cursor)."""

    def __init__(self) -> None:
        self.count = 0
        self.last: EntrySummary | None = None

    def track(self, entries: Iterator[EntrySummary]) -> Iterator[EntrySummary]:
        for e in entries:
            self.count += 1
            self.last = e
            yield e
