"""``neffcache reports``: ingest restore reports (store objects or local files) into the index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from neffcache.cli._common import finish
from neffcache.cli._options import Group, ranged, shared
from neffcache.errors import EXIT_CODE_HELP


@click.group("reports", cls=Group)
def reports() -> None:
    """Restore reports: what each instance restored, read into the index.

    Every `neffcache restore` writes one report: an object under the store's reports/
    prefix (reports/YYYY-MM-DD/<host>-<UTC time>-<random>.json) or, with --report-to DIR
    (or NEFFCACHE_REPORTS=DIR), a file in DIR. Instances never need database credentials:
    `neffcache reindex`, `neffcache serve` (in the background) and `neffcache reports ingest`
    put reports into the index, each once.
    """


@reports.command("ingest", epilog=EXIT_CODE_HELP,
                 short_help="Read new restore reports into the index (idempotent).")
@click.option("--from", "sources", multiple=True, metavar="PATH",
              type=click.Path(exists=True, path_type=Path),
              help="Report files, or directories of *.json report files (repeatable), "
                   "instead of the store.")
@click.option("--days", type=ranged("IngestRestoreReportsRequest", "days"),
              default=None, metavar="N",
              help="Only the store's reports dated from N days ago to tomorrow (UTC) "
                   "[default: every report].")
@shared("store", "index", "json")
def ingest(as_json: bool, **params: Any) -> None:
    """Ingest restore reports into the index: from the store's reports/ prefix, or from
    report files with --from.

    A report whose id is already in the index is not read again, so reruns add nothing.
    Each new report records the fingerprint it names (the fleet's fingerprints show even
    when nothing was built for them) and the last use of the entries it found. A malformed
    or hostile report is skipped with a warning (exit code unchanged); only its validated
    fields ever reach the index.

    \b
    Examples:
      neffcache reports ingest
      neffcache reports ingest --days 1 --json
      neffcache reports ingest --from /var/log/neffcache/reports --from ./one-report.json

    JSON output: {"source", "scanned", "added", "already_ingested",
    "invalid": [{"key", "reason"}]}.
    """
    from neffcache.index import IngestRestoreReportsRequest, ingest_restore_reports

    result = ingest_restore_reports(IngestRestoreReportsRequest(**params))
    found = result.ingest
    finish(result, as_json, lambda: f"{result.source}: {found.scanned} restore reports, "
           f"{found.added} added, {found.already_ingested} already ingested, "
           f"{len(found.invalid)} skipped",
           [f"warning: restore report skipped: {bad.reason}" for bad in found.invalid])
