"""The SQL index (cells, entries, runs, reports, matrices): import this face, never a submodule."""

from __future__ import annotations

from typing import TYPE_CHECKING

from neffcache.faces import lazy_face

# Every name loads its module when first read (PEP 562): ``ls`` imports the listing and
# its values, not coverage, ingest, reindex, matrices or the ORM.
_FACE = {  # module -> the names the face takes from it
    "api": ("Index", "open_index"),
    "calls": ("IngestRestoreReportsRequest", "IngestRestoreReportsResult",
        "ListRegisteredMatricesRequest", "ListRegisteredMatricesResult",
        "RegisterMatrixFileRequest", "RegisterMatrixFileResult", "ReindexStoreRequest",
        "ReindexStoreResult", "ShowRegisteredMatrixRequest", "ShowRegisteredMatrixResult",
        "ShowSchemaRequest", "ShowSchemaResult", "UpgradeSchemaRequest", "UpgradeSchemaResult",
        "ingest_restore_reports", "list_registered_matrices", "register_matrix_file",
        "reindex_store", "show_registered_matrix", "show_schema", "upgrade_schema"),
    "coverage_engine": ("HOST", "CoverageRequest", "CoverageResult", "CoverageStream",
        "coverage", "find_fingerprints", "stream_coverage"),
    "coverage_engine.rules": ("status_of",),
    "reindex": ("IngestResult", "ReportPoller", "ingest_report_files", "ingest_reports"),
    "matrices": ("get_matrix", "list_matrices", "matrix_digest", "matrix_name_of",
        "matrix_versions", "register_matrix", "registered_cells"),
    # the ops reads import the ORM
    "ops_queries": ("failure_cursor", "fingerprint_stats", "get_run", "index_totals",
        "last_fingerprint_runs", "last_precompile_runs", "lease_stats", "list_failures",
        "list_restores", "list_runs", "reported_fingerprints", "restore_cursor",
        "restore_outcomes", "restore_timeline", "run_cursor"),
    "ops_values": ("DURATION_BUCKETS", "OUTCOMES", "BucketDoc", "CoverageGrid",
        "FailureRecord", "FingerprintCounts", "FingerprintDiff",
        "FingerprintDiffDoc", "FingerprintDoc", "FingerprintInfo", "FingerprintRunTime",
        "FingerprintStats", "GridRow", "IndexTotals", "LeaseStats", "MatrixCoverageDoc",
        "MatrixDetail", "MatrixRunTime", "MatrixVersion", "Outcome", "ReportedFingerprint",
        "RestoreOutcomeDoc", "RestoreOutcomeStats", "RestorePoint", "RestoreRecord",
        "RunDetail", "RunSummary", "SdkBytes", "group_by_sdk", "restore_outcome",
        "sdk_version"),
    "listing": ("CURSOR_PATTERN", "ID_CURSOR_PATTERN", "NAME_CURSOR_PATTERN", "entry_cursor"),
    "ls_call": ("ListEntriesRequest", "ListEntriesResult", "iter_entries", "list_entries",
        "next_cursor"),
    "engine": ("SCHEMA_REVISION", "schema_state", "upgrade_index"),
    "triage": ("FLEET_WINDOW", "Attention", "AttentionDoc", "FailedCell", "attention",
        "fingerprint_diff"),
    "values": ("FAILED", "IN_PROGRESS", "MISSING", "READY", "STATUSES", "ClaimResult",
        "CoverageColumn", "CoverageFingerprint", "CoverageReport", "CoverageRow", "EntrySummary",
        "InProgressDoc", "InvalidManifest", "InvalidReport",
        "Lease", "LiveLease", "ReindexResult", "SchemaState", "Status"),
}
__all__, __getattr__ = lazy_face(globals(), _FACE)

if TYPE_CHECKING:  # written by tools/faces.py from _FACE: edit the table, not this
    # ruff: noqa: F401 - re-exported: the face's __all__ is derived from _FACE
    # isort: off
    from neffcache.index.api import Index, open_index
    from neffcache.index.calls import (IngestRestoreReportsRequest, IngestRestoreReportsResult,
        ListRegisteredMatricesRequest, ListRegisteredMatricesResult, RegisterMatrixFileRequest,
        RegisterMatrixFileResult, ReindexStoreRequest, ReindexStoreResult,
        ShowRegisteredMatrixRequest, ShowRegisteredMatrixResult, ShowSchemaRequest,
        ShowSchemaResult, UpgradeSchemaRequest, UpgradeSchemaResult, ingest_restore_reports,
        list_registered_matrices, register_matrix_file, reindex_store, show_registered_matrix,
        show_schema, upgrade_schema)
    from neffcache.index.coverage_engine import (HOST, CoverageRequest, CoverageResult,
        CoverageStream, coverage, find_fingerprints, stream_coverage)
    from neffcache.index.coverage_engine.rules import status_of
    from neffcache.index.engine import SCHEMA_REVISION, schema_state, upgrade_index
    from neffcache.index.listing import (CURSOR_PATTERN, ID_CURSOR_PATTERN, NAME_CURSOR_PATTERN,
        entry_cursor)
    from neffcache.index.ls_call import (ListEntriesRequest, ListEntriesResult, iter_entries,
        list_entries, next_cursor)
    from neffcache.index.matrices import (get_matrix, list_matrices, matrix_digest, matrix_name_of,
        matrix_versions, register_matrix, registered_cells)
    from neffcache.index.ops_queries import (failure_cursor, fingerprint_stats, get_run,
        index_totals, last_fingerprint_runs, last_precompile_runs, lease_stats, list_failures,
        list_restores, list_runs, reported_fingerprints, restore_cursor, restore_outcomes,
        restore_timeline, run_cursor)
    from neffcache.index.ops_values import (DURATION_BUCKETS, OUTCOMES, BucketDoc, CoverageGrid,
        FailureRecord, FingerprintCounts, FingerprintDiff, FingerprintDiffDoc, FingerprintDoc,
        FingerprintInfo, FingerprintRunTime, FingerprintStats, GridRow, IndexTotals, LeaseStats,
        MatrixCoverageDoc, MatrixDetail, MatrixRunTime, MatrixVersion, Outcome, ReportedFingerprint,
        RestoreOutcomeDoc, RestoreOutcomeStats, RestorePoint, RestoreRecord, RunDetail, RunSummary,
        SdkBytes, group_by_sdk, restore_outcome, sdk_version)
    from neffcache.index.reindex import (IngestResult, ReportPoller, ingest_report_files,
        ingest_reports)
    from neffcache.index.triage import (FLEET_WINDOW, Attention, AttentionDoc, FailedCell,
        attention, fingerprint_diff)
    from neffcache.index.values import (FAILED, IN_PROGRESS, MISSING, READY, STATUSES, ClaimResult,
        CoverageColumn, CoverageFingerprint, CoverageReport, CoverageRow, EntrySummary,
        InProgressDoc, InvalidManifest, InvalidReport, Lease, LiveLease, ReindexResult, SchemaState,
        Status)
    # isort: on
