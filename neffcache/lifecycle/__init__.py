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

from __future__ import annotations

from typing import TYPE_CHECKING

from neffcache.faces import lazy_face

# module -> the names the face takes from it, each imported on first use.
_FACE = {
    "bundle_run": ("ExportBundleRequest", "ExportBundleResult", "ImportBundleRequest",
                   "ImportBundleResult", "ShowBundleRequest", "ShowBundleResult",
                   "export_bundle", "import_bundle", "show_bundle"),
    "copy": ("CopyEntriesResult",),
    "copy_run": ("CopyEntriesRequest", "copy_entries"),
    "gc_run": ("CollectGarbageRequest", "CollectGarbageResult", "collect_garbage"),
    "repair_run": ("RepairRequest", "RepairResult", "repair_store"),
    "retire": ("sdk_label",),
    "retire_run": ("RetireEntriesRequest", "RetireEntriesResult", "retire_entries"),
    "verify": ("VerifyStoreResult",),
    "verify_local": ("VerifyLocalDirResult",),
    "verify_run": ("VerifyLocalDirRequest", "VerifyStoreRequest", "verify_local_dir",
                   "verify_store"),
}
__all__, __getattr__ = lazy_face(globals(), _FACE)

if TYPE_CHECKING:  # written by tools/faces.py from _FACE: edit the table, not this
    # ruff: noqa: F401 - re-exported: the face's __all__ is derived from _FACE
    # isort: off
    from neffcache.lifecycle.bundle_run import (ExportBundleRequest, ExportBundleResult,
        ImportBundleRequest, ImportBundleResult, ShowBundleRequest, ShowBundleResult, export_bundle,
        import_bundle, show_bundle)
    from neffcache.lifecycle.copy import CopyEntriesResult
    from neffcache.lifecycle.copy_run import CopyEntriesRequest, copy_entries
    from neffcache.lifecycle.gc_run import (CollectGarbageRequest, CollectGarbageResult,
        collect_garbage)
    from neffcache.lifecycle.repair_run import RepairRequest, RepairResult, repair_store
    from neffcache.lifecycle.retire import sdk_label
    from neffcache.lifecycle.retire_run import (RetireEntriesRequest, RetireEntriesResult,
        retire_entries)
    from neffcache.lifecycle.verify import VerifyStoreResult
    from neffcache.lifecycle.verify_local import VerifyLocalDirResult
    from neffcache.lifecycle.verify_run import (VerifyLocalDirRequest, VerifyStoreRequest,
        verify_local_dir, verify_store)
    # isort: on
