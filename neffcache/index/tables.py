"""The columns the read paths and the entry writes use, as SQLAlchemy Core table clauses: reads
such as ``ls`` and ``coverage``, and recording an entry (``push``, ``capture``), then import no
ORM (``sqlalchemy.orm`` and the mapped models cost a CLI command ~0.15 s of start-up).
``models`` stays the one schema definition (DDL, migrations, the ORM's writes);
``tests/unit/test_index_queries.py`` keeps these columns and types in step with it.
"""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, DateTime, Float, Integer, String, Text, column, table

KEY = 64  # sha256 hex: cell keys, fingerprint keys, entry keys, blob digests
UTC_TS = DateTime(timezone=True)

fingerprints = table(
    "fingerprints",
    column("key", String(KEY)), column("backend", String(32)), column("fields", JSON),
    column("first_seen_at", UTC_TS),
)

cells = table(
    "cells",
    column("key", String(KEY)), column("id", String(255)), column("pipeline", String(64)),
    column("mode", String(16)), column("height", Integer), column("width", Integer),
    column("batch", Integer), column("tp", Integer), column("json", JSON),
)

entries = table(
    "entries",
    column("entry_key", String(KEY)), column("cell_key", String(KEY)),
    column("fingerprint_key", String(KEY)), column("store_url", String(1024)),
    column("total_bytes", BigInteger), column("file_count", Integer),
    column("compile_seconds", Float), column("created_at", UTC_TS),
    column("verified_status", String(16)), column("verified_at", UTC_TS),
    column("last_used_at", UTC_TS), column("restore_count", Integer),
    column("producer", JSON), column("recorded_at", UTC_TS), column("signed_by", String(16)),
)

blobs = table("blobs", column("sha256", String(KEY)), column("size", BigInteger))

entry_files = table(
    "entry_files",
    column("entry_key", String(KEY)), column("position", Integer), column("root", String(32)),
    column("path", Text), column("sha256", String(KEY)), column("size", BigInteger),
    column("mode", Integer),
)

cell_failures = table(
    "cell_failures",
    column("id", Integer), column("run_id", String(32)), column("cell_key", String(KEY)),
    column("fingerprint_key", String(KEY)), column("exit_status", Integer),
    column("log_tail", Text), column("created_at", UTC_TS),
)

cell_claims = table(
    "cell_claims",
    column("cell_key", String(KEY)), column("fingerprint_key", String(KEY)),
    column("matrix_name", String(255)), column("host", String(255)),
    column("holder", String(32)), column("attempts", Integer),
    column("claimed_at", UTC_TS), column("heartbeat_at", UTC_TS),
    column("expires_at", UTC_TS),
)

matrices = table(
    "matrices",
    column("id", Integer), column("name", String(255)), column("digest", String(KEY)),
    column("backend", String(32)), column("toml", Text), column("registered_at", UTC_TS),
)

matrix_cells = table(
    "matrix_cells",
    column("matrix_id", Integer), column("cell_key", String(KEY)),
    column("position", Integer),
)

coverage_counts = table(
    "coverage_counts",
    column("matrix_id", Integer), column("fingerprint_key", String(KEY)),
    column("ready", BigInteger), column("failed", BigInteger),
)

fingerprint_counts = table(
    "fingerprint_counts",
    column("fingerprint_key", String(KEY)), column("entries", BigInteger),
    column("total_bytes", BigInteger),
)

restore_counts = table(
    "restore_counts",
    column("period_start", UTC_TS), column("exit_code", Integer),
    column("restored_any", Integer), column("bucket", Integer), column("restores", BigInteger),
    column("seconds_sum", Float), column("bytes_sum", BigInteger),
)

restore_reports = table(  # what the aggregates count (the rows are written by the ORM)
    "restore_reports",
    column("created_at", UTC_TS), column("exit_code", Integer),
    column("cells_restored", Integer), column("seconds", Float),
    column("bytes_fetched", BigInteger), column("matrix", String(255)),
    column("fingerprint_key", String(KEY)),
)

report_fingerprints = table(
    "report_fingerprints",
    column("matrix", String(255)), column("fingerprint_key", String(KEY)),
    column("reports", BigInteger), column("last_seen_at", UTC_TS),
)

# One row (id 1): raised once per write transaction by triggers on every other table (0009).
index_changes = table("index_changes", column("id", Integer), column("version", BigInteger))

ALL = (fingerprints, cells, entries, blobs, entry_files, cell_failures, cell_claims, matrices,
       matrix_cells, coverage_counts, fingerprint_counts, restore_counts, restore_reports,
       report_fingerprints, index_changes)
