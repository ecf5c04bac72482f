"""The index's schema, declared once as SQLAlchemy Core tables."""

from __future__ import annotations

import functools

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

KEY = 64  # sha256 hex: cell keys, fingerprint keys, entry keys, blob digests
UTC_TS = DateTime(timezone=True)

# every constraint and index named, so migrations stay portable; timestamps are UTC
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
metadata = MetaData(naming_convention=NAMING_CONVENTION)
col = functools.partial(Column, nullable=False)

fingerprints = Table(
    "fingerprints", metadata,
    col("key", String(KEY), primary_key=True), col("backend", String(32)), col("fields", JSON),
    col("first_seen_at", UTC_TS),
)

cells = Table(
    "cells", metadata,
    col("key", String(KEY), primary_key=True), col("id", String(255)),
    col("pipeline", String(64)), col("mode", String(16)), col("height", Integer),
    col("width", Integer), col("batch", Integer), col("tp", Integer), col("json", JSON),
    Index(None, "id"), Index(None, "pipeline", "mode"),
)

entries = Table(
    "entries", metadata,
    col("entry_key", String(KEY), primary_key=True),
    col("cell_key", String(KEY), ForeignKey("cells.key")),
    col("fingerprint_key", String(KEY), ForeignKey("fingerprints.key")),
    col("store_url", String(1024)), col("total_bytes", BigInteger), col("file_count", Integer),
    col("compile_seconds", Double, nullable=True), col("producer", JSON),
    col("created_at", UTC_TS), col("recorded_at", UTC_TS),
    col("verified_status", String(16), nullable=True),
    col("verified_at", UTC_TS, nullable=True),
    # The newest restore report (ingested from the store) that found this entry.
    col("last_used_at", UTC_TS, nullable=True),
    # How many ingested ok/partial restore reports found this entry.
    col("restore_count", Integer, default=0, server_default=text("0")),
    # The key id that signed the entry's manifest (null: unsigned; migration 0009).
    col("signed_by", String(16), nullable=True),
    UniqueConstraint("cell_key", "fingerprint_key"),
    # Covering: coverage reads a matrix's entries from this index alone (migration 0006).
    Index(None, "cell_key", "fingerprint_key", "entry_key", "total_bytes"),
    Index(None, "fingerprint_key"),
    Index(None, "created_at"),
    # A cell's entries newest first: ``ls --cell GLOB`` reads each matching cell's newest
    # through it, whatever the rows' age (migration 0008).
    Index(None, "cell_key", "created_at", "entry_key"),
    Index(None, "last_used_at"),
)

blobs = Table(
    "blobs", metadata,
    col("sha256", String(KEY), primary_key=True), col("size", BigInteger),
)

entry_files = Table(
    "entry_files", metadata,
    col("entry_key", String(KEY), ForeignKey("entries.entry_key", ondelete="CASCADE"),
        primary_key=True),
    # Place in the manifest's (root, path)-sorted file list; paths may be too long for a key.
    col("position", Integer, primary_key=True, autoincrement=False),
    col("root", String(32)), col("path", Text),
    col("sha256", String(KEY), ForeignKey("blobs.sha256")), col("size", BigInteger),
    col("mode", Integer),
    Index(None, "sha256"),
)

precompile_runs = Table(
    "precompile_runs", metadata,
    col("id", String(32), primary_key=True), col("started_at", UTC_TS),
    col("finished_at", UTC_TS, nullable=True), col("host", String(255)),
    col("fingerprint_key", String(KEY), ForeignKey("fingerprints.key")),
    col("matrix_name", String(255)), col("cells_ok", Integer, nullable=True),
    col("cells_failed", Integer, nullable=True),
    col("cells_cancelled", Integer, nullable=True),  # set when the run was stopped (0009)
    Index(None, "started_at"),
)

cell_failures = Table(
    "cell_failures", metadata,
    col("id", Integer, primary_key=True, autoincrement=True),
    col("run_id", String(32), ForeignKey("precompile_runs.id", ondelete="SET NULL"),
        nullable=True),
    col("cell_key", String(KEY), ForeignKey("cells.key")),
    col("fingerprint_key", String(KEY), ForeignKey("fingerprints.key")),
    col("exit_status", Integer, nullable=True), col("seconds", Double), col("log_tail", Text),
    col("created_at", UTC_TS),
    Index(None, "cell_key", "fingerprint_key"), Index(None, "run_id"),
)

