"""Restore a matrix's entries from the store alone: resolve, scan, plan, apply, judge.

For each cell the entry key is ``entry_key(cell, this host's fingerprint)``; its manifest is read
from ``manifests/<key>.json`` (no index needed). Missing cells are checked against the store's
``cells/<cell-key>/`` pointers to tell "never built" from "built for another environment".

Each manifest read is also kept beside the cache (``<target>/.neffcache-entries/<key>.json``;
manifests are immutable). ``restore_local`` uses those copies and the state file alone to answer
"every requested cell is already in place" without contacting the store: the common boot of an
instance whose cache survived, in one stat pass and no network.

Exit rule (``outcome_error``), first match wins:
  4  a manifest was rejected, or a blob was missing/corrupt/truncated
  1  a file could not be written locally (permissions, disk full, symlink in the way)
  6  the store could not be reached for some manifest or blob
  3  the deadline stopped the restore before everything was in place
  5  no requested cell could be restored and some missing cells have entries built for
     another fingerprint
  3  some requested cells have no entry
  0  every requested cell is restored (or was already present and valid)
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neffcache.backends import Backend, cache_environment, root_dirs
from neffcache.canonical import digest_of
from neffcache.errors import (
    CacheMissError,
    DeadlineExceededError,
    FingerprintMismatchError,
    IntegrityError,
    ManifestError,
    NeffcacheError,
    NotFoundError,
    UnavailableError,
    exit_code_for,
)
from neffcache.fingerprint import Fingerprint
from neffcache.manifest import Manifest, decode_manifest, entry_key
from neffcache.matrix import Cell
from neffcache.restore_apply import (
    FileFailure,
    Progress,
    Roots,
    apply_restore,
    load_state,
    save_state,
    scan_present,
)
from neffcache.restore_local import (
    LOCAL_ENTRIES,
    confirm_in_place,
    local_manifest_path,
    manifest_of,
    read_local_doc,
    read_missing,
    save_local_manifests,
    save_missing,
)
from neffcache.restore_plan import (
    Conflict,
    FileId,
    cell_verdicts,
    plan_restore,
    wanted_sizes,
)
from neffcache.restore_units import DEFAULT_UNITS, UnitPolicy
from neffcache.store import Store, manifest_key
from neffcache.store.base import CELLS
from neffcache.thread_pool import map_in_threads

REPORT_SCHEMA = 1
MAX_LISTED_FAILURES = 100
__all__ = ["LOCAL_ENTRIES", "RestoreResult", "resolve_entries", "restore_cells",
           "restore_local"]


@dataclass(frozen=True, slots=True)
class CellFailure:
    cell_id: str
    kind: str  # integrity | unavailable
    message: str


@dataclass(frozen=True, slots=True)
class Resolution:
    """Which requested cells have an entry for this fingerprint, and which do not."""

    found: tuple[Manifest, ...]
    missing: tuple[Cell, ...]
    failed: tuple[CellFailure, ...]
    unresolved: tuple[Cell, ...]  # not looked up before the deadline
    elsewhere: tuple[tuple[str, tuple[str, ...]], ...] = ()  # cell id -> other fingerprint keys


@dataclass(frozen=True, slots=True)
class RestoreResult:
    backend: str
    fingerprint_key: str
    store_url: str
    target: str
    requested: tuple[str, ...]
    resolution: Resolution
    restored: tuple[str, ...]
    incomplete: tuple[str, ...]
    files_fetched: int
    files_skipped: int
    bytes_fetched: int
    failures: tuple[FileFailure, ...]
    deadline_hit: bool
    seconds: float
    environment: tuple[tuple[str, str], ...] = field(default=())
    # Paths entries disagree about; the first cell's record won each (see restore_plan).
    conflicts: tuple[Conflict, ...] = field(default=())

    def error(self) -> NeffcacheError | None:
        return outcome_error(self)

    def to_json(self) -> dict[str, Any]:
        err = self.error()
        code = exit_code_for(err) if err else 0
        res = self.resolution
        return {
            "schema_version": REPORT_SCHEMA,
            "status": "ok" if code == 0 else ("partial" if code == 3 else "failed"),
            "exit_code": code,
            "error": str(err) if err else None,
            "backend": self.backend,
            "fingerprint_key": self.fingerprint_key,
            "store": self.store_url,
            "target": self.target,
            "cells_requested": list(self.requested),
            "cells_restored": list(self.restored),
            "cells_missing": [c.id for c in res.missing],
            "cells_incomplete": list(self.incomplete) + [c.id for c in res.unresolved],
            "cells_failed": [{"cell": f.cell_id, "kind": f.kind, "error": f.message}
                             for f in res.failed],
            "cells_elsewhere": {cid: list(fps) for cid, fps in res.elsewhere},
            "entries": [m.entry_key for m in res.found],
            "files_fetched": self.files_fetched,
            "files_skipped": self.files_skipped,
            "files_failed": [f.to_json() for f in self.failures[:MAX_LISTED_FAILURES]],
            "files_failed_count": len(self.failures),
            "bytes_fetched": self.bytes_fetched,
            "deadline_hit": self.deadline_hit,
            "seconds": round(self.seconds, 3),
            "environment": dict(self.environment),
            "conflicts": len(self.conflicts),
        }


def outcome_error(r: RestoreResult) -> NeffcacheError | None:
    """The error a restore ends with (None for success); see the module docstring."""
    res = r.resolution
    kinds = {f.kind for f in r.failures} | {f.kind for f in res.failed}
    first: dict[str, str] = {}
    for kind, message in [(f.kind, f.message) for f in r.failures] + \
            [(f.kind, f.message) for f in res.failed]:
        first.setdefault(kind, message)
    n_fail = len(r.failures) + len(res.failed)
    if "integrity" in kinds:
        msg = first["integrity"]
        return IntegrityError(f"{n_fail} problem(s) found, nothing bad installed; first: {msg}",
                              hint="neffcache verify")
    if "io" in kinds:
        return NeffcacheError(f"{n_fail} file(s) could not be installed; first: {first['io']}")
    if "unavailable" in kinds:
        return UnavailableError(f"store {r.store_url} unavailable: {first['unavailable']}")
    if r.deadline_hit:
        left = len(r.requested) - len(r.restored) - len(res.missing)
        return DeadlineExceededError(
            f"deadline reached: {len(r.restored)} of {len(r.requested)} cells restored, "
            f"{left} not finished (rerun to resume)")
    if res.missing:
        ids = ", ".join(c.id for c in res.missing[:3]) + (", ..." if len(res.missing) > 3 else "")
        if not r.restored and res.elsewhere:
            cell_key = next(c.key for c in res.missing if c.id == res.elsewhere[0][0])
            other = digest_of({"cell": cell_key, "fingerprint": res.elsewhere[0][1][0]})
            return FingerprintMismatchError(
                f"no requested cell has an entry for fingerprint {r.fingerprint_key[:12]}; "
                f"{len(res.elsewhere)} were built for another environment ({ids})",
                hint=f"neffcache fingerprint --explain {other}")
        return CacheMissError(f"{len(res.missing)} of {len(r.requested)} cells have no entry for "
                              f"fingerprint {r.fingerprint_key[:12]}: {ids}",
                              hint="neffcache precompile MATRIX (on a build host)")
    return None


# --- resolve -------------------------------------------------------------------------------

def resolve_entries(store: Store, cells: Sequence[Cell], fingerprint: Fingerprint,
                    backend: Backend, *, workers: int = 16,
                    deadline: float | None = None) -> Resolution:
    """Read each cell's manifest for this fingerprint (in parallel), validating it fully."""

    def one(cell: Cell) -> tuple[Cell, Manifest | CellFailure | str]:
        if deadline is not None and time.monotonic() >= deadline:
            return cell, "unresolved"
        key = entry_key(cell, fingerprint)
        try:
            data = store.read(manifest_key(key))
        except NotFoundError:
            return cell, "missing"
        except UnavailableError as exc:
            return cell, CellFailure(cell.id, "unavailable", str(exc))
        try:
            m = decode_manifest(data, allowed_roots=backend.root_names,
                                source=f"manifests/{key}.json")
            if m.entry_key != key:
                raise ManifestError(f"manifests/{key}.json describes entry {m.entry_key}")
        except ManifestError as exc:
            return cell, CellFailure(cell.id, "integrity", str(exc))
        return cell, m

    found: list[Manifest] = []
    missing: list[Cell] = []
    failed: list[CellFailure] = []
    unresolved: list[Cell] = []
    for cell, outcome in map_in_threads(one, cells, workers):
        if isinstance(outcome, Manifest):
            found.append(outcome)
        elif isinstance(outcome, CellFailure):
            failed.append(outcome)
        else:
            (missing if outcome == "missing" else unresolved).append(cell)
    elsewhere = find_elsewhere(store, missing, fingerprint, workers=workers, deadline=deadline)
    return Resolution(tuple(found), tuple(missing), tuple(failed), tuple(unresolved), elsewhere)


