"""What the ops queries return and the rules behind them (pure: no I/O)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Annotated, Any, Final, Literal, TypedDict

from neffcache.documents import Doc, Document
from neffcache.fingerprint import FIELD_NOTES, FieldDiff, Fingerprint, diff_fingerprints
from neffcache.index.values import CoverageColumn, Status, iso
from neffcache.index.values import FingerprintCounts as FingerprintCounts  # re-exported

Outcome = Literal["hit", "partial", "miss", "error"]
RunStatus = Literal["running", "finished", "cancelled"]

HIT: Final = "hit"
PARTIAL: Final = "partial"
MISS: Final = "miss"
ERROR: Final = "error"
OUTCOMES: tuple[Outcome, ...] = (HIT, PARTIAL, MISS, ERROR)
# Upper bounds (seconds) of the restore-duration histogram; +Inf is implied.
DURATION_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
# Fingerprint field that names the SDK a backend's entries were built with.
SDK_FIELDS = {"neuron": "version.neuronx-cc", "inductor": "version.torch"}


# Why cells were not restored, from a report's exit code: no entry anywhere for this
# fingerprint (3) or entries built only for other fingerprints (5).
NO_ENTRY, OTHER_FINGERPRINT = "no_entry", "other_fingerprint"


def miss_kind(exit_code: int) -> str | None:
    return {3: NO_ENTRY, 5: OTHER_FINGERPRINT}.get(exit_code)


def restore_outcome(exit_code: int, cells_restored: int, cells_missing: int) -> Outcome:
    """miss: nothing restored because entries were missing (exit 3 or 5)."""
    if exit_code == 0:
        return HIT
    if exit_code in (3, 5):
        return PARTIAL if cells_restored > 0 else MISS
    return ERROR


def sdk_version(backend: str, fields: Mapping[str, Any]) -> str:
    """The SDK version a fingerprint stands for: neuronx-cc for neuron, torch for inductor."""
    name = SDK_FIELDS.get(backend)
    value = fields.get(name) if name else None
    return str(value) if value else "unknown"


@dataclass(frozen=True, slots=True)
class MatrixVersion(Document):
    """One registered content of a named matrix. Versions count from 1 in order of first
    registration; the current one is the one registered (or re-registered) last."""

    id: Annotated[int, Doc(key="")]
    name: str
    version: Annotated[int, Doc("1 for the first content registered under this name.")]
    digest: Annotated[str, Doc("sha256 of the canonical JSON of the parsed TOML.", "sha256")]
    backend: str
    cell_count: Annotated[int, Doc(key="cells")]
    registered_at: datetime
    current: bool
    changed: bool = False  # set by register_matrix: this registration made it current
    toml: Annotated[str | None, Doc(optional=True)] = None


@dataclass(frozen=True, slots=True)
class MatrixDetail(Document):
    """One matrix: the chosen version with its TOML, and its history (/api/matrix)."""

    current: MatrixVersion
    versions: Annotated[tuple[MatrixVersion, ...], Doc("Every version, oldest first.")]


def fingerprint_target(backend: str, fields: Mapping[str, Any]) -> str:
    if backend == "neuron":
        target = str(fields.get("target") or "unknown")
        lnc = str(fields.get("lnc") or "default")
        return target if lnc == "default" else f"{target} lnc={lnc}"
    if backend == "inductor":
        return str(fields.get("cpu.arch") or "unknown")
    return "unknown"


def known_versions(backend: str, fields: Mapping[str, Any]) -> str:
    """E.g. 'torch 2.9.0 · torch-neuronx absent' when the SDK version is absent or unknown."""
    if sdk_version(backend, fields) not in ("absent", "unknown"):
        return ""
    sdk = SDK_FIELDS.get(backend)
    return " · ".join(f"{name[len('version.'):]} {value}" for name, value in sorted(
        fields.items()) if name.startswith("version.") and name != sdk)


def distinguish(columns: Sequence[CoverageColumn],
                prints: Mapping[str, Fingerprint]) -> tuple[CoverageColumn, ...]:
    """Each column with ``distinct`` (the fields in which it differs from the columns whose
    cards read the same) and ``nearest`` (the column it differs from in the fewest fields,
    ties: column order); a column without a fingerprint in ``prints`` gets neither."""
    known = [c for c in columns if c.key in prints]

    def distinguished(c: CoverageColumn) -> CoverageColumn:
        others = [o for o in known if o.key != c.key]
        diffs = {o.key: diff_fingerprints(prints[c.key], prints[o.key]) for o in others}
        fields = dict(prints[c.key].fields)
        names = sorted({d.name for o in others if o.label == c.label for d in diffs[o.key]})
        nearest = min(diffs, key=lambda k: len(diffs[k])) if diffs else None
        return replace(c, distinct=tuple((n, fields.get(n, "absent")) for n in names),
                       nearest=nearest)

    return tuple(distinguished(c) if c.key in prints else c for c in columns)


@dataclass(frozen=True, slots=True)
class FingerprintDiff:
    """Each field in which fingerprint ``key`` differs from ``against``, with its note."""

    key: str
    against: str
    differences: tuple[FieldDiff, ...]

    def to_json(self) -> FingerprintDiffDoc:
        return {"key": self.key, "against": self.against,
                "differences": [{"field": d.name, "value": d.here, "against": d.there,
                                 "note": FIELD_NOTES.get(d.name, "")}
                                for d in self.differences]}


class FieldDiffDoc(TypedDict):
    field: str
    value: Annotated[str, Doc("This fingerprint's value ('absent': it has no such field).")]
    against: Annotated[str, Doc("The other fingerprint's value.")]
    note: Annotated[str, Doc("Why the field is part of a fingerprint ('' if no note).")]


class FingerprintDiffDoc(TypedDict):
    """What tells two fingerprints apart (/api/fingerprint-diff)."""

    key: str
    against: str
    differences: list[FieldDiffDoc]


def severity(f: CoverageColumn) -> tuple[Any, ...]:
    """Worst first: restored with nothing built, then most failed, then most missing."""
    return (not (f.restores and not f.ready), -f.failed, -f.missing, f.backend,
            f.sdk_version, f.target, f.key)


@dataclass(frozen=True, slots=True)
class GridRow(Document):
    cell_id: str
    cell_key: str
    statuses: Annotated[tuple[Status, ...], Doc("One per fingerprint, in column order.")]
    # (column, how a first call after restore went: hit = warm, compiled, verify-failed)
    verified: Annotated[tuple[tuple[int, str], ...], Doc(key="")] = ()
    by_column: Annotated[dict[str, str], Doc(
        "Column number -> how the entry's first call after a restore went, where known "
        "(neffcache warm, precompile --verify): 'hit' (warm: nothing compiled), 'compiled', "
        "'verify-failed'.", "verified")] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_column", {str(j): s for j, s in self.verified})


@dataclass(frozen=True, slots=True)
class CoverageGrid(Document):
    """A page of a matrix's coverage: cells (matching ``pattern``) x fingerprint columns.
    Counts cover every matching cell, not only the page."""

    matrix: Annotated[MatrixVersion, Doc(key="")]
    name: Annotated[str, Doc(key="matrix")] = field(init=False)
    version: int = field(init=False)
    sha256: str = field(init=False)
    pattern: Annotated[str | None, Doc(key="cells_pattern")]
    total_cells: Annotated[int, Doc("Cells matching the pattern (all pages).")]
    offset: int
    limit: int
    fingerprints: Annotated[tuple[CoverageColumn, ...], Doc(
        "Columns: every fingerprint with an entry, a failure or a live lease for a cell of "
        "the matrix, or that a restore report of the matrix named; counts over the matching "
        "cells.")]
    rows: tuple[GridRow, ...]

    def __post_init__(self) -> None:
        for name, value in (("name", self.matrix.name), ("version", self.matrix.version),
                            ("sha256", self.matrix.digest)):
            object.__setattr__(self, name, value)

    def counts_json(self) -> dict[str, Any]:  # MatrixCoverageDoc
        return {"matrix": self.name, "version": self.version, "cells": self.total_cells,
                "fingerprints": [f.to_json() for f in self.fingerprints]}


class MatrixCoverageDoc(TypedDict):
    matrix: str
    version: int
    cells: int
    fingerprints: list[CoverageColumn]


@dataclass(frozen=True, slots=True)
class FingerprintInfo:
    key: str
    backend: str
    sdk_version: str
    fields: tuple[tuple[str, str], ...]
    first_seen_at: datetime | None


@dataclass(frozen=True, slots=True)
class FingerprintStats:
    """A fingerprint with what the index holds for it."""

    info: FingerprintInfo
    entries: int
    total_bytes: int

    def to_json(self) -> FingerprintDoc:
        i = self.info
        return {"key": i.key, "backend": i.backend, "sdk_version": i.sdk_version,
                "fields": dict(i.fields), "first_seen_at": iso(i.first_seen_at),
                "entries": self.entries, "total_bytes": self.total_bytes}


class FingerprintDoc(TypedDict):
    key: str
    backend: str
    sdk_version: str
    fields: dict[str, str]
    first_seen_at: str | None
    entries: int
    total_bytes: int


@dataclass(frozen=True, slots=True)
class SdkBytes(Document):
    """Entries and bytes per backend and SDK version (over every fingerprint with that SDK)."""

    backend: str
    sdk_version: str
    fingerprints: int
    entries: int
    total_bytes: int


def group_by_sdk(stats: Iterable[FingerprintStats]) -> tuple[SdkBytes, ...]:
    """Fingerprint totals summed per (backend, SDK version), largest first."""
    groups: dict[tuple[str, str], list[FingerprintStats]] = {}
    for s in stats:
        groups.setdefault((s.info.backend, s.info.sdk_version), []).append(s)
    rows = [SdkBytes(b, v, len(g), sum(s.entries for s in g), sum(s.total_bytes for s in g))
            for (b, v), g in groups.items()]
    return tuple(sorted(rows, key=lambda r: (-r.total_bytes, r.backend, r.sdk_version)))


@dataclass(frozen=True, slots=True)
class RunSummary(Document):
    id: str
    started_at: datetime
    finished_at: datetime | None
    host: str
    fingerprint_key: str
    matrix: str
    cells_ok: int | None
    cells_failed: int | None
    failures_recorded: int
    status: Annotated[RunStatus, Doc("running: no end recorded (or its runner died); "
                                     "cancelled: stopped by SIGTERM/SIGINT; finished.")] = field(
        init=False)
    cells_cancelled: Annotated[int | None, Doc(
        "Cells whose workers the stop ended (null: the run was not stopped).")] = None

    def __post_init__(self) -> None:
        ended = "running" if self.finished_at is None else "finished"
        object.__setattr__(self, "status", ended if self.cells_cancelled is None
                           else "cancelled")


@dataclass(frozen=True, slots=True)
class FailureRecord(Document):
    """A failed warm-up of a cell under a fingerprint, with the tail of its log."""

    cell_id: str
    cell_key: str
    fingerprint_key: str
    run_id: str | None
    exit_status: int | None
    seconds: float
    log_tail: Annotated[str, Doc("The last 16,000 characters of the warm-up's log.")]
    failed_at: datetime
    id: Annotated[int | None, Doc(key="")] = None  # its row's id (the paging cursor's tie-break)


@dataclass(frozen=True, slots=True)
class RunDetail(Document):
    """One precompile run and every failure it recorded (/api/run)."""

    run: RunSummary
    failures: tuple[FailureRecord, ...]


@dataclass(frozen=True, slots=True)
class RestoreRecord(Document):
    """One restore run as reported by ``neffcache restore``."""

    id: int
    created_at: datetime
    host: str
    fingerprint_key: str
    matrix: str
    outcome: Annotated[Outcome, Doc(
        "hit: every cell restored; partial: some; miss: none (no entries); error: any other "
        "failure.")] = field(init=False)
    cells_restored: int
    cells_missing: int
    missing: tuple[str, ...]
    files_fetched: int
    files_skipped: int
    bytes_fetched: int
    seconds: float
    exit_code: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "outcome", restore_outcome(
            self.exit_code, self.cells_restored, self.cells_missing))


@dataclass(frozen=True, slots=True)
class RestoreOutcomeStats:
    """Restores with one outcome: how many, seconds, bytes and cumulative buckets."""

    outcome: Outcome
    count: int
    seconds_sum: float
    bytes_sum: int
    buckets: tuple[int, ...]  # cumulative counts per DURATION_BUCKETS bound
    no_entry: int = 0  # of ``count``: restores that missed cells nothing was built for
    other_fingerprint: int = 0  # ... whose cells were built only for other fingerprints

    def to_json(self) -> RestoreOutcomeDoc:
        return {"outcome": self.outcome, "count": self.count,
                "no_entry": self.no_entry, "other_fingerprint": self.other_fingerprint,
                "seconds_sum": round(self.seconds_sum, 6), "bytes_sum": self.bytes_sum,
                "buckets": [{"le": b, "count": n} for b, n in zip(
                      DURATION_BUCKETS, self.buckets, strict=True)]}


class BucketDoc(TypedDict):
    le: float
    count: int


class RestoreOutcomeDoc(TypedDict):
    outcome: Outcome
    count: int
    no_entry: Annotated[int, Doc("Of count: restores (exit 3) missing cells that have no "
                                 "entry for their fingerprint.")]
    other_fingerprint: Annotated[int, Doc("Of count: restores (exit 5) whose cells were "
                                          "built only for other fingerprints.")]
    seconds_sum: float
    bytes_sum: int
    buckets: Annotated[list[BucketDoc], Doc("Cumulative counts of durations <= le.")]


@dataclass(frozen=True, slots=True)
class LeaseStats:
    """Leases of one (matrix, fingerprint): live, and held past their expiry (a dead worker)."""

    matrix: str
    fingerprint_key: str
    active: int
    expired: int


@dataclass(frozen=True, slots=True)
class MatrixRunTime:
    """When a precompile run for a matrix last started (None: none in the window)."""

    matrix: str
    started_at: datetime | None


@dataclass(frozen=True, slots=True)
class FingerprintRunTime:
    """When a precompile run of a matrix under a fingerprint last started."""

    matrix: str
    fingerprint_key: str
    started_at: datetime


@dataclass(frozen=True, slots=True)
class ReportedFingerprint:
    """A fingerprint restore reports of a registered matrix named: how many, the last when."""

    matrix: str
    fingerprint_key: str
    reports: int
    last_seen_at: datetime | None


@dataclass(frozen=True, slots=True)
class IndexTotals(Document):
    entries: int
    total_bytes: int
    fingerprints: int
    cells: int
    matrices: int
    runs: int
    restores: int


@dataclass(frozen=True, slots=True)
class RestorePoint(Document):
    """Restores reported in one period (UTC), by outcome; misses split by why."""

    start: Annotated[datetime, Doc("Start of the period (UTC).")]
    hit: int
    partial: int
    miss_no_entry: int
    miss_other_fingerprint: int
    error: int


def build_timeline(rows: Iterable[tuple[datetime, int, int, int]],
                   starts: Sequence[datetime], step_of: Any) -> tuple[RestorePoint, ...]:
    """Rows (hour, exit code, restored any, n) summed per period; empty periods included."""
    columns = ("hit", "partial", "miss_no_entry", "miss_other_fingerprint", "error")
    acc = {s: dict.fromkeys(columns, 0) for s in starts}
    for hour, code, restored_any, n in rows:
        slot = acc.get(step_of(hour))
        if slot is not None:
            outcome = restore_outcome(int(code), int(restored_any), 0)
            slot[f"miss_{miss_kind(int(code))}" if outcome == MISS else outcome] += int(n)
    return tuple(RestorePoint(s, **acc[s]) for s in starts)
