"""Pre-compile a matrix: precompile, push, capture_entry, check_warm (importing it is light)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from neffcache.faces import lazy_face

# module -> the names the face takes from it, each imported on first use (a boot restore must
# not pay for the precompile machinery).
_FACE = {
    "backfill_cell": ("BackfillPlan", "CaptureRequest", "CaptureResult", "capture_entry"),
    "heartbeat": ("CellBeat",),
    "hit_check": ("FileState", "Verdict"),
    "intents": ("GRACE_FLOOR_SECONDS", "REFRESH_SECONDS", "held_intents"),
    "plan": ("CellReport", "Event", "PrecompileOptions", "PrecompileReport", "StopSummary",
             "VerifyReport", "stored_compile_seconds"),
    "publish": ("PublishResult", "default_producer", "publish_entry", "write_pointer"),
    "push_cell": ("PushRequest", "PushResult", "push"),
    "run": ("RunContext", "RunHooks", "apply_precompile"),
    "session": ("ClaimOptions", "PrecompileRequest", "PrecompileResult", "precompile"),
    "warm": ("WarmCell", "WarmReport", "WarmRequest", "WarmResult", "check_warm",
             "warm_restored"),
}
__all__, __getattr__ = lazy_face(globals(), _FACE)

if TYPE_CHECKING:  # written by tools/faces.py from _FACE: edit the table, not this
    # ruff: noqa: F401 - re-exported: the face's __all__ is derived from _FACE
    # isort: off
    from neffcache.precompile.backfill_cell import (BackfillPlan, CaptureRequest, CaptureResult,
        capture_entry)
    from neffcache.precompile.heartbeat import CellBeat
    from neffcache.precompile.hit_check import FileState, Verdict
    from neffcache.precompile.intents import GRACE_FLOOR_SECONDS, REFRESH_SECONDS, held_intents
    from neffcache.precompile.plan import (CellReport, Event, PrecompileOptions, PrecompileReport,
        StopSummary, VerifyReport, stored_compile_seconds)
    from neffcache.precompile.publish import (PublishResult, default_producer, publish_entry,
        write_pointer)
    from neffcache.precompile.push_cell import PushRequest, PushResult, push
    from neffcache.precompile.run import RunContext, RunHooks, apply_precompile
    from neffcache.precompile.session import (ClaimOptions, PrecompileRequest, PrecompileResult,
        precompile)
    from neffcache.precompile.warm import (WarmCell, WarmReport, WarmRequest, WarmResult,
        check_warm, warm_restored)
    # isort: on