def find_elsewhere(store: Store, cells: Sequence[Cell], fingerprint: Fingerprint, *,
                   workers: int = 16, deadline: float | None = None
                   ) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """For cells without an entry here: the other fingerprints they were built for (one LIST
    of ``cells/<cell-key>/`` each). Store errors here only lose the diagnosis."""

    def one(cell: Cell) -> tuple[str, tuple[str, ...]]:
        if deadline is not None and time.monotonic() >= deadline:
            return cell.id, ()
        prefix = f"{CELLS}{cell.key}/"
        try:
            names = [k[len(prefix):] for k in store.list(prefix)]
        except (UnavailableError, NotFoundError):
            return cell.id, ()
        fps = sorted(n[:-5] for n in names if n.endswith(".json") and "/" not in n)
        return cell.id, tuple(f for f in fps if f != fingerprint.key)

    return tuple((cid, fps) for cid, fps in map_in_threads(one, cells, workers) if fps)


# --- the whole restore ----------------------------------------------------------------------

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
    with Roots(dirs) as roots:
        state = load_state(dirs)
        wanted = wanted_sizes(manifests)
        present, records = scan_present(roots, wanted, state, workers=min(workers, 8),
                                        deadline=deadline)
        plan = plan_restore(manifests, dirs, present)
        report = apply_restore(store, plan, workers=workers, deadline=deadline,
                               progress=progress, roots=roots,
                               packs=[p for m in manifests for p in m.packs], policy=units,
                               parts=[p for m in manifests for p in m.parts])
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


