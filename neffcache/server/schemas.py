"""Response models of the HTTP API: they document the JSON (served as /openapi.json) and check
every response against it. Field names follow the index values' ``to_json`` (the contract)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Status = Literal["ready", "in_progress", "failed", "missing"]
Outcome = Literal["hit", "partial", "miss", "error"]


class ErrorDoc(BaseModel):
    error: str = Field(description="One-line message naming what failed.")
    type: str = Field(description="The neffcache error class, e.g. NotFoundError.")
    hint: str | None = Field(None, description="A command that may fix it.")


class Health(BaseModel):
    status: Literal["ok"]
    index: str = Field(description="Index URL, password redacted.")
    schema_revision: str | None
    schema_head: str


class MatrixDoc(BaseModel):
    name: str
    version: int = Field(description="1 for the first content registered under this name.")
    sha256: str = Field(description="sha256 of the canonical JSON of the parsed TOML.")
    backend: str
    cells: int
    registered_at: str | None
    current: bool
    changed: bool
    toml: str | None = None


class MatrixDetail(BaseModel):
    current: MatrixDoc
    versions: list[MatrixDoc] = Field(description="Every version, oldest first.")


class FingerprintCountsDoc(BaseModel):
    key: str
    backend: str
    sdk_version: str
    ready: int
    failed: int
    missing: int
    ratio: float = Field(description="ready / cells.")


class GridRowDoc(BaseModel):
    cell_id: str
    cell_key: str
    statuses: list[Status] = Field(description="One per fingerprint, in column order.")


class CoverageGridDoc(BaseModel):
    matrix: str
    version: int
    sha256: str
    cells_pattern: str | None
    total_cells: int = Field(description="Cells matching the pattern (all pages).")
    offset: int
    limit: int
    fingerprints: list[FingerprintCountsDoc] = Field(
        description="Columns: every fingerprint with an entry or a failure for a cell of the "
                    "matrix; counts over the matching cells.")
    rows: list[GridRowDoc]


class MatrixCoverageDoc(BaseModel):
    matrix: str
    version: int
    cells: int
    fingerprints: list[FingerprintCountsDoc]


class EntryDoc(BaseModel):
    entry_key: str
    cell_id: str
    cell_key: str
    fingerprint_key: str
    backend: str
    store_url: str
    total_bytes: int
    file_count: int
    compile_seconds: float | None
    created_at: str | None
    verified_status: str | None
    verified_at: str | None
    last_used_at: str | None = None  # newest ingested restore report that found the entry
    restore_count: int = 0  # ingested ok/partial restore reports that found the entry


class FingerprintDoc(BaseModel):
    key: str
    backend: str
    sdk_version: str
    fields: dict[str, str]
    first_seen_at: str | None
    entries: int
    total_bytes: int


class SdkBytesDoc(BaseModel):
    backend: str
    sdk_version: str
    fingerprints: int
    entries: int
    total_bytes: int


class RunDoc(BaseModel):
    id: str
    started_at: str | None
    finished_at: str | None
    host: str
    fingerprint_key: str
    matrix: str
    cells_ok: int | None
    cells_failed: int | None
    failures_recorded: int


class FailureDoc(BaseModel):
    cell_id: str
    cell_key: str
    fingerprint_key: str
    run_id: str | None
    exit_status: int | None
    seconds: float
    log_tail: str = Field(description="The last 16,000 characters of the warm-up's log.")
    failed_at: str | None


class InProgressDoc(BaseModel):
    cell_id: str
    cell_key: str
    fingerprint_key: str
    host: str = Field(description="Who holds the lease: host name and process id.")
    since: str | None = Field(description="When the cell was claimed (UTC).")
    heartbeat_at: str | None
    expires_at: str | None = Field(description="The lease expires then unless renewed.")
    attempts: int = Field(description="Claims of this cell so far, across all workers.")


class RunDetail(BaseModel):
    run: RunDoc
    failures: list[FailureDoc]


class RestoreDoc(BaseModel):
    id: int
    created_at: str | None
    host: str
    fingerprint_key: str
    matrix: str
    outcome: Outcome = Field(description="hit: every cell restored; partial: some; miss: "
                                         "none (no entries); error: any other failure.")
    cells_restored: int
    cells_missing: int
    missing: list[str]
    files_fetched: int
    files_skipped: int
    bytes_fetched: int
    seconds: float
    exit_code: int


class BucketDoc(BaseModel):
    le: float
    count: int


class RestoreOutcomeDoc(BaseModel):
    outcome: Outcome
    count: int
    no_entry: int = Field(description="Of count: restores (exit 3) missing cells that have "
                                      "no entry for their fingerprint.")
    other_fingerprint: int = Field(description="Of count: restores (exit 5) whose cells were "
                                               "built only for other fingerprints.")
    seconds_sum: float
    bytes_sum: int
    buckets: list[BucketDoc] = Field(description="Cumulative counts of durations <= le.")


class RestorePointDoc(BaseModel):
    start: str | None = Field(description="Start of the period (UTC).")
    hit: int
    partial: int
    miss_no_entry: int
    miss_other_fingerprint: int
    error: int


class TotalsDoc(BaseModel):
    entries: int
    total_bytes: int
    fingerprints: int
    cells: int
    matrices: int
    runs: int
    restores: int


class Summary(BaseModel):
    index: str
    totals: TotalsDoc
    coverage: list[MatrixCoverageDoc]
    sdk_versions: list[SdkBytesDoc]
    restore_outcomes: list[RestoreOutcomeDoc]
