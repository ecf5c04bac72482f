"""What happens to entries after publish: verify, gc, retire, copy between stores, bundles.

Use cases, each ``verb(Request) -> Result``; a result knows its ``exit_code`` (from its
``error()``) and its ``--json`` document (``to_json()``). None of them prompts: a destructive
one takes ``dry_run`` (plan only), and ``confirmed`` or a ``confirm(preview)`` callback
(``preview``: the dry run's result; when it returns False, that is the result). Common request
fields: ``store`` (None: NEFFCACHE_STORE > config file > default), ``workers``, ``progress(done,
total)``, ``notice(line)`` for warnings, and ``trusted_keys`` / ``require_signatures``, the
trust gate's policy (``neffcache.trust``; empty: NEFFCACHE_TRUSTED_KEYS, the config file's).

    verify_store(VerifyStoreRequest) -> VerifyStoreResult            neffcache verify
    verify_local_dir(VerifyLocalDirRequest) -> VerifyLocalDirResult  neffcache verify --local
    collect_garbage(CollectGarbageRequest) -> CollectGarbageResult   neffcache gc
    retire_entries(RetireEntriesRequest) -> RetireEntriesResult      neffcache retire
    copy_entries(CopyEntriesRequest) -> CopyEntriesResult            neffcache copy
    repair_store(RepairRequest) -> RepairResult                      neffcache repair
    export_bundle(ExportBundleRequest) -> ExportBundleResult         neffcache bundle export
    import_bundle(ImportBundleRequest) -> ImportBundleResult         neffcache bundle import
    show_bundle(ShowBundleRequest) -> ShowBundleResult               neffcache bundle show

Modules: see ARCHITECTURE.md. Importing this package imports no SQL, AWS or torch library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from neffcache.faces import lazy_face

# module -> the names the face takes from it, each imported on first use.
_FACE = {
    "bundle": ("ExportBundleRequest", "ExportBundleResult", "ImportBundleRequest",
               "ImportBundleResult", "ShowBundleRequest", "ShowBundleResult", "export_bundle",
               "import_bundle", "show_bundle"),
    "copy": ("CopyEntriesRequest", "CopyEntriesResult", "copy_entries"),
    "gc": ("GcPlan", "GcResult", "UploadPlan"),
    "gc_run": ("CollectGarbageRequest", "CollectGarbageResult", "collect_garbage"),
    "repair": ("RepairItem", "RepairRequest", "RepairResult", "repair_store"),
    "retire": ("EntryInfo", "RetireEntriesRequest", "RetireEntriesResult", "RetirePlan",
               "RetirePolicy", "retire_entries", "sdk_label"),
    "verify": ("Problem", "VerifyStoreRequest", "VerifyStoreResult", "verify_store"),
    "verify_local": ("LocalProblem", "VerifyLocalDirRequest", "VerifyLocalDirResult",
                     "verify_local_dir"),
}
__all__, __getattr__ = lazy_face(globals(), _FACE)

if TYPE_CHECKING:  # written by tools/faces.py from _FACE: edit the table, not this
    # ruff: noqa: F401 - re-exported: the face's __all__ is derived from _FACE
    # isort: off
    from neffcache.lifecycle.bundle import (ExportBundleRequest, ExportBundleResult,
        ImportBundleRequest, ImportBundleResult, ShowBundleRequest, ShowBundleResult, export_bundle,
        import_bundle, show_bundle)
    from neffcache.lifecycle.copy import CopyEntriesRequest, CopyEntriesResult, copy_entries
    from neffcache.lifecycle.gc import GcPlan, GcResult, UploadPlan
    from neffcache.lifecycle.gc_run import (CollectGarbageRequest, CollectGarbageResult,
        collect_garbage)
    from neffcache.lifecycle.repair import RepairItem, RepairRequest, RepairResult, repair_store
    from neffcache.lifecycle.retire import (EntryInfo, RetireEntriesRequest, RetireEntriesResult,
        RetirePlan, RetirePolicy, retire_entries, sdk_label)
    from neffcache.lifecycle.verify import (Problem, VerifyStoreRequest, VerifyStoreResult,
        verify_store)
    from neffcache.lifecycle.verify_local import (LocalProblem, VerifyLocalDirRequest,
        VerifyLocalDirResult, verify_local_dir)
    # isort: on