def restore_local(cells: Sequence[Cell], backend: Backend, fingerprint: Fingerprint,
                  target: Path, *, store_url: str) -> RestoreResult | None:
    """The result of a restore that finds everything in place, judged from the local copies
    of the entries' manifests and the state files alone (no store, no hashing; see
    ``neffcache.restore_local``); None when any requested cell lacks a local copy or any of
    its files is absent, changed or unvouched — then a full ``restore_cells`` decides. Cells
    the last full restore found without an entry (``read_missing``, for a few hours) count
    as missing without asking the store. The result's manifests carry no file list: the
    files were confirmed, not planned."""
    started = time.monotonic()
    requested = tuple(c.id for c in cells)
    target = Path(target).absolute()
    all_keys = [entry_key(c, fingerprint) for c in cells]
    known_missing = read_missing(target, fingerprint.key, time.time()) if any(
        not local_manifest_path(target, k).exists() for k in all_keys) else {}
    missing = [c for c, k in zip(cells, all_keys, strict=True) if k in known_missing]
    cells = [c for c, k in zip(cells, all_keys, strict=True) if k not in known_missing]
    keys = [k for k in all_keys if k not in known_missing]
    docs = [read_local_doc(target, k, backend.root_names) for k in keys]
    dirs = root_dirs(backend, str(target))
    if any(d is None for d in docs) or not all(os.path.isdir(d) for d in dirs.values()):
        return None
    confirmed = confirm_in_place(docs, dirs)  # type: ignore[arg-type]
    conflicts: tuple[Conflict, ...] = ()
    if confirmed is None:  # a file changed, or entries share paths: plan it, still locally
        full = [manifest_of(d, k) for d, k in zip(docs, keys, strict=True)]  # type: ignore[arg-type]
        if len(full) < 2 or any(m is None for m in full):
            return None
        with Roots(dirs) as roots:
            present, _ = scan_present(roots, wanted_sizes(full), load_state(dirs),  # type: ignore[arg-type]
                                      hash_unknown=False)
        plan = plan_restore(full, dirs, present)  # type: ignore[arg-type]
        if plan.fetch:
            return None
        confirmed, conflicts = len(plan.present), plan.conflicts
    found = [manifest_of(d, k, with_files=False) for d, k in zip(docs, keys, strict=True)]  # type: ignore[arg-type]
    if any(m is None for m in found):
        return None
    elsewhere = tuple((c.id, known_missing[entry_key(c, fingerprint)]) for c in missing
                      if known_missing[entry_key(c, fingerprint)])
    return RestoreResult(
        backend=backend.name, fingerprint_key=fingerprint.key, store_url=store_url,
        target=str(target), requested=requested,
        resolution=Resolution(tuple(found), tuple(missing), (), (),  # type: ignore[arg-type]
                              elsewhere),
        restored=tuple(c.id for c in cells), incomplete=(), files_fetched=0,
        files_skipped=confirmed, bytes_fetched=0, failures=(), deadline_hit=False,
        seconds=time.monotonic() - started,
        environment=tuple(sorted(cache_environment(backend, str(target)).items())),
        conflicts=conflicts)
