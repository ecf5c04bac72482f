"""neffcache: compile once in CI, boot any number of Trainium instances warm.

The public Python API: one call per use case, ``verb(Request) -> Result``. A request is a
frozen dataclass holding what the command's flags hold (a field left None is read as the CLI
reads it: flag > ``NEFFCACHE_*`` > config file > default). A result knows its ``exit_code``
(the CLI's, 0 = success), its ``error()`` (the exception the CLI would report, or None) and
its ``to_json()`` (the command's ``--json`` document). A call raises a ``NeffcacheError``
subclass only when it cannot produce a result at all (bad input, store unreachable, ...).
A request checks its fields when it is made (type, range, no lone ``str`` for a sequence:
else a ``UsageError`` naming the field); every ``NeffcacheError`` knows its ``exit_code``.
The value types the calls take and return (``Matrix``, ``Fingerprint``, ``EntrySummary``,
``CoverageRow``, ``PrecompileReport``, ...) import from here too.

    restore(RestoreRequest) -> RestoreResult                   neffcache restore
    preview_restore(RestoreRequest) -> RestorePreview          neffcache restore --dry-run
    prune(PruneRequest) -> PruneResult                         neffcache prune
    cell_ready(target, cell_id) -> bool                        is a cell restored? (no store)
    precompile(PrecompileRequest) -> PrecompileResult          neffcache precompile
    push(PushRequest) -> PushResult                            neffcache push
    capture_entry(CaptureRequest) -> CaptureResult             neffcache capture
    check_warm(WarmRequest) -> WarmResult                      neffcache warm
    coverage(CoverageRequest) -> CoverageResult                neffcache coverage
    stream_coverage(CoverageRequest) -> CoverageStream         coverage --json/--jsonl
    list_entries(ListEntriesRequest) -> ListEntriesResult      neffcache ls
    iter_entries(ListEntriesRequest) -> Iterator[EntrySummary] ls, streamed
    show_fingerprint(FingerprintRequest) -> FingerprintResult  neffcache fingerprint
    explain_fingerprint(ExplainRequest) -> ExplainResult       neffcache fingerprint --explain
    verify(VerifyStoreRequest) -> VerifyStoreResult            neffcache verify
    verify_local_dir(VerifyLocalDirRequest) -> ...             neffcache verify --local
    collect_garbage(CollectGarbageRequest) -> ...              neffcache gc
    retire_entries(RetireEntriesRequest) -> ...                neffcache retire
    copy_entries(CopyEntriesRequest) -> ...                    neffcache copy
    repair_store(RepairRequest) -> RepairResult                neffcache repair
    export_bundle / import_bundle / show_bundle                neffcache bundle ...
    reindex_store, ingest_restore_reports                      neffcache reindex, reports ingest
    register_matrix_file, list_registered_matrices,
    show_registered_matrix                                     neffcache matrix ...
    upgrade_schema, show_schema                                neffcache db upgrade, db current
    serve(ServeRequest)                                        neffcache serve
    run_demo(DemoRequest) -> DemoResult                        neffcache demo
    generate_key(GenerateKeyRequest) -> KeyResult              neffcache keys generate
    show_key(ShowKeyRequest) -> KeyResult                      neffcache keys show
    show_config(ShowConfigRequest) -> ShowConfigResult         neffcache config

Import names from here (``from neffcache import RestoreRequest, restore``): ``neffcache.restore``
and ``neffcache.precompile`` are the functions, not the packages of the same name. Every name
in ``__all__`` is stable: fields are added, never renamed or removed, within a major version.
Every call loads its machinery on first use (the faces of restore and precompile are
lazy, PEP 562), so ``import neffcache`` costs a few milliseconds on every command's start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Bound after the packages of the same name are imported, so these names are the functions
# (importing a subpackage later sets the parent's attribute only on its first import).
import neffcache.precompile  # noqa: F401 - the light face (PEP 562): see the wrappers below
import neffcache.restore  # noqa: F401 - the light face (PEP 562): see the wrappers below
from neffcache.errors import (
    CacheMissError,
    CompiledAfterRestoreError,
    ConfigError,
    DeadlineExceededError,
    FingerprintMismatchError,
    IntegrityError,
    ManifestError,
    MatrixError,
    NeffcacheError,
    NotFoundError,
    ReportError,
    SchemaOutdatedError,
    UnavailableError,
    UntrustedEntryError,
    UsageError,
    WorkerError,
)
from neffcache.version import __version__

if TYPE_CHECKING:
    from neffcache.config_show import ConfigValue, ShowConfigRequest, ShowConfigResult, show_config
    from neffcache.demo import DemoCell, DemoRequest, DemoResult, run_demo
    from neffcache.fingerprint import FieldDiff, Fingerprint
    from neffcache.fingerprint_explain import (
        ExplainRequest,
        ExplainResult,
        FingerprintRequest,
        FingerprintResult,
        explain_fingerprint,
        show_fingerprint,
    )
    from neffcache.index import (
        CoverageFingerprint,
        CoverageReport,
        CoverageRequest,
        CoverageResult,
        CoverageRow,
        CoverageStream,
        EntrySummary,
        IngestRestoreReportsRequest,
        IngestRestoreReportsResult,
        InvalidManifest,
        InvalidReport,
        ListEntriesRequest,
        ListEntriesResult,
        ListRegisteredMatricesRequest,
        ListRegisteredMatricesResult,
        MatrixVersion,
        RegisterMatrixFileRequest,
        RegisterMatrixFileResult,
        ReindexStoreRequest,
        ReindexStoreResult,
        SchemaState,
        ShowRegisteredMatrixRequest,
        ShowRegisteredMatrixResult,
        ShowSchemaRequest,
        ShowSchemaResult,
        UpgradeSchemaRequest,
        UpgradeSchemaResult,
        coverage,
        ingest_restore_reports,
        iter_entries,
        list_entries,
        list_registered_matrices,
        register_matrix_file,
        reindex_store,
        show_registered_matrix,
        show_schema,
        stream_coverage,
        upgrade_schema,
    )
    from neffcache.keys import GenerateKeyRequest, KeyResult, ShowKeyRequest, generate_key, show_key
    from neffcache.lifecycle import (
        CollectGarbageRequest,
        CollectGarbageResult,
        CopyEntriesRequest,
        CopyEntriesResult,
        EntryInfo,
        ExportBundleRequest,
        ExportBundleResult,
        GcPlan,
        ImportBundleRequest,
        ImportBundleResult,
        LocalProblem,
        Problem,
        RepairItem,
        RepairRequest,
        RepairResult,
        RetireEntriesRequest,
        RetireEntriesResult,
        RetirePlan,
        RetirePolicy,
        ShowBundleRequest,
        ShowBundleResult,
        UploadPlan,
        VerifyLocalDirRequest,
        VerifyLocalDirResult,
        VerifyStoreRequest,
        VerifyStoreResult,
        collect_garbage,
        copy_entries,
        export_bundle,
        import_bundle,
        repair_store,
        retire_entries,
        show_bundle,
        verify_local_dir,
        verify_store,
    )
    from neffcache.lifecycle import verify_store as verify
    from neffcache.manifest import (
        FileRecord,
        Manifest,
        PackMember,
        PackRecord,
        PartDigests,
        Signature,
    )
    from neffcache.matrix import Cell, Matrix, PipelineSpec
    from neffcache.precompile import (
        BackfillPlan,
        CaptureRequest,
        CaptureResult,
        CellBeat,
        CellReport,
        FileState,
        PrecompileReport,
        PrecompileRequest,
        PrecompileResult,
        PushRequest,
        PushResult,
        StopSummary,
        Verdict,
        VerifyReport,
        WarmCell,
        WarmReport,
        WarmRequest,
        WarmResult,
    )
    from neffcache.restore import (
        CellFailure,
        Conflict,
        FetchGroup,
        FileFailure,
        PrunedEntry,
        PruneRequest,
        PruneResult,
        Resolution,
        RestorePlan,
        RestorePreview,
        RestoreRequest,
        RestoreResult,
        prune,
    )
    from neffcache.server import ServeRequest, serve
    from neffcache.store import BundleEntry, Member, TempFile, Toc, Upload


def restore(request: RestoreRequest) -> RestoreResult:
    """Fetch the matrix's entries built for this host's fingerprint into ``request.to``, every
    file verified against its sha256 and renamed into place (``neffcache restore``); cells
    already in place are judged without contacting the store; a restore report is written.

    Returns a ``RestoreResult`` (``exit_code``: 0 every cell in place; 3 some have no entry or
    the deadline stopped it; 4 integrity; 5 built for another fingerprint only; 6 store
    unavailable; 1 a local write failed; ``to_json()`` is ``restore --json``). Raises a
    NeffcacheError when no restore could run at all (bad request 2, bad bundle 4, store
    unreachable 6, silent past the deadline 3). Full contract:
    ``neffcache.restore.session.restore``.
    """
    from neffcache.restore import restore as call

    return call(request)


def preview_restore(request: RestoreRequest) -> RestorePreview:
    """The plan ``restore(request)`` would run (``restore --dry-run``): what it would fetch,
    from which packs and blobs, in how many requests; fetches and writes nothing. Its
    ``exit_code`` is the one the restore would end with. Full contract:
    ``neffcache.restore.session.preview_restore``."""
    from neffcache.restore import preview_restore as call

    return call(request)


# The precompile calls, as functions that load the precompile machinery when called (the
# face of that package stays light, and so does every command's start-up).
def precompile(request: PrecompileRequest) -> PrecompileResult:
    """Warm every selected cell of the matrix not yet cached for this host's fingerprint, each
    in its own worker process; publish and index what each compiled (``neffcache precompile``).

    Returns a ``PrecompileResult`` (``exit_code`` 1 if a cell failed, after every other cell
    was tried); raises a NeffcacheError when no run could start (bad request 2, fingerprint 5,
    store or index unreachable 6). Full contract: ``neffcache.precompile.session.precompile``.
    """
    from neffcache.precompile import precompile as call

    return call(request)


def push(request: PushRequest) -> PushResult:
    """Publish the files under each cache root as the entry of one cell on this host's
    fingerprint, and index it (``neffcache push``); raises when it cannot publish.
    Full contract: ``neffcache.precompile.push_cell.push``."""
    from neffcache.precompile import push as call

    return call(request)


def capture_entry(request: CaptureRequest) -> CaptureResult:
    """Publish what an instance compiled at run time as the entry of the cell it served
    (``neffcache capture``). Full contract: ``neffcache.precompile.backfill_cell``."""
    from neffcache.precompile import capture_entry as call

    return call(request)


def check_warm(request: WarmRequest) -> WarmResult:
    """Each cell's first call in a fresh process against restored caches: did it compile?
    (``neffcache warm``; ``exit_code`` 3 on a miss with ``strict``). Full contract:
    ``neffcache.precompile.warm_check.check_warm``."""
    from neffcache.precompile import check_warm as call

    return call(request)


# name -> the face that holds it (loaded on first use: SQL, FastAPI and torch only when asked)
_LAZY: dict[str, str] = {
    **dict.fromkeys((
        "CoverageRequest", "CoverageResult", "CoverageStream", "IngestRestoreReportsRequest",
        "IngestRestoreReportsResult", "ListEntriesRequest", "ListEntriesResult",
        "ListRegisteredMatricesRequest", "ListRegisteredMatricesResult",
        "RegisterMatrixFileRequest", "RegisterMatrixFileResult", "ReindexStoreRequest",
        "ReindexStoreResult", "ShowRegisteredMatrixRequest", "ShowRegisteredMatrixResult",
        "ShowSchemaRequest", "ShowSchemaResult", "UpgradeSchemaRequest", "UpgradeSchemaResult",
        "coverage", "ingest_restore_reports", "iter_entries", "list_entries",
        "list_registered_matrices", "register_matrix_file", "reindex_store",
        "show_registered_matrix", "show_schema", "stream_coverage", "upgrade_schema"),
        "neffcache.index"),
    **dict.fromkeys((
        "CollectGarbageRequest", "CollectGarbageResult", "CopyEntriesRequest",
        "CopyEntriesResult", "ExportBundleRequest", "ExportBundleResult", "ImportBundleRequest",
        "ImportBundleResult", "RepairRequest", "RepairResult", "RetireEntriesRequest",
        "RetireEntriesResult", "repair_store",
        "ShowBundleRequest", "ShowBundleResult", "VerifyLocalDirRequest",
        "VerifyLocalDirResult", "VerifyStoreRequest", "VerifyStoreResult", "collect_garbage",
        "copy_entries", "export_bundle", "import_bundle", "retire_entries", "show_bundle",
        "verify_local_dir", "verify_store"), "neffcache.lifecycle"),
    **dict.fromkeys(("ExplainRequest", "ExplainResult", "FingerprintRequest",
                     "FingerprintResult", "explain_fingerprint", "show_fingerprint"),
                    "neffcache.fingerprint_explain"),
    **dict.fromkeys(("ServeRequest", "serve"), "neffcache.server"),
    **dict.fromkeys(("ShowConfigRequest", "ShowConfigResult", "show_config"),
                    "neffcache.config_show"),
    **dict.fromkeys(("PruneRequest", "PruneResult", "RestorePreview", "RestoreRequest",
                     "RestoreResult", "cell_ready", "prune"), "neffcache.restore"),
    **dict.fromkeys(("CaptureRequest", "CaptureResult", "PrecompileRequest", "PrecompileResult",
                     "PushRequest", "PushResult", "WarmRequest", "WarmResult"),
                    "neffcache.precompile"),
    **dict.fromkeys(("DemoRequest", "DemoResult", "run_demo"), "neffcache.demo"),
    **dict.fromkeys(("GenerateKeyRequest", "KeyResult", "ShowKeyRequest", "generate_key",
                     "show_key"), "neffcache.keys"),
    # the value types the calls take and return (fields of requests and results, and theirs)
    **dict.fromkeys(("CoverageFingerprint", "CoverageReport", "CoverageRow", "EntrySummary",
                     "InvalidManifest", "InvalidReport", "MatrixVersion",
                     "SchemaState"),
                    "neffcache.index"),
    **dict.fromkeys(("EntryInfo", "GcPlan", "LocalProblem", "Problem", "RepairItem",
                     "RetirePlan", "RetirePolicy", "UploadPlan"),
                    "neffcache.lifecycle"),
    **dict.fromkeys(("CellFailure", "Conflict", "FetchGroup", "FileFailure", "PrunedEntry",
                     "Resolution", "RestorePlan"),
                    "neffcache.restore"),
    **dict.fromkeys(("BackfillPlan", "CellBeat", "CellReport", "FileState", "PrecompileReport",
                     "StopSummary", "Verdict", "VerifyReport", "WarmCell",
                     "WarmReport"),
                    "neffcache.precompile"),
    **dict.fromkeys(("DemoCell",), "neffcache.demo"),
    **dict.fromkeys(("ConfigValue",), "neffcache.config_show"),
    **dict.fromkeys(("Cell", "Matrix", "PipelineSpec"), "neffcache.matrix"),
    **dict.fromkeys(("FieldDiff", "Fingerprint"), "neffcache.fingerprint"),
    **dict.fromkeys(("FileRecord", "Manifest", "PackMember", "PackRecord", "PartDigests",
                     "Signature"), "neffcache.manifest"),
    **dict.fromkeys(("BundleEntry", "Member", "TempFile", "Toc", "Upload"), "neffcache.store"),
}
# Short names for the calls people reach for most.
_ALIASES: dict[str, str] = {"verify": "verify_store"}


def __getattr__(name: str) -> Any:
    target = _ALIASES.get(name, name)
    if target not in _LAZY:
        raise AttributeError(f"module 'neffcache' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[target]), target)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [  # literal, for tools; test_api_face checks it against _LAZY and the imports
    "__version__",
    "CacheMissError", "CaptureRequest", "CaptureResult", "CollectGarbageRequest",
    "CollectGarbageResult", "CompiledAfterRestoreError", "ConfigError", "CopyEntriesRequest",
    "CopyEntriesResult", "CoverageRequest", "CoverageResult", "CoverageStream",
    "DeadlineExceededError",
    "DemoRequest", "DemoResult", "ExplainRequest", "ExplainResult", "ExportBundleRequest",
    "ExportBundleResult", "FingerprintMismatchError", "GenerateKeyRequest", "KeyResult",
    "ShowKeyRequest", "UntrustedEntryError", "generate_key", "show_key", "FingerprintRequest",
    "FingerprintResult",
    "ImportBundleRequest", "ImportBundleResult", "IngestRestoreReportsRequest",
    "IngestRestoreReportsResult", "IntegrityError", "ListEntriesRequest", "ListEntriesResult",
    "ListRegisteredMatricesRequest", "ListRegisteredMatricesResult", "ManifestError",
    "MatrixError", "NeffcacheError", "NotFoundError", "PrecompileRequest", "PrecompileResult",
    "PruneRequest", "PruneResult", "PushRequest", "PushResult", "RegisterMatrixFileRequest",
    "RegisterMatrixFileResult",
    "ReindexStoreRequest", "ReindexStoreResult", "RepairRequest", "RepairResult",
    "ReportError", "RestorePreview",
    "RestoreRequest", "RestoreResult", "RetireEntriesRequest", "RetireEntriesResult",
    "SchemaOutdatedError", "ServeRequest", "ShowBundleRequest", "ShowBundleResult",
    "ShowConfigRequest", "ShowConfigResult", "show_config",
    "ShowRegisteredMatrixRequest", "ShowRegisteredMatrixResult", "ShowSchemaRequest",
    "ShowSchemaResult", "UnavailableError", "UpgradeSchemaRequest", "UpgradeSchemaResult",
    "UsageError", "VerifyLocalDirRequest", "VerifyLocalDirResult", "VerifyStoreRequest",
    "VerifyStoreResult", "WarmRequest", "WarmResult", "WorkerError", "capture_entry",
    "cell_ready", "check_warm", "collect_garbage", "copy_entries", "coverage",
    "explain_fingerprint",
    "export_bundle", "import_bundle", "ingest_restore_reports", "iter_entries", "list_entries",
    "list_registered_matrices", "precompile", "preview_restore", "prune", "push",
    "register_matrix_file",
    "reindex_store", "repair_store", "restore", "retire_entries", "run_demo", "serve",
    "show_bundle",
    "show_fingerprint", "show_registered_matrix", "show_schema", "stream_coverage",
    "upgrade_schema", "verify",
    "verify_local_dir", "verify_store",
    # the value types the calls take and return (a *Result here is a use case's result)
    "BackfillPlan", "BundleEntry", "Cell", "CellBeat", "CellFailure", "CellReport", "ConfigValue",
    "Conflict", "CoverageFingerprint", "CoverageReport", "CoverageRow", "DemoCell", "EntryInfo",
    "EntrySummary", "FetchGroup", "FieldDiff", "FileFailure", "FileRecord", "FileState",
    "Fingerprint", "GcPlan", "InvalidManifest", "InvalidReport", "LocalProblem", "Manifest",
    "Matrix", "MatrixVersion", "Member", "PackMember", "PackRecord", "PartDigests", "PipelineSpec",
    "PrecompileReport", "Problem", "PrunedEntry", "RepairItem", "Resolution", "RestorePlan",
    "RetirePlan", "RetirePolicy", "SchemaState", "Signature", "StopSummary", "TempFile", "Toc",
    "Upload", "UploadPlan", "Verdict", "VerifyReport", "WarmCell", "WarmReport"
]
