"""Pre-compile a matrix: warm each cell in a worker process, publish what it compiled as an entry.

Use cases (each ``verb(Request) -> Result``; a result has ``to_json()``, the command's
``--json`` document, ``error()`` and ``exit_code``; a request that cannot run raises a
``NeffcacheError``):

    precompile(PrecompileRequest) -> PrecompileResult    neffcache precompile (static or --claim)
    push(PushRequest) -> PushResult                      neffcache push: one cell's cache dirs
    capture_entry(CaptureRequest) -> CaptureResult       neffcache capture: back-fill a cell
    check_warm(WarmRequest) -> WarmResult                neffcache warm: boot check after restore

(``capture`` and ``warm`` are modules here, so those two functions are named verb_noun.)

Also for the other packages: ``apply_precompile`` (a run on an open index and store, with
``PrecompileOptions``; its ``PrecompileReport``), ``warm_restored`` (one cell's first call
against restored roots) and ``Verdict``, ``stored_compile_seconds``, ``publish_entry`` /
``PublishResult`` / ``default_producer`` / ``write_pointer``, and the ``pending/`` intents
(``held_intents``, ``REFRESH_SECONDS``, ``GRACE_FLOOR_SECONDS``) that keep gc off a publish.

Modules, bottom to top (each imports only those before it here; see ARCHITECTURE.md):
``hit_check`` did a warm-up compile? · ``indexing`` tell the index, warn on failure ·
``capture`` the files of an entry · ``worker`` the subprocess · ``launch`` start it ·
``heartbeat`` what each running cell does, at an interval ·
``packing``, ``intents`` and ``publish`` write an entry into a store (``intents``: the
pending/ notes that keep gc off a publish in progress) · ``plan`` which cells to warm ·
``warm`` first call against restored caches · ``run`` the whole precompile · ``backfill``
publish what an instance compiled · ``push_cell``, ``backfill_cell``, ``warm_check`` the push,
capture and warm use cases · ``claims`` cells from the index · ``session`` the precompile use
case. Importing this package imports no SQL, AWS SDK or torch.
"""
import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from neffcache.precompile.backfill import BackfillPlan
    from neffcache.precompile.backfill_cell import CaptureRequest, CaptureResult, capture_entry
    from neffcache.precompile.claims import ClaimOptions
    from neffcache.precompile.heartbeat import CellBeat
    from neffcache.precompile.hit_check import FileState, Verdict
    from neffcache.precompile.intents import GRACE_FLOOR_SECONDS, REFRESH_SECONDS, held_intents
    from neffcache.precompile.plan import (
        CellReport,
        Event,
        PrecompileOptions,
        PrecompileReport,
        StopSummary,
        VerifyReport,
        stored_compile_seconds,
    )
    from neffcache.precompile.publish import (
        PublishResult,
        default_producer,
        publish_entry,
        write_pointer,
    )
    from neffcache.precompile.push_cell import PushRequest, PushResult, push
    from neffcache.precompile.run import RunContext, RunHooks, apply_precompile
    from neffcache.precompile.session import PrecompileRequest, PrecompileResult, precompile
    from neffcache.precompile.warm import WarmCell, WarmReport, warm_restored
    from neffcache.precompile.warm_check import WarmRequest, WarmResult, check_warm

# name -> the module that defines it, imported on first use: `import neffcache` (every
# command, the boot restore included) must not pay for the precompile machinery.
_HOME: dict[str, str] = {
    **dict.fromkeys(("BackfillPlan",), "backfill"),
    **dict.fromkeys(("CaptureRequest", "CaptureResult", "capture_entry"), "backfill_cell"),
    **dict.fromkeys(("ClaimOptions",), "claims"),
    **dict.fromkeys(("CellBeat",), "heartbeat"),
    **dict.fromkeys(("FileState", "Verdict"), "hit_check"),
    **dict.fromkeys(("GRACE_FLOOR_SECONDS", "REFRESH_SECONDS", "held_intents"), "intents"),
    **dict.fromkeys(("CellReport", "Event", "PrecompileOptions", "PrecompileReport", "StopSummary",
                     "VerifyReport", "stored_compile_seconds"), "plan"),
    **dict.fromkeys(("PublishResult", "default_producer", "publish_entry", "write_pointer"),
                    "publish"),
    **dict.fromkeys(("PushRequest", "PushResult", "push"), "push_cell"),
    **dict.fromkeys(("RunContext", "RunHooks", "apply_precompile"), "run"),
    **dict.fromkeys(("PrecompileRequest", "PrecompileResult", "precompile"), "session"),
    **dict.fromkeys(("WarmCell", "WarmReport", "warm_restored"), "warm"),
    **dict.fromkeys(("WarmRequest", "WarmResult", "check_warm"), "warm_check"),
}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'neffcache.precompile' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"neffcache.precompile.{module}"), name)
    globals()[name] = value
    return value

__all__ = [
    "GRACE_FLOOR_SECONDS", "REFRESH_SECONDS", "BackfillPlan", "CaptureRequest", "CaptureResult",
    "CellBeat", "CellReport", "ClaimOptions", "Event", "FileState", "PrecompileOptions",
    "PrecompileReport",
    "PrecompileRequest", "PrecompileResult", "PublishResult", "PushRequest", "PushResult",
    "RunContext", "RunHooks",
    "StopSummary", "Verdict", "VerifyReport", "WarmCell", "WarmReport", "WarmRequest", "WarmResult",
    "apply_precompile", "capture_entry", "check_warm", "default_producer", "held_intents",
    "precompile", "publish_entry", "push", "stored_compile_seconds", "warm_restored",
    "write_pointer",
]