restore_reports = Table(
    "restore_reports", metadata,
    col("id", Integer, primary_key=True, autoincrement=True),
    # The report object's id (reports/<date>/<report-id>.json); ingesting it twice adds nothing.
    # NULL for reports recorded before reports went through the store.
    col("report_id", String(128), nullable=True), col("host", String(255)),
    col("fingerprint_key", String(KEY)),  # this host's; may have no entry
    col("matrix", String(255)), col("cells_restored", Integer),
    col("cells_missing", Integer), col("restored", JSON), col("missing", JSON),
    col("files_fetched", Integer), col("files_skipped", Integer),
    col("bytes_fetched", BigInteger), col("seconds", Double), col("exit_code", Integer),
    col("report", JSON), col("created_at", UTC_TS),
    Index(None, "created_at"), Index(None, "fingerprint_key"),
    Index(None, "report_id", unique=True),
)

matrices = Table(
    "matrices", metadata,
    col("id", Integer, primary_key=True, autoincrement=True), col("name", String(255)),
    col("digest", String(KEY)), col("backend", String(32)), col("toml", Text),
    col("registered_at", UTC_TS),
    UniqueConstraint("name", "digest"),
)

matrix_cells = Table(
    "matrix_cells", metadata,
    col("matrix_id", Integer, ForeignKey("matrices.id", ondelete="CASCADE"), primary_key=True),
    col("cell_key", String(KEY), ForeignKey("cells.key"), primary_key=True),
    col("position", Integer),
    Index(None, "cell_key"),
)

# A (cell, fingerprint) queued for ``precompile --claim``: leased while ``holder`` is set and
# ``expires_at`` is ahead (database clock); deleted once the entry is published.
cell_claims = Table(
    "cell_claims", metadata,
    col("cell_key", String(KEY), ForeignKey("cells.key"), primary_key=True),
    col("fingerprint_key", String(KEY), ForeignKey("fingerprints.key"), primary_key=True),
    col("matrix_name", String(255)),
    col("position", Integer),  # the cell's place in its matrix: claims go in matrix order
    col("attempts", Integer), col("queued_at", UTC_TS),
    col("holder", String(32), nullable=True),  # the lease's random token
    col("host", String(255), nullable=True),  # "hostname pid N", for people
    col("claimed_at", UTC_TS, nullable=True), col("heartbeat_at", UTC_TS, nullable=True),
    col("expires_at", UTC_TS, nullable=True),
    Index(None, "fingerprint_key", "expires_at"), Index(None, "matrix_name"),
    Index(None, "expires_at"),
)

# Per registered matrix version x fingerprint: cells with an entry (``ready``) and cells
# whose warm-up failed with no entry (``failed``). Missing = the version's cells - both.
coverage_counts = Table(
    "coverage_counts", metadata,
    col("matrix_id", Integer, ForeignKey("matrices.id", ondelete="CASCADE"), primary_key=True),
    col("fingerprint_key", String(KEY), primary_key=True),
    col("ready", BigInteger), col("failed", BigInteger),
    Index(None, "fingerprint_key"),
)

fingerprint_counts = Table(  # entries and their bytes per fingerprint
    "fingerprint_counts", metadata,
    col("fingerprint_key", String(KEY), primary_key=True), col("entries", BigInteger),
    col("total_bytes", BigInteger),
)

# Restore reports per hour (UTC, by report time), exit code, whether any cell was restored,
# and duration bucket (index into DURATION_BUCKETS; len = over the last bound).
restore_counts = Table(
    "restore_counts", metadata,
    col("period_start", UTC_TS, primary_key=True),
    col("exit_code", Integer, primary_key=True, autoincrement=False),
    col("restored_any", Integer, primary_key=True, autoincrement=False),
    col("bucket", Integer, primary_key=True, autoincrement=False),
    col("restores", BigInteger), col("seconds_sum", Double), col("bytes_sum", BigInteger),
)

# A fingerprint some host restored a matrix with (from restore reports), built for or not:
# the dashboard shows it as a column even at 0 % coverage.
report_fingerprints = Table(
    "report_fingerprints", metadata,
    col("matrix", String(255), primary_key=True),
    col("fingerprint_key", String(KEY), primary_key=True), col("reports", BigInteger),
    col("last_seen_at", UTC_TS),
)

# One row (id 1): raised once per write transaction by triggers on every other table (0009).
index_changes = Table(
    "index_changes", metadata,
    col("id", Integer, primary_key=True, autoincrement=False), col("version", BigInteger),
)
