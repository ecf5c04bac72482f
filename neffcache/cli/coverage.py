"""``neffcache coverage`` and ``neffcache ls``: what the index holds, written as it is read."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import click

from neffcache.cli._common import (
    encode_line,
    finish,
    format_table,
    human_bytes,
    stream_json,
    stream_lines,
    stream_table,
)
from neffcache.cli._options import ranged, shared
from neffcache.cli._process import without_cyclic_gc
from neffcache.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from neffcache.index import CoverageReport, CoverageRequest, CoverageRow, EntrySummary


def _status_text(row: CoverageRow) -> str:
    if row.status == "failed":
        return "failed" if row.exit_status is None else f"failed({row.exit_status})"
    if row.status == "in_progress" and row.since is not None:
        return f"in_progress({row.host} since {row.since:%Y-%m-%d %H:%M:%S}Z)"
    return row.status


def render_coverage(report: CoverageReport) -> str:
    """A cell x fingerprint grid, then one summary line per fingerprint (pure)."""
    fps, n = report.fingerprints, len(report.fingerprints)
    labels = [f"{fp.short}{'*' if fp.here else ''}" for fp in fps]
    grid = [[cell_id, *map(_status_text, report.rows[i * n:(i + 1) * n])]
            for i, (cell_id, _key) in enumerate(report.cells)]
    summary = [[label, fp.backend, fp.ready, fp.in_progress, fp.failed, fp.missing]
               for label, fp in zip(labels, fps, strict=True)]
    return "\n".join([format_table(["CELL", *labels], grid), "",
                      format_table(["FINGERPRINT", "BACKEND", "READY", "IN PROGRESS", "FAILED",
                                    "MISSING"], summary),
                      "* = this host's fingerprint"])


@click.command("coverage")
@click.argument("matrix", metavar="NAME|FILE")
@shared("cells")
@click.option("--fingerprint", "fingerprints", metavar="KEY|host", multiple=True,
              help="Only this fingerprint's column: a key or a unique prefix of one (as "
                   "`coverage` and `ls` print them; a full key nothing was built for yet is "
                   "a column of `missing`), or `host` for this host's (repeatable). "
                   "Default: this host's and every fingerprint with an entry, a failure or "
                   "a lease for these cells.")
@click.option("--check", is_flag=True,
              help="Exit 3 unless every selected cell is ready for every shown fingerprint "
                   "(this host's when no --fingerprint is given): a CI gate.")
@shared("python", "index", "json", "jsonl")
@without_cyclic_gc
def coverage(as_json: bool, as_jsonl: bool, **params: Any) -> None:
    """Show which cells of a matrix are cached, for which fingerprints.

    NAME|FILE is a matrix file, or the name of a matrix registered in the index (`neffcache
    matrix register FILE`; `precompile` registers its matrix): its current version.
    Rows are the matrix's cells; columns are this host's fingerprint (marked *) and every
    other fingerprint with an entry or a failure for any of these cells. A status is
    `ready` (an entry exists), `in_progress(HOST since TIME)` (no entry yet; a `precompile
    --claim` worker on HOST holds a live lease on it, claimed at TIME, UTC), `failed(N)` (no
    entry, and the latest warm-up exited with N; its log tail is in the JSON) or `missing`
    (never warmed). Reads the index only.

    With --check the exit code says whether the cells are covered: 0 every selected cell is
    ready for every checked fingerprint, 3 some are not (listed on stderr), including for a
    full fingerprint key nothing has been built for yet (a column of `missing`, backend
    `unknown`) and for this host's fingerprint when the index has never seen it. A malformed
    key or a prefix that names no single fingerprint is a usage error (exit 2).

    \b
    Examples:
      neffcache coverage matrix.toml
      neffcache coverage flux2-prod                      # a registered matrix, by name
      neffcache coverage matrix.toml --cells 'flux2-klein/compile/*'
      neffcache coverage flux2-prod --fingerprint 3fc2ffe4a216 --check   # CI gate
      neffcache coverage matrix.toml --fingerprint host --check --json
      neffcache coverage matrix.toml --json | jq '.fingerprints[] | {key, ready, missing}'
      neffcache coverage flux2-prod --jsonl | jq -c 'select(.status == "failed")'
      neffcache coverage matrix.toml --python /opt/venv/bin/python   # * = that interpreter's

    JSON output: {"matrix", "backend", "here" (this host's fingerprint key, null when only
    given keys are shown), "cells": [{"id", "key"}], "fingerprints": [{"key", "backend",
    "fields", "here", "ready", "failed", "missing", "in_progress"}], "rows": [{"cell_id",
    "cell_key", "fingerprint_key", "status", "entry_key", "total_bytes", "exit_status",
    "log_tail", "failed_at", "host", "since", "lease_expires_at"}], "check" (with --check:
    {"ok", "not_ready": [{"cell_id", "fingerprint_key", "status"}]})}. The document is
    written as it is read, in flat memory at any matrix size: "rows" after "cells", then
    "fingerprints" (counted as the rows went by) and "check".

    JSON lines (--jsonl): one row object (as in "rows" above) per line, nothing else (the
    counts are in --json's "fingerprints"); with --check the exit code and stderr say which
    cells are not ready.
    """
    from neffcache.index import CoverageRequest
    from neffcache.index import coverage as run_coverage

    request = CoverageRequest(**params)
    if as_json and as_jsonl:
        raise UsageError("--json and --jsonl: choose one")
    if as_json or as_jsonl:
        _stream(request, as_jsonl)
        return
    result = run_coverage(request)
    cells = result.report.cells
    finish(result, False, lambda: render_coverage(result.report) if cells else None,
           [] if cells else [f"{result.matrix}: no cell matches {list(request.cells)}"])


def _stream(request: CoverageRequest, as_jsonl: bool) -> None:
    """--json / --jsonl: rows written as they are read (``stream_coverage``)."""
    from neffcache.index import stream_coverage

    with stream_coverage(request) as stream:
        lines = stream.lines(encode_line)  # each row's to_json(), as encode_line writes it
        if as_jsonl:
            stream_lines(lines)
        else:
            stream_json(stream.head_json(), "rows", lines, stream.tail_json)
    err = stream.error()
    if err is not None:
        raise err


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
