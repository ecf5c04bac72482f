"""What index queries return: frozen dataclasses, each its document's declaration (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Annotated, Any, Final, Literal, TypedDict, TypeVar

from neffcache.documents import Doc, Document

Status = Literal["ready", "in_progress", "failed", "missing"]

READY: Final = "ready"  # an entry exists
IN_PROGRESS: Final = "in_progress"  # no entry yet, and a worker holds a live lease on it
FAILED: Final = "failed"  # no entry, no live lease, and the latest warm-up failed
MISSING: Final = "missing"  # never warmed
STATUSES: tuple[Status, ...] = (READY, IN_PROGRESS, FAILED, MISSING)


BATCH = 500  # rows per IN (...) list or multi-row insert; well under every driver's limit


def chunks(items: Sequence[Any], size: int = BATCH) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def as_utc(ts: datetime | None) -> datetime | None:
    """SQLite returns naive datetimes; everything the index stores is UTC."""
    if ts is None:
        return None
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)


def iso(ts: datetime | None) -> str | None:
    return ts.isoformat(timespec="seconds") if ts is not None else None


_C = TypeVar("_C", bound="Closing")


class Closing:
    """What ``with`` closes: ``close()`` runs when the block ends."""

    __slots__ = ()

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class EntrySummary(Document):
    """One entry as the index knows it."""

    entry_key: str
    cell_id: str
    cell_key: str
    fingerprint_key: str
    backend: str
    store_url: str
    total_bytes: int
    file_count: int
    compile_seconds: float | None
    created_at: datetime
    verified_status: str | None = None
    verified_at: datetime | None = None
    last_used_at: Annotated[datetime | None, Doc("Time of the newest ingested restore report "
                                                 "that found the entry (null: none yet).")] = None
    restore_count: Annotated[int, Doc(
        "Ingested ok/partial restore reports that found the entry.")] = 0
    signed_by: Annotated[str | None, Doc(
        "Key id (16 hex digits) that signed the entry's manifest; null: unsigned.")] = None


@dataclass(frozen=True, slots=True)
class CoverageColumn(Document):
    """A fingerprint column of coverage, counted over its cells (``rules.Tally``), with what
    its card names (SDK version, target, the versions it knows) and, in the API's grid and
    summaries, the restore reports of the matrix that named it. Its document: the card
    (/api/coverage, /api/summary); ``report_json``: ``neffcache coverage``'s column."""

    key: str
    backend: str
    sdk_version: str
    ready: int
    failed: int
    missing: int
    in_progress: Annotated[int, Doc("Cells a precompile --claim worker is warming now.")] = 0
    card_ratio: Annotated[float, Doc("ready / cells.", "ratio")] = field(init=False)
    target: Annotated[str, Doc("What its entries run on: the Neuron target (trn2, with its "
                               "LNC if set), inductor's CPU architecture, or 'unknown'.")
                      ] = "unknown"
    known: Annotated[str, Doc("When the SDK version is absent or unknown: the package "
                              "versions the fingerprint names, e.g. 'torch 2.9.0'; else ''.")
                     ] = ""
    restores: Annotated[int, Doc("Restore reports of this matrix under this fingerprint.")] = 0
    distinct: Annotated[tuple[tuple[str, str], ...], Doc(key="")] = ()  # by ``distinguish``
    distinct_fields: Annotated[dict[str, str], Doc(
        "The fields, with this fingerprint's values, in which it differs from the columns "
        "whose backend, SDK version, target and known versions read the same (e.g. "
        "cc_flags, the compiler flags); {} when none reads the same, and in /api/summary.",
        "distinct")] = field(init=False, compare=False)
    nearest: Annotated[str | None, Doc(
        "The column it differs from in the fewest fields: /api/fingerprint-diff?key=KEY"
        "&against=NEAREST explains the difference (null in /api/summary).")] = None
    fields: Annotated[tuple[tuple[str, str], ...], Doc(key="")] = ()
    # given by the caller (this host's), rather than only found in the index
    here: Annotated[bool, Doc(key="")] = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "card_ratio", round(self.ratio, 6))
        object.__setattr__(self, "distinct_fields", dict(self.distinct))

    @property
    def short(self) -> str:
        return self.key[:12]

    @property
    def ratio(self) -> float:
        total = self.ready + self.failed + self.missing + self.in_progress
        return self.ready / total if total else 0.0

    @property
    def label(self) -> tuple[str, str, str, str]:
        """What its card's title reads."""
        return (self.backend, self.sdk_version, self.target, self.known)

    def report_json(self) -> dict[str, Any]:
        return {"key": self.key, "backend": self.backend, "fields": dict(self.fields),
                "here": self.here, "ready": self.ready, "failed": self.failed,
                "missing": self.missing, "in_progress": self.in_progress}


CoverageFingerprint = CoverageColumn  # the names the column had: one value
FingerprintCounts = CoverageColumn


