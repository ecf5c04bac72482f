"""The JSON documents of the index's values that differ from their value's fields (a renamed,
computed or omitted key), each declared once as a TypedDict (pure typing): the values'
``to_json`` build them, the CLI's ``--json`` prints them, and the HTTP API's response models
are generated from them (``neffcache.server.schemas``). A value whose document is its fields
(``EntrySummary``, ``SdkBytes``, ``IndexTotals``, ``RestorePoint``, ``ReindexResult``) is its
own declaration (``neffcache.documents``).
Fields are a contract: add, never rename or drop.

A field's description for the OpenAPI document rides along as ``Annotated[T, Doc("...")]``;
a key that may be absent is declared in a ``total=False`` class (the API shows it as null).
"""

from __future__ import annotations

from typing import Annotated, Literal, TypedDict

from neffcache.documents import Doc

Status = Literal["ready", "in_progress", "failed", "missing"]
Outcome = Literal["hit", "partial", "miss", "error"]
RunStatus = Literal["running", "finished", "cancelled"]


# --- registered matrices --------------------------------------------------------------------

class _MatrixFields(TypedDict):
    name: str
    version: Annotated[int, Doc("1 for the first content registered under this name.")]
    sha256: Annotated[str, Doc("sha256 of the canonical JSON of the parsed TOML.")]
    backend: str
    cells: int
    registered_at: str | None
    current: bool
    changed: bool


class MatrixDoc(_MatrixFields, total=False):
    """A registered matrix version (``matrix ls/show --json``, /api/matrices)."""

    toml: str | None


class MatrixDetail(TypedDict):
    """One matrix: the chosen version with its TOML, and its history (/api/matrix)."""

    current: MatrixDoc
    versions: Annotated[list[MatrixDoc], Doc("Every version, oldest first.")]


# --- coverage -------------------------------------------------------------------------------

class CoverageCellDoc(TypedDict):
    id: str
    key: str


class CoverageFingerprintDoc(TypedDict):
    """A fingerprint column of ``coverage --json`` with its counts over the cells."""

    key: str
    backend: str
    fields: dict[str, str]
    here: Annotated[bool, Doc("This host's fingerprint (given), not only found in the index.")]
    ready: int
    failed: int
    missing: int
    in_progress: int


class CoverageRowDoc(TypedDict):
    """One cell under one fingerprint, with what explains its status."""

    cell_id: str
    cell_key: str
    fingerprint_key: str
    status: Status
    entry_key: str | None
    total_bytes: int | None
    exit_status: int | None
    log_tail: str | None
    failed_at: str | None
    host: str | None
    since: str | None
    lease_expires_at: str | None


class CoverageReportDoc(TypedDict):
    cells: list[CoverageCellDoc]
    fingerprints: list[CoverageFingerprintDoc]
    rows: list[CoverageRowDoc]


class NotReadyDoc(TypedDict):
    cell_id: str
    fingerprint_key: str
    status: Status


class CoverageCheckDoc(TypedDict):
    ok: bool
    not_ready: list[NotReadyDoc]


class _CoverageFields(CoverageReportDoc):
    matrix: str
    backend: str
    here: str | None


class CoverageDoc(_CoverageFields, total=False):
    """``neffcache coverage --json``: the report, the matrix it is of, and the check."""

    check: CoverageCheckDoc


class FingerprintCountsDoc(TypedDict):
    """A fingerprint's column of a coverage grid, counted over the grid's cells."""

    key: str
    backend: str
    sdk_version: str
    ready: int
    failed: int
    missing: int
    in_progress: Annotated[int, Doc("Cells a precompile --claim worker is warming now.")]
    ratio: Annotated[float, Doc("ready / cells.")]
    target: Annotated[str, Doc("What its entries run on: the Neuron target (trn2, with its "
                               "LNC if set), inductor's CPU architecture, or 'unknown'.")]
    known: Annotated[str, Doc("When the SDK version is absent or unknown: the package "
                              "versions the fingerprint names, e.g. 'torch 2.9.0'; else ''.")]
    restores: Annotated[int, Doc("Restore reports of this matrix under this fingerprint.")]
    distinct: Annotated[dict[str, str], Doc(
        "The fields, with this fingerprint's values, in which it differs from the columns "
        "whose backend, SDK version, target and known versions read the same (e.g. "
        "cc_flags, the compiler flags); {} when none reads the same, and in /api/summary.")]
    nearest: Annotated[str | None, Doc(
        "The column it differs from in the fewest fields: /api/fingerprint-diff?key=KEY"
        "&against=NEAREST explains the difference (null in /api/summary).")]


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


