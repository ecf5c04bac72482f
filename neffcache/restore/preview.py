"""``restore --dry-run``: the plan a restore would run — what it would fetch, from which packs and
blobs, how many bytes — computed from the store's manifests and a scan, writing nothing."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neffcache.backends import Backend, root_dirs
from neffcache.errors import NeffcacheError
from neffcache.fingerprint import Fingerprint
from neffcache.matrix import Cell
from neffcache.restore.fs import Roots
from neffcache.restore.outcome import RestoreResult
from neffcache.restore.plan import (
    DEFAULT_UNITS,
    BlobGet,
    BlobPart,
    PackRun,
    RestorePlan,
    Unit,
    UnitPolicy,
    plan_restore,
    wanted_sizes,
)
from neffcache.restore.resolve import Resolution, resolve_entries
from neffcache.restore.scan import scan_present
from neffcache.restore.state import load_state
from neffcache.signing import PublicKey
from neffcache.store import Store

PREVIEW_SCHEMA = 1
MAX_LISTED_UNITS = 1000


@dataclass(frozen=True, slots=True)
class RestorePreview:
    """A restore's plan before any byte is fetched; ``judged`` is the result the restore would
    report if every planned fetch succeeded (its error decides the exit code)."""

    plan: RestorePlan
    judged: RestoreResult

    def error(self) -> NeffcacheError | None:
        """The error the restore would end with if every planned fetch succeeded, or None."""
        return self.judged.error()

    @property
    def exit_code(self) -> int:
        """What ``neffcache restore --dry-run`` exits with: 0, or the error's exit code."""
        return self.judged.exit_code

    def to_json(self) -> dict[str, Any]:
        """The document ``restore --dry-run --json`` prints: dry_run, the verdict and cells,
        files_to_fetch, files_present, blobs_to_fetch, bytes_to_fetch, requests, pack_runs,
        blob_gets, blob_parts, packs, fetch (one record per request), conflicts."""
        plan, units = self.plan, self.plan.units
        return {
            "schema_version": PREVIEW_SCHEMA,
            "dry_run": True,
            **self.judged.judged_json(),
            "files_to_fetch": plan.files_to_fetch,
            "files_present": len(plan.present),
            "blobs_to_fetch": len(plan.fetch),
            "bytes_to_fetch": plan.bytes_to_fetch,
            "requests": len(units),
            "pack_runs": sum(1 for u in units if isinstance(u, PackRun)),
            "blob_gets": sum(1 for u in units if isinstance(u, BlobGet)),
            "blob_parts": sum(1 for u in units if isinstance(u, BlobPart)),
            "packs": sorted({u.pack for u in units if isinstance(u, PackRun)}),
            "fetch": [unit_json(u) for u in units[:MAX_LISTED_UNITS]],
            "conflicts": len(plan.conflicts),
        }


def unit_json(u: Unit) -> dict[str, Any]:
    """One planned store request: its object, byte range and the files it brings."""
    if isinstance(u, PackRun):
        return {"kind": "pack", "pack": u.pack, "start": u.start, "bytes": u.length,
                "files": sum(len(s.group.targets) for s in u.slices),
                "blobs": [s.group.sha256 for s in u.slices]}
    g = u.group
    paths = [f"{t.root}/{t.path}" for t in g.targets]
    if isinstance(u, BlobGet):
        return {"kind": "blob", "sha256": g.sha256, "start": 0, "bytes": g.size,
                "paths": paths}
    return {"kind": "part", "sha256": g.sha256, "part": u.index + 1, "parts": u.count,
            "start": u.start, "bytes": u.length, "paths": paths}


def preview_cells(store: Store, cells: Sequence[Cell], backend: Backend,
                  fingerprint: Fingerprint, target: Path, *, workers: int = 16,
                  units: UnitPolicy = DEFAULT_UNITS,
                  trusted: Sequence[PublicKey] = ()) -> RestorePreview:
    """Resolve, scan and plan as ``restore_cells`` would, without creating or writing
    anything (no directories, no manifest copies, no state file) and without fetching."""
    started = time.monotonic()
    target = Path(target).absolute()
    dirs = root_dirs(backend, str(target))
    resolution: Resolution = resolve_entries(store, cells, fingerprint, backend,
                                             workers=workers, trusted=trusted)
    manifests = resolution.found
    with Roots(dirs, create=False) as roots:
        present, _ = scan_present(roots, wanted_sizes(manifests), load_state(dirs),
                                  workers=min(workers, 8))
    plan = plan_restore(manifests, dirs, present, units)
    judged = RestoreResult(
        backend=backend.name, fingerprint_key=fingerprint.key, store_url=store.url,
        target=str(target), requested=tuple(c.id for c in cells), resolution=resolution,
        restored=tuple(m.cell.id for m in manifests), incomplete=(), files_fetched=0,
        files_skipped=len(plan.present), bytes_fetched=0, failures=(),
        deadline_hit=bool(resolution.unresolved), seconds=time.monotonic() - started,
        conflicts=plan.conflicts)
    return RestorePreview(plan, judged)
