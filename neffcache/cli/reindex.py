"""``neffcache reindex``: rebuild the index from the store's manifests."""

from __future__ import annotations

from typing import Any

import click

from neffcache.cli._common import finish, progress
from neffcache.cli._options import shared


@click.command("reindex")
@click.option("--keep-missing", is_flag=True,
              help="Keep index entries whose manifest is no longer in the store.")
@shared("store", "index", "json")
def reindex(as_json: bool, **params: Any) -> None:
    """Rebuild the index's entries from the store's manifests alone, and ingest its restore
    reports.

    The store is the source of truth: every valid manifest becomes an entry (with its cell,
    fingerprint and files), entries whose manifest is gone are removed (unless
    --keep-missing), and invalid manifests are skipped and listed with their reason; any
    invalid manifest makes the exit code 4 after the rest is indexed. Failures, precompile
    runs and restore reports already in the index are kept. Safe to rerun.

    Then every restore report object under the store's reports/ prefix not yet in the index
    is ingested (once: a report's id is unique in the index), giving the entries it found
    their last use and recording its fingerprint. A malformed report is skipped with a
    warning and does not change the exit code.

    \b
    Examples:
      neffcache reindex
      neffcache reindex --store s3://my-bucket/neff --index postgresql+psycopg://neff@db/neff
      neffcache reindex --json

    JSON output: {"store", "scanned", "added", "already_indexed", "removed",
    "invalid": [{"key", "reason"}], "reports": {"scanned", "added", "already_ingested",
    "invalid": [{"key", "reason"}]}}.
    """
    from neffcache.index import ReindexStoreRequest, reindex_store

    def report(done: int, total: int) -> None:
        if done % 500 == 0 or done == total:
            progress(f"reindex: {done}/{total} manifests read")

    result = reindex_store(ReindexStoreRequest(**params, progress=report))
    found, reports = result.manifests, result.reports

    def text() -> str:
        return (f"{result.store}: {found.scanned} manifests, {found.added} added, "
                f"{found.already_indexed} already indexed, {found.removed} removed, "
                f"{len(found.invalid)} invalid\n"
                f"{result.store}: {reports.scanned} restore reports, {reports.added} added, "
                f"{reports.already_ingested} already ingested, {len(reports.invalid)} skipped")

    finish(result, as_json, text, [*(f"invalid: {bad.reason}" for bad in found.invalid),
                                    *(f"warning: restore report skipped: {bad.reason}"
                                      for bad in reports.invalid)])
