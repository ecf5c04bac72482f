"""One restore as values: its job (``RestoreJob``), its result (``RestoreResult``), its error."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neffcache.backends import Backend, cache_environment
from neffcache.errors import (
    CacheMissError,
    DeadlineExceededError,
    ExitRule,
    FingerprintMismatchError,
    IntegrityError,
    NeffcacheError,
    UnavailableError,
    exit_code_for,
    repair_hint,
)
from neffcache.fingerprint import Fingerprint
from neffcache.manifest import entry_key, entry_key_for
from neffcache.matrix import Cell
from neffcache.restore.apply import Progress
from neffcache.restore.install import LISTED_FAILURES, FileFailure
from neffcache.restore.plan import DEFAULT_UNITS, Conflict, UnitPolicy
from neffcache.restore.ready import Announcer
from neffcache.restore.resolve import Resolution
from neffcache.signing import PublicKey
from neffcache.trust import signers

REPORT_SCHEMA = 1
Notice = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class RestoreJob:
    """What one restore restores (``cells`` in priority order, into ``target/<root>``) and how:
    ``workers`` read manifests and scan, ``transfers`` fetch (None: ``workers``), no new work
    after ``deadline`` (monotonic)."""

    cells: tuple[Cell, ...]
    backend: Backend
    fingerprint: Fingerprint
    target: Path
    workers: int = 16
    transfers: int | None = None
    deadline: float | None = None
    trusted: Sequence[PublicKey] = ()
    notice: Notice | None = None
    progress: Progress | None = None
    announcer: Announcer | None = None
    units: UnitPolicy = DEFAULT_UNITS

    def __post_init__(self) -> None:  # a list of cells, a relative target: made exact once
        object.__setattr__(self, "cells", tuple(self.cells))
        object.__setattr__(self, "target", Path(self.target).absolute())

    def entry_keys(self) -> list[str]:
        return [entry_key(c, self.fingerprint) for c in self.cells]


def outcome_error(r: RestoreResult) -> NeffcacheError | None:
    """The error a restore ends with (None for success): the first rule below that matches."""
    res = r.resolution
    # the first message of each kind of failure (the last pair of a kind wins in dict())
    first = dict(reversed([(f.kind, f.message) for f in r.failures]
                          + [(f.kind, f.message) for f in res.failed]))
    n_fail = r.files_failed + len(res.failed)
    if "integrity" in first:
        msg = first["integrity"]
        return IntegrityError(f"{n_fail} problem(s) found, nothing bad installed; first: {msg}",
                              hint=repair_hint(r.store_url))
    if "io" in first:
        return NeffcacheError(f"{n_fail} file(s) could not be installed; first: {first['io']}")
    if "unavailable" in first:
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
            other = entry_key_for(cell_key, res.elsewhere[0][1][0])
            return FingerprintMismatchError(
                f"no requested cell has an entry for fingerprint {r.fingerprint_key[:12]}; "
                f"{len(res.elsewhere)} were built for another environment ({ids})",
                hint=shlex.join(["neffcache", "fingerprint", "--explain", other,
                                 *r.explain_args]))  # run as printed: the fields that differ
        return CacheMissError(f"{len(res.missing)} of {len(r.requested)} cells have no entry for "
                              f"fingerprint {r.fingerprint_key[:12]}: {ids}",
                              hint="neffcache precompile MATRIX (on a build host)")
    return None


@dataclass(frozen=True, slots=True)
class RestoreResult(ExitRule):
    """What a restore did: the cells requested, restored, missing or incomplete, the files fetched,
    skipped and failed, and the cache environment of the target. ``error()`` is the exception it
    ends with (None: every requested cell in place), ``exit_code`` its exit code, ``to_json()`` the
    document ``neffcache restore --json`` prints and the report is built from."""

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
    # The first files that failed (then the first of each kind); ``files_failed`` counts all.
    failures: tuple[FileFailure, ...]
    deadline_hit: bool
    seconds: float
    environment: tuple[tuple[str, str], ...] = field(default=())
    # Paths entries disagree about; the first cell's record won each.
    conflicts: tuple[Conflict, ...] = field(default=())
    # Temp files a killed restore had left in DIR, removed by this one.
    stale_temps_removed: int = 0
    # The interpreter the fingerprint describes (``neffcache.restore.restore`` sets it).
    fingerprint_python: str | None = None
    # --python PATH, --store URL for `neffcache fingerprint --explain`: the exit-5 hint.
    explain_args: tuple[str, ...] = ()
    # With mirrors: (store URL, objects or ranges it served), in the stores' order.
    served_by: tuple[tuple[str, int], ...] = ()
    # Whether trusted keys were configured.
    signatures_checked: bool = False
    # Entries whose local copy no trusted key signed: their files left the cache roots.
    evicted: tuple[str, ...] = ()
    evicted_files: int = 0
    # Cells announced ready, in that order: (cell id, seconds since the restore's start).
    ready: tuple[tuple[str, float], ...] = ()
    # How many files failed in all (None: as many as ``failures`` lists).
    failed_count: int | None = None
    # Files in place, pending from an earlier restore, not synced before the deadline.
    files_unsynced: int = 0

    @property
    def repair_hint(self) -> str | None:
        """The command that repairs the store from the first mirror that served objects, or None."""
        for url, n in self.served_by:
            if n and url != self.store_url:
                return f"neffcache repair --store {self.store_url} --from {url}"
        return None

    @property
    def files_failed(self) -> int:
        """How many files failed in all (``failures`` lists the first few)."""
        return len(self.failures) if self.failed_count is None else self.failed_count

    @property
    def signers(self) -> tuple[str, ...]:
        """The key ids that signed the entries found, each once."""
        return signers(self.resolution.found)

    error = outcome_error

    def judged_json(self) -> dict[str, Any]:
        """The verdict and the cells, as a restore's report and a dry run both show them."""
        err = self.error()
        code = exit_code_for(err) if err else 0
        res = self.resolution
        return {
            "status": "ok" if code == 0 else ("partial" if code == 3 else "failed"),
            "exit_code": code,
            "error": str(err) if err else None,
            "backend": self.backend,
            "fingerprint_key": self.fingerprint_key,
            "store": self.store_url,
            "target": self.target,
            "cells_requested": list(self.requested),
            "cells_missing": [c.id for c in res.missing],
            "cells_failed": [{"cell": f.cell_id, "kind": f.kind, "error": f.message}
                             for f in res.failed],
            "cells_elsewhere": {cid: list(fps) for cid, fps in res.elsewhere},
            "entries": [m.entry_key for m in res.found],
        }

    def to_json(self) -> dict[str, Any]:
        """The restore's JSON document (a documented contract: fields are added, never renamed)."""
        res = self.resolution
        return {
            "schema_version": REPORT_SCHEMA,
            **self.judged_json(),
            "cells_restored": list(self.restored),
            "cells_incomplete": list(self.incomplete) + [c.id for c in res.unresolved],
            "files_fetched": self.files_fetched,
            "files_skipped": self.files_skipped,
            "files_failed": [f.to_json() for f in self.failures[:LISTED_FAILURES]],
            "files_failed_count": self.files_failed,
            "files_unsynced": self.files_unsynced,
            "bytes_fetched": self.bytes_fetched,
            "deadline_hit": self.deadline_hit,
            "seconds": round(self.seconds, 3),
            "environment": dict(self.environment),
            "conflicts": len(self.conflicts),
            "stale_temps_removed": self.stale_temps_removed,
            "fingerprint_python": self.fingerprint_python,
            "served_by": dict(self.served_by),
            "signers": list(self.signers),
            "signatures_checked": self.signatures_checked,
            "evicted_entries": list(self.evicted),
            "evicted_files": self.evicted_files,
            "repair_hint": self.repair_hint,
            "cells_ready": [{"cell": c, "seconds": round(t, 3)} for c, t in self.ready],
        }


def job_result(job: RestoreJob, store_url: str, resolution: Resolution,
               started: float) -> RestoreResult:
    """The result of ``job`` with nothing done yet: each way of restoring replaces what it did."""
    return RestoreResult(
        backend=job.backend.name, fingerprint_key=job.fingerprint.key, store_url=store_url,
        target=str(job.target), requested=tuple(c.id for c in job.cells),
        resolution=resolution, restored=(), incomplete=(), files_fetched=0, files_skipped=0,
        bytes_fetched=0, failures=(), deadline_hit=False,
        seconds=time.monotonic() - started,
        environment=tuple(sorted(cache_environment(job.backend, str(job.target)).items())))
