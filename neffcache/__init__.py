"""neffcache: compile once in CI, boot any number of Trainium instances warm."""

from __future__ import annotations

from typing import TYPE_CHECKING

# Bound after the packages of the same name are imported, so these names are the functions
# (importing a subpackage later sets the parent's attribute only on its first import).
import neffcache.precompile  # noqa: F401 - the light face (PEP 562): see the wrappers below
import neffcache.restore  # noqa: F401 - the light face (PEP 562): see the wrappers below
from neffcache import errors  # noqa: F401 - neffcache.errors, bound as on every import
from neffcache.faces import lazy_face
from neffcache.version import __version__

# module -> its names, loaded on first use (import neffcache takes milliseconds)
_FACE = {
    "config_show": ("ConfigValue", "ShowConfigRequest", "ShowConfigResult", "show_config"),
    "demo": ("DemoCell", "DemoRequest", "DemoResult", "run_demo"),
    "errors": ("CacheMissError", "CompiledAfterRestoreError", "ConfigError",
               "DeadlineExceededError", "FingerprintMismatchError", "IntegrityError",
               "ManifestError", "MatrixError", "NeffcacheError", "NotFoundError", "ReportError",
               "SchemaOutdatedError", "UnavailableError", "UntrustedEntryError", "UsageError",
               "WorkerError"),
    "fingerprint": ("FieldDiff", "Fingerprint"),
    "fingerprint_explain": ("ExplainRequest", "ExplainResult", "FingerprintRequest",
                            "FingerprintResult", "explain_fingerprint", "show_fingerprint"),
    "index": ("CoverageColumn", "CoverageFingerprint", "CoverageReport", "CoverageRequest",
              "CoverageResult", "CoverageRow", "CoverageStream", "EntrySummary",
              "IngestRestoreReportsRequest", "IngestRestoreReportsResult", "InvalidManifest",
              "InvalidReport", "ListEntriesRequest", "ListEntriesResult",
              "ListRegisteredMatricesRequest", "ListRegisteredMatricesResult", "MatrixVersion",
              "RegisterMatrixFileRequest", "RegisterMatrixFileResult", "ReindexStoreRequest",
              "ReindexStoreResult", "SchemaState", "ShowRegisteredMatrixRequest",
              "ShowRegisteredMatrixResult", "ShowSchemaRequest", "ShowSchemaResult",
              "UpgradeSchemaRequest", "UpgradeSchemaResult", "coverage", "ingest_restore_reports",
              "iter_entries", "list_entries", "list_registered_matrices", "register_matrix_file",
              "reindex_store", "show_registered_matrix", "show_schema", "stream_coverage",
              "upgrade_schema"),
    "keys": ("GenerateKeyRequest", "KeyResult", "ShowKeyRequest", "generate_key", "show_key"),
    "lifecycle": ("CollectGarbageRequest", "CollectGarbageResult", "CopyEntriesRequest",
                  "CopyEntriesResult", "EntryInfo", "ExportBundleRequest", "ExportBundleResult",
                  "GcPlan", "ImportBundleRequest", "ImportBundleResult", "LocalProblem", "Problem",
                  "RepairItem", "RepairRequest", "RepairResult", "RetireEntriesRequest",
                  "RetireEntriesResult", "RetirePlan", "RetirePolicy", "ShowBundleRequest",
                  "ShowBundleResult", "UploadPlan", "VerifyLocalDirRequest", "VerifyLocalDirResult",
                  "VerifyStoreRequest", "VerifyStoreResult", "collect_garbage", "copy_entries",
                  "export_bundle", "import_bundle", "repair_store", "retire_entries", "show_bundle",
                  "verify_local_dir", "verify_store", "verify_store as verify"),
    "manifest": ("FileRecord", "Manifest", "PackMember", "PackRecord", "PartDigests", "Signature"),
    "matrix": ("Cell", "Matrix", "PipelineSpec"),
    "precompile": ("BackfillPlan", "CaptureRequest", "CaptureResult", "CellBeat", "CellReport",
                   "FileState", "PrecompileReport", "PrecompileRequest", "PrecompileResult",
                   "PushRequest", "PushResult", "StopSummary", "Verdict", "VerifyReport",
                   "WarmCell", "WarmReport", "WarmRequest", "WarmResult", "capture_entry",
                   "check_warm", "push"),
    "restore": ("CellFailure", "Conflict", "FetchGroup", "FileFailure", "PruneRequest",
                "PruneResult", "PrunedEntry", "Resolution", "RestorePlan", "RestorePreview",
                "RestoreRequest", "RestoreResult", "cell_ready", "preview_restore", "prune"),
    "server": ("ServeRequest", "serve"),
    "store": ("BundleEntry", "Member", "TempFile", "Toc", "Upload"),
}
# functions of this module, not the packages of the same names
_CALLS = ("precompile", "restore")
_LAZY_ALL, __getattr__ = lazy_face(globals(), _FACE)
__all__ = sorted(["__version__", *_CALLS, *_LAZY_ALL])


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # written by tools/faces.py from _FACE: edit the table, not this
    # ruff: noqa: F401 - re-exported: the face's __all__ is derived from _FACE
    # isort: off
    from neffcache.config_show import ConfigValue, ShowConfigRequest, ShowConfigResult, show_config
    from neffcache.demo import DemoCell, DemoRequest, DemoResult, run_demo
    from neffcache.errors import (CacheMissError, CompiledAfterRestoreError, ConfigError,
        DeadlineExceededError, FingerprintMismatchError, IntegrityError, ManifestError, MatrixError,
        NeffcacheError, NotFoundError, ReportError, SchemaOutdatedError, UnavailableError,
        UntrustedEntryError, UsageError, WorkerError)
    from neffcache.fingerprint import FieldDiff, Fingerprint
    from neffcache.fingerprint_explain import (ExplainRequest, ExplainResult, FingerprintRequest,
        FingerprintResult, explain_fingerprint, show_fingerprint)
    from neffcache.index import (CoverageColumn, CoverageFingerprint, CoverageReport,
        CoverageRequest, CoverageResult, CoverageRow, CoverageStream, EntrySummary,
        IngestRestoreReportsRequest, IngestRestoreReportsResult, InvalidManifest, InvalidReport,
        ListEntriesRequest, ListEntriesResult, ListRegisteredMatricesRequest,
        ListRegisteredMatricesResult, MatrixVersion, RegisterMatrixFileRequest,
        RegisterMatrixFileResult, ReindexStoreRequest, ReindexStoreResult, SchemaState,
        ShowRegisteredMatrixRequest, ShowRegisteredMatrixResult, ShowSchemaRequest,
        ShowSchemaResult, UpgradeSchemaRequest, UpgradeSchemaResult, coverage,
        ingest_restore_reports, iter_entries, list_entries, list_registered_matrices,
        register_matrix_file, reindex_store, show_registered_matrix, show_schema, stream_coverage,
        upgrade_schema)
    from neffcache.keys import GenerateKeyRequest, KeyResult, ShowKeyRequest, generate_key, show_key
    from neffcache.lifecycle import (CollectGarbageRequest, CollectGarbageResult,
        CopyEntriesRequest, CopyEntriesResult, EntryInfo, ExportBundleRequest, ExportBundleResult,
        GcPlan, ImportBundleRequest, ImportBundleResult, LocalProblem, Problem, RepairItem,
        RepairRequest, RepairResult, RetireEntriesRequest, RetireEntriesResult, RetirePlan,
        RetirePolicy, ShowBundleRequest, ShowBundleResult, UploadPlan, VerifyLocalDirRequest,
        VerifyLocalDirResult, VerifyStoreRequest, VerifyStoreResult, collect_garbage, copy_entries,
        export_bundle, import_bundle, repair_store, retire_entries, show_bundle, verify_local_dir,
        verify_store)
    from neffcache.lifecycle import verify_store as verify
    from neffcache.manifest import (FileRecord, Manifest, PackMember, PackRecord, PartDigests,
        Signature)
    from neffcache.matrix import Cell, Matrix, PipelineSpec
    from neffcache.precompile import (BackfillPlan, CaptureRequest, CaptureResult, CellBeat,
        CellReport, FileState, PrecompileReport, PrecompileRequest, PrecompileResult, PushRequest,
        PushResult, StopSummary, Verdict, VerifyReport, WarmCell, WarmReport, WarmRequest,
        WarmResult, capture_entry, check_warm, push)
    from neffcache.restore import (CellFailure, Conflict, FetchGroup, FileFailure, PrunedEntry,
        PruneRequest, PruneResult, Resolution, RestorePlan, RestorePreview, RestoreRequest,
        RestoreResult, cell_ready, preview_restore, prune)
    from neffcache.server import ServeRequest, serve
    from neffcache.store import BundleEntry, Member, TempFile, Toc, Upload
    # isort: on


def restore(request: RestoreRequest) -> RestoreResult:
    """Fetch the matrix's entries for this host's fingerprint into ``request.to``, each file
    verified and renamed into place (``neffcache restore``); its ``exit_code`` is the CLI's.
    Raises a NeffcacheError when no restore could run. See ``neffcache.restore.session``."""
    from neffcache.restore import restore as call

    return call(request)


def precompile(request: PrecompileRequest) -> PrecompileResult:
    """Warm every selected cell not yet cached for this host's fingerprint, each in a worker
    process, and publish and index what each compiled (``neffcache precompile``)."""
    from neffcache.precompile import precompile as call

    return call(request)