class GridRowDoc(TypedDict):
    cell_id: str
    cell_key: str
    statuses: Annotated[list[Status], Doc("One per fingerprint, in column order.")]
    verified: Annotated[dict[str, str], Doc(
        "Column number -> how the entry's first call after a restore went, where known "
        "(neffcache warm, precompile --verify): 'hit' (warm: nothing compiled), 'compiled', "
        "'verify-failed'.")]


class CoverageGridDoc(TypedDict):
    """A page of a registered matrix's cells x fingerprints (/api/coverage)."""

    matrix: str
    version: int
    sha256: str
    cells_pattern: str | None
    total_cells: Annotated[int, Doc("Cells matching the pattern (all pages).")]
    offset: int
    limit: int
    fingerprints: Annotated[list[FingerprintCountsDoc], Doc(
        "Columns: every fingerprint with an entry, a failure or a live lease for a cell of "
        "the matrix, or that a restore report of the matrix named; counts over the matching "
        "cells.")]
    rows: list[GridRowDoc]


class MatrixCoverageDoc(TypedDict):
    matrix: str
    version: int
    cells: int
    fingerprints: list[FingerprintCountsDoc]


# --- entries, fingerprints, runs, failures --------------------------------------------------


class FingerprintDoc(TypedDict):
    key: str
    backend: str
    sdk_version: str
    fields: dict[str, str]
    first_seen_at: str | None
    entries: int
    total_bytes: int


class RunDoc(TypedDict):
    id: str
    started_at: str | None
    finished_at: str | None
    host: str
    fingerprint_key: str
    matrix: str
    cells_ok: int | None
    cells_failed: int | None
    failures_recorded: int
    status: Annotated[RunStatus, Doc("running: no end recorded (or its runner died); "
                                     "cancelled: stopped by SIGTERM/SIGINT; finished.")]
    cells_cancelled: Annotated[int | None, Doc(
        "Cells whose workers the stop ended (null: the run was not stopped).")]


class FailureDoc(TypedDict):
    cell_id: str
    cell_key: str
    fingerprint_key: str
    run_id: str | None
    exit_status: int | None
    seconds: float
    log_tail: Annotated[str, Doc("The last 16,000 characters of the warm-up's log.")]
    failed_at: str | None


class RunDetail(TypedDict):
    run: RunDoc
    failures: list[FailureDoc]


class InProgressDoc(TypedDict):
    cell_id: str
    cell_key: str
    fingerprint_key: str
    host: Annotated[str, Doc("Who holds the lease: host name and process id.")]
    since: Annotated[str | None, Doc("When the cell was claimed (UTC).")]
    heartbeat_at: str | None
    expires_at: Annotated[str | None, Doc("The lease expires then unless renewed.")]
    attempts: Annotated[int, Doc("Claims of this cell so far, across all workers.")]


class StaleCellDoc(InProgressDoc):
    """A cell whose lease is held past its expiry: its worker stopped renewing (died?)."""

    matrix: str


class AttentionFailureDoc(TypedDict):
    matrix: Annotated[str, Doc("A registered matrix whose current version has the cell.")]
    cell_id: str
    cell_key: str
    fingerprint_key: str
    run_id: str | None
    exit_status: int | None
    failed_at: str | None


class UnbuiltDoc(TypedDict):
    matrix: str
    fingerprint: FingerprintCountsDoc
    last_restore_at: Annotated[str | None, Doc("The newest restore report naming it.")]


class AttentionDoc(TypedDict):
    """What is wrong across every registered matrix (/api/attention): the dashboard's first
    screen."""

    ok: Annotated[bool, Doc("Nothing below: no failed or stale cell, no unbuilt fingerprint.")]
    fleet_window_days: Annotated[int, Doc("How recent a restore report makes a fingerprint "
                                          "the fleet's.")]
    failed_cells: Annotated[int, Doc("Failed cells over the current versions of every "
                                     "registered matrix (a cell in two matrices counts twice).")]
    failed: Annotated[list[AttentionFailureDoc], Doc("The latest of them, newest first (the "
                                                     "log tails: /api/failures).")]
    stale_cells: Annotated[int, Doc("Leases held past their expiry, every matrix.")]
    stale: Annotated[list[StaleCellDoc], Doc("The oldest expiries first.")]
    unbuilt: Annotated[list[UnbuiltDoc], Doc(
        "Fingerprints restore reports of a matrix named within fleet_window_days that have no "
        "entry for any of its cells, most restored first.")]


# --- restores -------------------------------------------------------------------------------

class RestoreDoc(TypedDict):
    id: int
    created_at: str | None
    host: str
    fingerprint_key: str
    matrix: str
    outcome: Annotated[Outcome, Doc("hit: every cell restored; partial: some; miss: none "
                                    "(no entries); error: any other failure.")]
    cells_restored: int
    cells_missing: int
    missing: list[str]
    files_fetched: int
    files_skipped: int
    bytes_fetched: int
    seconds: float
    exit_code: int


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
