"""The lifecycle face: verify, gc, retire, copy, repair and bundle, each verb(Request) -> Result."""

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
