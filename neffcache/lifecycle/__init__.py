"""What happens to entries after publish: verify, gc, retire, copy between stores, bundles.

Use cases, each ``verb(Request) -> Result``; a result knows its ``exit_code`` (from its
``error()``) and its ``--json`` document (``to_json()``). None of them prompts: a destructive
one takes ``dry_run``, and ``confirmed`` or a ``confirm(preview)`` callback.

    verify_store(VerifyStoreRequest) -> VerifyStoreResult            neffcache verify
    verify_local_dir(VerifyLocalDirRequest) -> VerifyLocalDirResult  neffcache verify --local
    collect_garbage(CollectGarbageRequest) -> CollectGarbageResult   neffcache gc
    retire_entries(RetireEntriesRequest) -> RetireEntriesResult      neffcache retire
    copy_entries(CopyEntriesRequest) -> CopyEntriesResult            neffcache copy
    repair_store(RepairRequest) -> RepairResult                      neffcache repair
    export_bundle(ExportBundleRequest) -> ExportBundleResult         neffcache bundle export
    import_bundle(ImportBundleRequest) -> ImportBundleResult         neffcache bundle import
    show_bundle(ShowBundleRequest) -> ShowBundleResult               neffcache bundle show

Modules, bottom to top (see ARCHITECTURE.md):
``entry_select`` which entries · ``verify`` and
``verify_local`` integrity of a store and of a restored tree · ``retire`` by policy · ``gc``
unreferenced blobs · ``copy`` between stores · ``repair`` bad objects from good bytes ·
``bundle_write`` a bundle file (its format and the bundle store live in ``neffcache.store``) ·
``verify_run``, ``gc_run``, ``retire_run``, ``copy_run``, ``repair_run`` and ``bundle_run`` the
use cases.
Importing this package imports no SQL, AWS or torch library.
"""

from neffcache.lifecycle.bundle_run import (
    ExportBundleRequest,
    ExportBundleResult,
    ImportBundleRequest,
    ImportBundleResult,
    ShowBundleRequest,
    ShowBundleResult,
    export_bundle,
    import_bundle,
    show_bundle,
)
from neffcache.lifecycle.copy import CopyEntriesResult
from neffcache.lifecycle.copy_run import CopyEntriesRequest, copy_entries
from neffcache.lifecycle.gc import GcPlan, GcResult, UploadPlan
from neffcache.lifecycle.gc_run import (
    CollectGarbageRequest,
    CollectGarbageResult,
    collect_garbage,
)
from neffcache.lifecycle.repair import RepairItem
from neffcache.lifecycle.repair_run import RepairRequest, RepairResult, repair_store
from neffcache.lifecycle.retire import EntryInfo, RetirePlan, RetirePolicy, sdk_label
from neffcache.lifecycle.retire_run import (
    RetireEntriesRequest,
    RetireEntriesResult,
    retire_entries,
)
from neffcache.lifecycle.verify import Problem, VerifyStoreResult
from neffcache.lifecycle.verify_local import LocalProblem, VerifyLocalDirResult
from neffcache.lifecycle.verify_run import (
    VerifyLocalDirRequest,
    VerifyStoreRequest,
    verify_local_dir,
    verify_store,
)

__all__ = [
    "CollectGarbageRequest", "CollectGarbageResult", "CopyEntriesRequest", "CopyEntriesResult",
    "ExportBundleRequest", "ExportBundleResult", "ImportBundleRequest", "ImportBundleResult",
    "RepairRequest", "RepairResult", "RetireEntriesRequest", "RetireEntriesResult",
    "ShowBundleRequest", "ShowBundleResult",
    "VerifyLocalDirRequest", "VerifyLocalDirResult", "VerifyStoreRequest", "VerifyStoreResult",
    "collect_garbage", "copy_entries", "export_bundle", "import_bundle", "repair_store",
    "retire_entries",
    "sdk_label", "show_bundle", "verify_local_dir", "verify_store",
    # the value types in the results
    "EntryInfo", "GcPlan", "GcResult", "LocalProblem", "Problem", "RepairItem", "RetirePlan",
    "RetirePolicy", "UploadPlan",
]
