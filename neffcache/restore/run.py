"""The whole restore from the store under DIR's lock (``run_job``), and its dry run."""

from __future__ import annotations

import itertools
import os
import resource
import sys
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any, Concatenate, ParamSpec

from neffcache.backends import root_dirs
from neffcache.errors import ExitRule, NeffcacheError
from neffcache.manifest import entry_key
from neffcache.restore.apply import RestoreReport, apply_restore
from neffcache.restore.fs import Held, Roots, lock_destination, sweep_dirs, sweep_temps, sweep_trees
from neffcache.restore.install import Failures, FailureTally, FileFailure
from neffcache.restore.known import read_copies, resolve_known
from neffcache.restore.local import save_missing
from neffcache.restore.outcome import RestoreJob, RestoreResult, job_result
from neffcache.restore.plan import (
    BlobGet,
    BlobPart,
    FileId,
    PackRun,
    RestorePlan,
    Unit,
    cell_verdicts,
    plan_restore,
    unwanted_files,
    wanted_sizes,
)
from neffcache.restore.resolve import Resolution, resolve_entries
from neffcache.restore.scan import scan_present
from neffcache.restore.seen import Present
from neffcache.restore.state import (
    Durable,
    Pending,
    StateRecord,
    SyncOutcome,
    load_state,
    load_states,
    overlay,
    pending_now,
    save_state,
    settle_pending,
)
from neffcache.store import Store

PREVIEW_SCHEMA = 1
MAX_LISTED_UNITS = 1000
P = ParamSpec("P")


def run_job(store: Store, job: RestoreJob) -> RestoreResult:
    """Restore ``job`` from ``store``, holding the target's lock (waited for until the deadline)."""
    started = time.monotonic()
    with lock_destination(str(job.target), deadline=job.deadline, on_wait=job.notice) as held:
        try:
            result, hung = _locked(store, job, held, started)
        except Exception:
            held.finished()  # unwound: its temp files were removed on the way
            raise
        if not hung:  # a transfer hung at the deadline may still leave a temp file behind
            held.finished()  # (nor when interrupted: then the next run sweeps the roots)
    return result


def _taking_job(make: Callable[P, RestoreJob]
                ) -> Callable[Concatenate[Store, P], RestoreResult]:
    def restore_cells(store: Store, /, *args: P.args, **kwargs: P.kwargs) -> RestoreResult:
        """Restore ``RestoreJob(*args, **kwargs)`` (cells, backend, fingerprint, target, then
        the job's fields as keywords) from an open ``store``: the restore step alone."""
        return run_job(store, make(*args, **kwargs))

    return restore_cells


restore_cells = _taking_job(RestoreJob)  # RestoreJob's fields, declared there once


def _locked(store: Store, job: RestoreJob, held: Held,
            started: float) -> tuple[RestoreResult, bool]:
    """The restore under the lock; and whether a transfer still hangs at the deadline."""
    fingerprint, deadline = job.fingerprint, job.deadline
    dirs = root_dirs(job.backend, str(job.target))
    roots = Roots(dirs)  # refuses a root that is a symlink
    report: RestoreReport | None = None
    try:
        # Under the lock every temp file is stale (after a killed run: anywhere under the roots).
        stale = sweep_temps(held.entries_fd) + (sweep_trees(roots) if held.unclean else 0)
        copies = read_copies(job.target, job.entry_keys(), job.backend,
                             job.trusted)  # before the state table: see read_copies
        state, pending = load_states(dirs)  # one read of each state file, rows packed
        # This boot's pending files are synced before anything trusts them unhashed.
        settled = settle_pending(roots, pending, pending, workers=min(job.workers, 8),
                                 deadline=deadline)
        _rss("settle")
        known = resolve_known(store, job, roots, dirs, overlay(state, settled.durable.records),
                              copies)
        del copies  # in known.resolution.found: no second reference to a million records
        _rss("known")
        resolution, present, records = known.resolution, known.present, known.records
        manifests = resolution.found
        if not resolution.unresolved and not resolution.failed:
            other = dict(resolution.elsewhere)
            save_missing(job.target, fingerprint.key,
                         {entry_key(c, fingerprint): other.get(c.id, ())
                          for c in resolution.missing}, known.missing_checked_at)
        _rss("copies")
        # taken before the plan, without a map of the paths wanted (~170 MiB per million)
        unwanted = unwanted_files(manifests, itertools.chain(state, pending))
        plan = plan_restore(manifests, dirs, present, job.units)
        seen = present  # its paths only (files in place as vouched for), for the state file
        del present, known, manifests  # and the packs' members: the units say where blobs are
        resolution = replace(resolution, found=tuple(replace(m, packs=(), parts=())
                                                     for m in resolution.found))
        _rss("plan")
        if not held.unclean:
            stale += sweep_dirs(roots, {(t.root, t.path.rpartition("/")[0])
                                        for g in plan.fetch for t in g.targets})
        on_ready = _announce(job, resolution, plan)
        report = apply_restore(store, plan, roots, workers=job.transfers or job.workers,
                               deadline=deadline, progress=job.progress, on_ready=on_ready)
        _rss("apply")
        plan = replace(plan, fetch=(), units=())  # done with: report.installed holds the targets
        records.update(zip((t.id for t in report.installed), report.states, strict=True))
        report = replace(report, states=())
        failures = report.failures + _sync_failures(settled)
        _save(dirs, state, pending, settled.durable, seen, records, unwanted)
        del records, state, seen  # a million files: what is held at the end is what counts
        _rss("save")
    finally:
        if report is None or not report.hung:  # a hung transfer's thread still uses them
            roots.close()
    return _result(store, job, resolution, plan, report, failures, started, stale), \
        bool(report.hung)


