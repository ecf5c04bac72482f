"""``neffcache ls``: list the entries the index knows, newest first."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from neffcache.cli._common import emit_json, format_table, human_bytes, index_option, json_option
from neffcache.cli._process import without_cyclic_gc

if TYPE_CHECKING:
    from collections.abc import Sequence

    from neffcache.index import EntrySummary


def render_entries(entries: Sequence[EntrySummary]) -> str:
    rows = [[e.cell_id, e.fingerprint_key[:12], e.backend, human_bytes(e.total_bytes),
             e.file_count, "-" if e.compile_seconds is None else f"{e.compile_seconds:.1f}s",
             e.created_at.strftime("%Y-%m-%d %H:%M"), e.entry_key[:12]] for e in entries]
    return format_table(["CELL", "FINGERPRINT", "BACKEND", "SIZE", "FILES", "COMPILE",
                         "CREATED (UTC)", "ENTRY"], rows)


@click.command("ls")
@click.option("--cell", "cell_glob", metavar="GLOB", default=None,
              help="Only cells whose id matches this glob, e.g. 'flux2-klein/compile/*'.")
@click.option("--fingerprint", "fingerprint_key", metavar="KEY", default=None,
              help="Only entries built under this fingerprint (full key or a prefix).")
@click.option("--limit", type=click.IntRange(min=1), default=None, metavar="N",
              help="At most N entries (the newest); the cursor of the next page goes to "
                   "stderr (JSON: `next`).")
@click.option("--after", metavar="CURSOR", default=None,
              help="Continue after this cursor (printed by the previous page).")
@index_option
@json_option
@without_cyclic_gc
def ls(cell_glob: str | None, fingerprint_key: str | None, limit: int | None,
       after: str | None, index: str | None, as_json: bool) -> None:
    """List entries in the index, newest first.

    An entry is one cell warmed under one fingerprint. The index can be rebuilt from the
    store with `neffcache reindex`.

    \b
    Examples:
      neffcache ls
      neffcache ls --cell 'flux2-klein/*/1024x1024/*' --limit 20
      neffcache ls --fingerprint 3fc2ffe4a216 --json
      neffcache ls --limit 100 --after CURSOR   # the next page

    JSON output: {"entries": [{"entry_key", "cell_id", "cell_key", "fingerprint_key",
    "backend", "store_url", "total_bytes", "file_count", "compile_seconds", "created_at",
    "verified_status", "verified_at", "last_used_at", "restore_count"}], "count", "next"};
    last_used_at is the time of the newest ingested restore report that found the entry (null:
    none yet), restore_count how many ingested ok/partial restore reports found it; next the
    --after of the next page (null: no more).
    """
    from neffcache.index import ListEntriesRequest, list_entries

    result = list_entries(ListEntriesRequest(cell=cell_glob, fingerprint=fingerprint_key,
                                             limit=limit, index=index, after=after))
    if as_json:
        emit_json(result.to_json())
        return
    if result.entries:
        click.echo(render_entries(result.entries))
    else:
        click.echo("no entries", err=True)
    if result.next:
        click.echo(f"next: {result.next} (pass as --after for the next page)", err=True)
