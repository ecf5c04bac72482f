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

from __future__ import annotations

from typing import TYPE_CHECKING

from neffcache.faces import lazy_face

# module -> the names the face takes from it, each imported on first use: `import neffcache`
# (every command, the boot restore included) must not pay for the precompile machinery.
_FACE = {
    "backfill": ("BackfillPlan",),
    "backfill_cell": ("CaptureRequest", "CaptureResult", "capture_entry"),
    "claims": ("ClaimOptions",),
    "heartbeat": ("CellBeat",),
    "hit_check": ("FileState", "Verdict"),
    "intents": ("GRACE_FLOOR_SECONDS", "REFRESH_SECONDS", "held_intents"),
    "plan": ("CellReport", "Event", "PrecompileOptions", "PrecompileReport", "StopSummary",
             "VerifyReport", "stored_compile_seconds"),
    "publish": ("PublishResult", "default_producer", "publish_entry", "write_pointer"),
    "push_cell": ("PushRequest", "PushResult", "push"),
    "run": ("RunContext", "RunHooks", "apply_precompile"),
    "session": ("PrecompileRequest", "PrecompileResult", "precompile"),
    "warm": ("WarmCell", "WarmReport", "warm_restored"),
    "warm_check": ("WarmRequest", "WarmResult", "check_warm"),
}
__all__, __getattr__ = lazy_face(globals(), _FACE)

if TYPE_CHECKING:  # written by tools/faces.py from _FACE: edit the table, not this
    # ruff: noqa: F401 - re-exported: the face's __all__ is derived from _FACE
    # isort: off
    from neffcache.precompile.backfill import BackfillPlan
    from neffcache.precompile.backfill_cell import CaptureRequest, CaptureResult, capture_entry
    from neffcache.precompile.claims import ClaimOptions
    from neffcache.precompile.heartbeat import CellBeat
    from neffcache.precompile.hit_check import FileState, Verdict
    from neffcache.precompile.intents import GRACE_FLOOR_SECONDS, REFRESH_SECONDS, held_intents
    from neffcache.precompile.plan import (CellReport, Event, PrecompileOptions, PrecompileReport,
        StopSummary, VerifyReport, stored_compile_seconds)
    from neffcache.precompile.publish import (PublishResult, default_producer, publish_entry,
        write_pointer)
    from neffcache.precompile.push_cell import PushRequest, PushResult, push
    from neffcache.precompile.run import RunContext, RunHooks, apply_precompile
    from neffcache.precompile.session import PrecompileRequest, PrecompileResult, precompile
    from neffcache.precompile.warm import WarmCell, WarmReport, warm_restored
    from neffcache.precompile.warm_check import WarmRequest, WarmResult, check_warm
    # isort: on