def _announce(job: RestoreJob, resolution: Resolution,
              plan: RestorePlan) -> Callable[[int], None] | None:
    """Announce the cells in place, unmark the others; returns what announces each as it lands."""
    announcer, cells = job.announcer, job.cells
    if announcer is None:
        return None
    planned = [(m.cell.id, m.entry_key) for m in resolution.found]
    now = [p for p, n in zip(planned, plan.waiting, strict=True) if n == 0]
    ready_now = {cid for cid, _ in now}
    announcer.reset(now, [c.id for c in cells if c.id not in ready_now])
    return lambda i: announcer.ready(*planned[i])


def _rss(phase: str) -> None:
    """With ``NEFFCACHE_DEBUG_RSS=1``: RSS now and at peak after ``phase``, to stderr."""
    if os.environ.get("NEFFCACHE_DEBUG_RSS") != "1":
        return
    with open("/proc/self/statm", "rb") as f:
        now = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
    print(f"neffcache rss: {phase:<10} {now:6d} MiB now, {peak:6d} MiB peak", file=sys.stderr,
          flush=True)


def _save(dirs: Mapping[str, str], state: Mapping[FileId, StateRecord], pending: Pending,
          settled: Durable, seen: Present, records: Mapping[FileId, StateRecord],
          unwanted: Collection[FileId]) -> None:
    """Write the state file if it changes: it vouches for what it did and still holds, and what
    was settled or re-read this run; every other file verified this run is pending."""
    durable = Durable.vouched(state, seen, records, unwanted,
                              settled.still(records) | Durable.reread(pending, records))
    waiting = pending_now(records, skip=durable.records,  # a view: no copies of a million
                          also={k: pending[k] for k in unwanted if k in pending})
    if not _equal(durable.records, state) or not _equal(waiting, pending):
        save_state(dirs, durable, waiting)


def _equal(a: Mapping[FileId, object], b: Mapping[FileId, object]) -> bool:
    return len(a) == len(b) and all(k in b and b[k] == v for k, v in a.items())


def _sync_failures(settled: SyncOutcome) -> Failures:
    """A pending file whose ``fdatasync`` failed stays pending and fails the run."""
    tally = FailureTally()
    for (root, path), why in settled.failed:
        tally.add(FileFailure(root, path, "io", f"{root}/{path}: could not be made durable "
                              f"({why}); rerun the restore"))
    return tally.done()


def _result(store: Store, job: RestoreJob, resolution: Resolution, plan: RestorePlan,
            report: RestoreReport, failures: Failures, started: float,
            stale: int) -> RestoreResult:
    manifests = resolution.found
    in_place: set[FileId] = {t.id for t in plan.present}
    in_place.update(t.id for t in report.installed)  # one set of a million, not three
    restored, incomplete = cell_verdicts(manifests, in_place)
    return replace(
        job_result(job, store.url, resolution, started), restored=restored,
        incomplete=incomplete, files_fetched=len(report.installed),
        files_skipped=len(plan.present), bytes_fetched=report.bytes_fetched,
        failures=failures.listed, failed_count=failures.count,
        deadline_hit=report.deadline_hit or bool(resolution.unresolved),
        conflicts=plan.conflicts, stale_temps_removed=stale)


@dataclass(frozen=True, slots=True)
class RestorePreview(ExitRule):
    """A restore's plan before any byte is fetched; ``judged`` is the result the restore would
    report if every planned fetch succeeded."""

    plan: RestorePlan
    judged: RestoreResult

    def error(self) -> NeffcacheError | None:
        """The error the restore would end with if every planned fetch succeeded, or None."""
        return self.judged.error()

    def to_json(self) -> dict[str, Any]:
        """The document ``restore --dry-run --json`` prints."""
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
    """Resolve, scan and plan as ``run_job`` would, creating, writing and fetching nothing."""
    started = time.monotonic()
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
