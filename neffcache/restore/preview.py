"""``restore --dry-run``: the plan a restore would run — what it would fetch, from which packs and
blobs, how many bytes — computed from the store's manifests and a scan, writing nothing."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from neffcache.backends import root_dirs
from neffcache.errors import NeffcacheError
from neffcache.restore.fs import Roots
from neffcache.restore.job import RestoreJob
from neffcache.restore.outcome import RestoreResult, job_result
from neffcache.restore.plan import (
    BlobGet,
    BlobPart,
    PackRun,
    RestorePlan,
    Unit,
    plan_restore,
    wanted_sizes,
)
from neffcache.restore.resolve import Resolution, resolve_entries
from neffcache.restore.scan import scan_present
from neffcache.restore.state import load_state
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


def preview_cells(store: Store, job: RestoreJob) -> RestorePreview:
    """Resolve, scan and plan as ``run_job`` would, without creating or writing anything (no
    directories, no manifest copies, no state file) and without fetching."""
    started = time.monotonic()
    job = replace(job, target=Path(job.target).absolute())
    dirs = root_dirs(job.backend, str(job.target))
    resolution: Resolution = resolve_entries(store, job.cells, job.fingerprint, job.backend,
                                             workers=job.workers, trusted=job.trusted)
    manifests = resolution.found
    with Roots(dirs, create=False) as roots:
        present, _ = scan_present(roots, wanted_sizes(manifests), load_state(dirs),
                                  workers=min(job.workers, 8))
    plan = plan_restore(manifests, dirs, present, job.units)
    judged = replace(job_result(job, store.url, resolution, started),
                     restored=tuple(m.cell.id for m in manifests),
                     files_skipped=len(plan.present),
                     deadline_hit=bool(resolution.unresolved), conflicts=plan.conflicts,
                     environment=())  # a dry run prepares no directory
    return RestorePreview(plan, judged)