@dataclass(frozen=True, slots=True)
class CoverageRow(Document):
    """One cell under one fingerprint: ready (an entry exists), in_progress (no entry; a
    worker holds a live lease: ``host`` since ``since``), failed (no entry, and the latest
    attempt failed) or missing (never warmed)."""

    cell_id: str
    cell_key: str
    fingerprint_key: str
    status: Status
    entry_key: str | None = None
    total_bytes: int | None = None
    exit_status: int | None = None
    log_tail: str | None = None
    failed_at: datetime | None = None
    host: str | None = None  # in_progress: who holds the lease
    since: datetime | None = None  # in_progress: when it was claimed
    lease_expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class CoverageReport:
    """Cells x fingerprint columns: statuses per cell, counts per column and, with details,
    every cell x column as a CoverageRow, row-major."""

    cells: tuple[tuple[str, str], ...]  # (cell id, cell key) in the caller's order
    fingerprints: tuple[CoverageColumn, ...]
    rows: tuple[CoverageRow, ...]
    statuses: tuple[tuple[Status, ...], ...] = ()  # per cell, one per column

    def counts(self, fingerprint_key: str) -> dict[str, int]:
        for fp in self.fingerprints:
            if fp.key == fingerprint_key:
                return {s: getattr(fp, s) for s in ("ready", "failed", "missing", "in_progress")}
        raise KeyError(fingerprint_key)

    def row(self, cell_key: str, fingerprint_key: str) -> CoverageRow:
        for r in self.rows:
            if r.cell_key == cell_key and r.fingerprint_key == fingerprint_key:
                return r
        raise KeyError((cell_key, fingerprint_key))

    def only(self, keys: Sequence[str]) -> CoverageReport:
        """These columns only, in this order (unknown keys left out)."""
        index = {fp.key: j for j, fp in enumerate(self.fingerprints)}
        chosen = [index[k] for k in dict.fromkeys(keys) if k in index]
        n = len(self.fingerprints)
        rows = tuple(self.rows[i * n + j] for i in range(len(self.cells)) for j in chosen
                     ) if self.rows else ()
        return CoverageReport(self.cells, tuple(self.fingerprints[j] for j in chosen), rows,
                              tuple(tuple(row[j] for j in chosen) for row in self.statuses))

    def to_json(self) -> dict[str, Any]:
        return {"cells": [{"id": i, "key": k} for i, k in self.cells],
                "fingerprints": [f.report_json() for f in self.fingerprints],
                "rows": [r.to_json() for r in self.rows]}


@dataclass(frozen=True, slots=True)
class InvalidObject:
    """A store object skipped (a manifest, a restore report): its key and why."""

    key: str
    reason: str


InvalidManifest = InvalidObject  # its name in reindex's result
InvalidReport = InvalidObject  # in ingest's


@dataclass(frozen=True, slots=True)
class ReindexResult(Document):
    """What a reindex found in the store and changed in the index."""

    scanned: int
    added: int
    already_indexed: int
    removed: int
    invalid: tuple[InvalidManifest, ...] = ()


@dataclass(frozen=True, slots=True)
class SchemaState:
    """Which migration the database is at, and which this code expects."""

    url: str  # redacted
    current: str | None
    head: str

    @property
    def up_to_date(self) -> bool:
        return self.current == self.head

    def to_json(self) -> dict[str, Any]:  # up_to_date: computed
        return {"url": self.url, "current": self.current, "head": self.head,
                "up_to_date": self.up_to_date}


@dataclass(frozen=True, slots=True)
class Lease:
    """A worker's claim on one (cell, fingerprint), until ``expires_at`` unless renewed."""

    cell_key: str
    fingerprint_key: str
    holder: str
    host: str
    attempt: int  # 1 for the first claim across the fleet
    claimed_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """A lease or none, and how many cells of the matrix are warmed under live leases now."""

    lease: Lease | None
    live_elsewhere: int


class InProgressDoc(TypedDict):
    cell_id: str
    cell_key: str
    fingerprint_key: str
    host: Annotated[str, Doc("Who holds the lease: host name and process id.")]
    since: Annotated[str | None, Doc("When the cell was claimed (UTC).")]
    heartbeat_at: str | None
    expires_at: Annotated[str | None, Doc("The lease expires then unless renewed.")]
    attempts: Annotated[int, Doc("Claims of this cell so far, across all workers.")]


@dataclass(frozen=True, slots=True)
class LiveLease:
    """A cell in progress: who holds it, since when."""

    cell_key: str
    fingerprint_key: str
    host: str
    claimed_at: datetime
    heartbeat_at: datetime
    expires_at: datetime
    attempts: int
    cell_id: str = ""

    def to_json(self) -> InProgressDoc:
        return {"cell_id": self.cell_id, "cell_key": self.cell_key,
                "fingerprint_key": self.fingerprint_key, "host": self.host,
                "since": iso(self.claimed_at), "heartbeat_at": iso(self.heartbeat_at),
                "expires_at": iso(self.expires_at), "attempts": self.attempts}
