"""Restore a matrix's entries from the store alone (the face; modules: ARCHITECTURE.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from neffcache.faces import lazy_face

# module -> the names the face takes from it, each imported on first use: `import neffcache`
# (every command) loads this face, and only a restore needs the restore machinery.
_FACE = {
    "apply": ("Progress",),
    "fs": ("lock_destination",),
    "install": ("FileFailure",),
    "local": ("LOCAL_ENTRIES", "MISSING_FILE"),
    "outcome": ("RestoreResult",),
    "plan": ("Conflict", "FetchGroup", "RestorePlan"),
    "pruning": ("PruneRequest", "PruneResult", "PrunedEntry", "prune"),
    "ready": ("cell_ready",),
    "resolve": ("CellFailure", "Resolution"),
    "run": ("RestorePreview", "restore_cells"),
    "session": ("RestoreRequest", "default_workers", "preview_restore", "restore"),
    "state": ("Durable", "STATE_FILE", "forget_paths", "load_pending", "load_state", "save_state"),
}
__all__, __getattr__ = lazy_face(globals(), _FACE)

if TYPE_CHECKING:  # written by tools/faces.py from _FACE: edit the table, not this
    # ruff: noqa: F401 - re-exported: the face's __all__ is derived from _FACE
    # isort: off
    from neffcache.restore.apply import Progress
    from neffcache.restore.fs import lock_destination
    from neffcache.restore.install import FileFailure
    from neffcache.restore.local import LOCAL_ENTRIES, MISSING_FILE
    from neffcache.restore.outcome import RestoreResult
    from neffcache.restore.plan import Conflict, FetchGroup, RestorePlan
    from neffcache.restore.pruning import PrunedEntry, PruneRequest, PruneResult, prune
    from neffcache.restore.ready import cell_ready
    from neffcache.restore.resolve import CellFailure, Resolution
    from neffcache.restore.run import RestorePreview, restore_cells
    from neffcache.restore.session import RestoreRequest, default_workers, preview_restore, restore
    from neffcache.restore.state import (STATE_FILE, Durable, forget_paths, load_pending,
        load_state, save_state)
    # isort: on
