"""The SQL index (SQLAlchemy 2 + Alembic): cells, fingerprints, entries, files, precompile
runs, failures, restore reports and matrices; coverage and listing queries.

Public API (others code against these names):

    open_index(url, *, auto_upgrade) -> Index      upgrade_index(url) -> (from_rev, to_rev)
    Index.record_entry / record_entries / record_failure / start_run / finish_run /
          record_restore / record_reports / known_report_ids / record_verification /
          remove_entries
    Index.queue_claims / claim_next / renew_lease / release_done / release_failed /
          live_leases                              (precompile --claim; see index.claims)
    Index.entries(...) -> [EntrySummary]           Index.coverage(...) -> CoverageReport
    reindex(index, store) -> ReindexResult         schema_state(url) -> SchemaState

Importing this package imports SQLAlchemy; the restore path never imports it.
"""

from neffcache.index.api import Index, open_index
from neffcache.index.reindex import reindex
from neffcache.index.schema import SCHEMA_REVISION, schema_state, upgrade_index
from neffcache.index.values import (
    FAILED,
    IN_PROGRESS,
    MISSING,
    READY,
    CoverageFingerprint,
    CoverageReport,
    CoverageRow,
    EntrySummary,
    InvalidManifest,
    ReindexResult,
    SchemaState,
)

__all__ = [
    "FAILED", "IN_PROGRESS", "MISSING", "READY", "SCHEMA_REVISION", "CoverageFingerprint",
    "CoverageReport", "CoverageRow", "EntrySummary", "Index", "InvalidManifest", "ReindexResult",
    "SchemaState", "open_index", "reindex", "schema_state", "upgrade_index",
]
