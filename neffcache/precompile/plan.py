"""Plan a precompile (warm, skip or refuse each cell) and the value objects a precompile reports."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neffcache.backends import Backend, compile_only_refusal
from neffcache.documents import Document, fields_of
from neffcache.errors import NotFoundError
from neffcache.fingerprint import Fingerprint
from neffcache.manifest import Manifest, decode_manifest, entry_key
from neffcache.matrix import Cell
from neffcache.signing import SigningKey
from neffcache.store import Store, manifest_key
from neffcache.thread_pool import map_in_threads

WARM, SKIP, REFUSE = "warm", "skip", "refuse"
SKIPPED, PUBLISHED, EXISTS, FAILED = "skipped", "published", "exists", "failed"
REFUSED = "refused"
CANCELLED = "cancelled"  # its worker was ended because the run was stopped (not a failure)
HIT, COMPILED, VERIFY_FAILED = "hit", "compiled", "verify-failed"

# A progress event: (kind, cell id, message); kinds: start, skip, done, failed, cancel,
# verify, note, claim, wait (--claim: waiting for a lease; the cell id is the matrix name);
# a warm's: start, hit, compiled, failed.
Event = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class PrecompileOptions:
    workers: int = 1
    force: bool = False
    timeout: float | None = None
    verify: bool = False
    workdir: Path | None = None
    keep_workdir: bool = False
    extra_env: tuple[tuple[str, str], ...] = ()
    compile_only: bool = False  # no device here: cells that need one are refused
    python: str | None = None  # the workers' interpreter (--python); None: this one
    heartbeat_seconds: float = 0.0  # a heartbeat per running cell this often (0: none)
    signer: SigningKey | None = field(default=None, repr=False)  # signs each new manifest


@dataclass(frozen=True, slots=True)
class CellPlan:
    cell: Cell
    entry_key: str
    ready: bool  # the store already holds this cell's entry for the fingerprint
    action: str  # warm | skip | refuse
    reason: str | None = None  # why a cell is refused


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """A fresh process warmed against the entry restored into a new directory."""

    status: str  # hit | compiled | verify-failed
    seconds: float | None  # that process's first call
    restore_seconds: float
    verdict: Mapping[str, Any] | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "seconds": self.seconds,
                "restore_seconds": round(self.restore_seconds, 3), "error": self.error,
                "compiled": self.verdict}


@dataclass(frozen=True, slots=True)
class CellReport:
    cell_id: str
    cell_key: str
    entry_key: str
    status: str  # skipped | published | exists | failed | refused | cancelled
    seconds: float | None = None  # the warm-up's first call (compile + run)
    wall_seconds: float | None = None
    files: int | None = None
    total_bytes: int | None = None
    bytes_uploaded: int | None = None
    exit_status: int | None = None
    error: str | None = None
    log_tail: str | None = None
    verify: VerifyReport | None = None

    def to_json(self) -> dict[str, Any]:  # its fields, the wall seconds rounded
        wall = self.wall_seconds
        return dict(fields_of(self), wall_seconds=None if wall is None else round(wall, 3))


@dataclass(frozen=True, slots=True)
class StopSummary(Document):
    """How a stopped run ended: ``running`` cells whose worker or publish was stopped,
    ``cancelled`` cells reported so, ``released`` leases given back as cancelled."""

    running: int
    cancelled: int
    released: int


@dataclass(frozen=True, slots=True)
class PrecompileReport:
    matrix: str
    backend: str
    fingerprint_key: str
    store_url: str
    run_id: str | None
    cells: tuple[CellReport, ...]
    seconds: float
    workdir: str | None = None
    stopped: StopSummary | None = None  # set when the run's stop event ended it

    @property
    def failed(self) -> tuple[CellReport, ...]:
        return tuple(c for c in self.cells if c.status == FAILED)

    @property
    def not_verified(self) -> tuple[CellReport, ...]:
        return tuple(c for c in self.cells if c.verify and c.verify.status != HIT)

    def count(self, status: str) -> int:
        return sum(1 for c in self.cells if c.status == status)

    def to_json(self) -> dict[str, Any]:
        return {"matrix": self.matrix, "backend": self.backend,
                "fingerprint_key": self.fingerprint_key, "store": self.store_url,
                "run_id": self.run_id, "seconds": round(self.seconds, 3),
                "workdir": self.workdir,
                "counts": {s: self.count(s) for s in (PUBLISHED, EXISTS, SKIPPED, FAILED,
                                                      REFUSED)},
                "stopped": self.stopped.to_json() if self.stopped else None,
                "cells": [c.to_json() for c in self.cells]}


def plan_precompile(cells: Sequence[Cell], fingerprint: Fingerprint,
                    ready_entry_keys: Collection[str], *, force: bool = False,
                    compile_only: bool = False) -> tuple[CellPlan, ...]:
    """Warm every cell without an entry for this fingerprint (every cell with ``force``),
    refusing what cannot be pre-compiled here."""
    plans = []
    for cell in cells:
        key = entry_key(cell, fingerprint)
        ready = key in ready_entry_keys
        reason = refusal_reason(cell, compile_only) if not ready or force else None
        action = REFUSE if reason is not None else WARM if force or not ready else SKIP
        plans.append(CellPlan(cell, key, ready, action, reason))
    return tuple(plans)


def refusal_reason(cell: Cell, compile_only: bool) -> str | None:
    """Why ``cell`` cannot be pre-compiled here (None: it can). Pure."""
    reason = compile_only_refusal(cell.mode) if compile_only else None
    return f"compile-only: {reason}" if reason else None


def resolve_model(model: str, matrix_source: str) -> str:
    """A ``./dir`` or ``../dir`` model is relative to the matrix file; an existing directory
    becomes absolute; anything else is a hub id."""
    if model.startswith(("./", "../")):
        return str((Path(matrix_source).parent / model).resolve())
    path = Path(model).expanduser()
    return str(path.resolve()) if path.is_dir() else model


def find_ready(store: Store, cells: Sequence[Cell], fingerprint: Fingerprint,
               workers: int = 16) -> set[str]:
    """Entry keys of these cells that the store already holds."""
    keys = [entry_key(c, fingerprint) for c in cells]
    present = map_in_threads(lambda k: store.has(manifest_key(k)), keys, workers)
    return {k for k, p in zip(keys, present, strict=True) if p}


def read_entry(store: Store, key: str, backend: Backend) -> Manifest | None:
    """The manifest of the entry ``key`` (None when the store lacks it)."""
    try:
        data = store.read(manifest_key(key))
    except NotFoundError:
        return None
    return decode_manifest(data, allowed_roots=backend.root_names, source=manifest_key(key))


def read_entries(store: Store, keys: Sequence[str], backend: Backend,
                 workers: int = 16) -> dict[str, Manifest]:
    """Entry key -> manifest, for the keys whose entry the store holds."""
    found = map_in_threads(lambda key: read_entry(store, key, backend), keys, workers)
    return {k: m for k, m in zip(keys, found, strict=True) if m is not None}


def stored_compile_seconds(store: Store, key: str, backend: Backend) -> float | None:
    """The cold first-call seconds recorded in an entry's manifest (None if unknown)."""
    manifest = read_entry(store, key, backend)
    return None if manifest is None else manifest.compile_seconds
