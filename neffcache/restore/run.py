"""The whole restore from the store: resolve, keep manifest copies, scan, plan, apply, judge.

Steps, each a module of this package (imports point down this list):
``resolve`` (manifests from the store) → ``local`` (copies kept beside the cache) →
``scan`` (what is in place) → ``plan`` (what to fetch, as which requests) → ``apply``
(``fetch`` units, ``install`` files, on ``fs`` primitives) → ``outcome`` (result and exit rule).
``neffcache.restore.local.restore_local`` answers "all in place" without the store.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from neffcache.backends import Backend, cache_environment, root_dirs
from neffcache.fingerprint import Fingerprint
from neffcache.manifest import entry_key
from neffcache.matrix import Cell
from neffcache.restore.apply import Progress, apply_restore
from neffcache.restore.fs import Roots
from neffcache.restore.local import save_local_manifests, save_missing
from neffcache.restore.outcome import RestoreResult
from neffcache.restore.plan import (
    DEFAULT_UNITS,
    FileId,
    UnitPolicy,
    cell_verdicts,
    plan_restore,
    wanted_sizes,
)
from neffcache.restore.resolve import resolve_entries
from neffcache.restore.scan import scan_present
from neffcache.restore.state import load_state, save_state
from neffcache.store import Store


def restore_cells(store: Store, cells: Sequence[Cell], backend: Backend,
                  fingerprint: Fingerprint, target: Path, *, workers: int = 16,
                  deadline: float | None = None, progress: Progress | None = None,
                  units: UnitPolicy = DEFAULT_UNITS) -> RestoreResult:
    """Restore ``cells`` into ``target/<root>`` for each of the backend's cache roots;
    ``units`` says how blobs become requests (pack runs, large-blob parts)."""
    started = time.monotonic()
    target = Path(target).absolute()
    dirs = root_dirs(backend, str(target))
    resolution = resolve_entries(store, cells, fingerprint, backend, workers=workers,
                                 deadline=deadline)
    manifests = resolution.found
    save_local_manifests(target, manifests)
    if not resolution.unresolved and not resolution.failed:
        other = dict(resolution.elsewhere)
        save_missing(target, fingerprint.key, {entry_key(c, fingerprint): other.get(c.id, ())
                                               for c in resolution.missing}, time.time())
    roots = Roots(dirs)
    report = None
    try:
        state = load_state(dirs)
        wanted = wanted_sizes(manifests)
        present, records = scan_present(roots, wanted, state, workers=min(workers, 8),
                                        deadline=deadline)
        plan = plan_restore(manifests, dirs, present, units)
        report = apply_restore(store, plan, workers=workers, deadline=deadline,
                               progress=progress, roots=roots)
    finally:
        if report is None or not report.hung:  # a hung transfer's thread still uses them
            roots.close()
    in_place: set[FileId] = {t.id for t in plan.present} | {t.id for t in report.installed}
    if report.states or any(state.get(k) != r for k, r in records.items()):
        records.update(dict(report.states))
        save_state(dirs, {**{k: v for k, v in state.items() if k not in wanted}, **records})
    restored, incomplete = cell_verdicts(manifests, in_place)
    return RestoreResult(
        backend=backend.name, fingerprint_key=fingerprint.key, store_url=store.url,
        target=str(target), requested=tuple(c.id for c in cells), resolution=resolution,
        restored=restored, incomplete=incomplete, files_fetched=len(report.installed),
        files_skipped=len(plan.present), bytes_fetched=report.bytes_fetched,
        failures=report.failures,
        deadline_hit=report.deadline_hit or bool(resolution.unresolved),
        seconds=time.monotonic() - started,
        environment=tuple(sorted(cache_environment(backend, str(target)).items())),
        conflicts=plan.conflicts)
