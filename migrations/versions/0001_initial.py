"""Initial schema: fingerprints, cells, entries, blobs, entry_files, precompile runs, cell
failures, restore reports, matrices.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY = sa.String(length=64)
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "fingerprints",
        sa.Column("key", KEY, nullable=False),
        sa.Column("backend", sa.String(length=32), nullable=False),
        sa.Column("fields", sa.JSON(), nullable=False),
        sa.Column("first_seen_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_fingerprints")),
    )
    op.create_table(
        "cells",
        sa.Column("key", KEY, nullable=False),
        sa.Column("id", sa.String(length=255), nullable=False),
        sa.Column("pipeline", sa.String(length=64), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("height", sa.Integer(), nullable=False),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("batch", sa.Integer(), nullable=False),
        sa.Column("tp", sa.Integer(), nullable=False),
        sa.Column("json", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_cells")),
    )
    op.create_index(op.f("ix_cells_id"), "cells", ["id"])
    op.create_index(op.f("ix_cells_pipeline_mode"), "cells", ["pipeline", "mode"])

    op.create_table(
        "blobs",
        sa.Column("sha256", KEY, nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("sha256", name=op.f("pk_blobs")),
    )
    op.create_table(
        "entries",
        sa.Column("entry_key", KEY, nullable=False),
        sa.Column("cell_key", KEY, nullable=False),
        sa.Column("fingerprint_key", KEY, nullable=False),
        sa.Column("store_url", sa.String(length=1024), nullable=False),
        sa.Column("total_bytes", sa.BigInteger(), nullable=False),
        sa.Column("file_count", sa.Integer(), nullable=False),
        sa.Column("compile_seconds", sa.Double(), nullable=True),
        sa.Column("producer", sa.JSON(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("recorded_at", TS, nullable=False),
        sa.Column("verified_status", sa.String(length=16), nullable=True),
        sa.Column("verified_at", TS, nullable=True),
        sa.ForeignKeyConstraint(["cell_key"], ["cells.key"],
                                name=op.f("fk_entries_cell_key_cells")),
        sa.ForeignKeyConstraint(["fingerprint_key"], ["fingerprints.key"],
                                name=op.f("fk_entries_fingerprint_key_fingerprints")),
        sa.PrimaryKeyConstraint("entry_key", name=op.f("pk_entries")),
        sa.UniqueConstraint("cell_key", "fingerprint_key",
                            name=op.f("uq_entries_cell_key_fingerprint_key")),
    )
    op.create_index(op.f("ix_entries_created_at"), "entries", ["created_at"])
    op.create_index(op.f("ix_entries_fingerprint_key"), "entries", ["fingerprint_key"])

    op.create_table(
        "entry_files",
        sa.Column("entry_key", KEY, nullable=False),
        sa.Column("position", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("root", sa.String(length=32), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("sha256", KEY, nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("mode", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["entry_key"], ["entries.entry_key"], ondelete="CASCADE",
                                name=op.f("fk_entry_files_entry_key_entries")),
        sa.ForeignKeyConstraint(["sha256"], ["blobs.sha256"],
                                name=op.f("fk_entry_files_sha256_blobs")),
        sa.PrimaryKeyConstraint("entry_key", "position", name=op.f("pk_entry_files")),
    )
    op.create_index(op.f("ix_entry_files_sha256"), "entry_files", ["sha256"])

    op.create_table(
        "precompile_runs",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("finished_at", TS, nullable=True),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("fingerprint_key", KEY, nullable=False),
        sa.Column("matrix_name", sa.String(length=255), nullable=False),
        sa.Column("cells_ok", sa.Integer(), nullable=True),
        sa.Column("cells_failed", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["fingerprint_key"], ["fingerprints.key"],
                                name=op.f("fk_precompile_runs_fingerprint_key_fingerprints")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_precompile_runs")),
    )
    op.create_index(op.f("ix_precompile_runs_started_at"), "precompile_runs", ["started_at"])

    op.create_table(
        "cell_failures",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=True),
        sa.Column("cell_key", KEY, nullable=False),
        sa.Column("fingerprint_key", KEY, nullable=False),
        sa.Column("exit_status", sa.Integer(), nullable=True),
        sa.Column("seconds", sa.Double(), nullable=False),
        sa.Column("log_tail", sa.Text(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.ForeignKeyConstraint(["cell_key"], ["cells.key"],
                                name=op.f("fk_cell_failures_cell_key_cells")),
        sa.ForeignKeyConstraint(["fingerprint_key"], ["fingerprints.key"],
                                name=op.f("fk_cell_failures_fingerprint_key_fingerprints")),
        sa.ForeignKeyConstraint(["run_id"], ["precompile_runs.id"], ondelete="SET NULL",
                                name=op.f("fk_cell_failures_run_id_precompile_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cell_failures")),
    )
    op.create_index(op.f("ix_cell_failures_cell_key_fingerprint_key"), "cell_failures",
                    ["cell_key", "fingerprint_key"])
    op.create_index(op.f("ix_cell_failures_run_id"), "cell_failures", ["run_id"])

    op.create_table(
        "restore_reports",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("fingerprint_key", KEY, nullable=False),
        sa.Column("matrix", sa.String(length=255), nullable=False),
        sa.Column("cells_restored", sa.Integer(), nullable=False),
        sa.Column("cells_missing", sa.Integer(), nullable=False),
        sa.Column("restored", sa.JSON(), nullable=False),
        sa.Column("missing", sa.JSON(), nullable=False),
        sa.Column("files_fetched", sa.Integer(), nullable=False),
        sa.Column("files_skipped", sa.Integer(), nullable=False),
        sa.Column("bytes_fetched", sa.BigInteger(), nullable=False),
        sa.Column("seconds", sa.Double(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_restore_reports")),
    )
    op.create_index(op.f("ix_restore_reports_created_at"), "restore_reports", ["created_at"])
    op.create_index(op.f("ix_restore_reports_fingerprint_key"), "restore_reports",
                    ["fingerprint_key"])

    op.create_table(
        "matrices",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("digest", KEY, nullable=False),
        sa.Column("backend", sa.String(length=32), nullable=False),
        sa.Column("toml", sa.Text(), nullable=False),
        sa.Column("registered_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_matrices")),
        sa.UniqueConstraint("name", "digest", name=op.f("uq_matrices_name_digest")),
    )
    op.create_table(
        "matrix_cells",
        sa.Column("matrix_id", sa.Integer(), nullable=False),
        sa.Column("cell_key", KEY, nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["cell_key"], ["cells.key"],
                                name=op.f("fk_matrix_cells_cell_key_cells")),
        sa.ForeignKeyConstraint(["matrix_id"], ["matrices.id"], ondelete="CASCADE",
                                name=op.f("fk_matrix_cells_matrix_id_matrices")),
        sa.PrimaryKeyConstraint("matrix_id", "cell_key", name=op.f("pk_matrix_cells")),
    )
    op.create_index(op.f("ix_matrix_cells_cell_key"), "matrix_cells", ["cell_key"])


def downgrade() -> None:
    for table in ("matrix_cells", "matrices", "restore_reports", "cell_failures",
                  "precompile_runs", "entry_files", "entries", "blobs", "cells", "fingerprints"):
        op.drop_table(table)  # dropping a table drops its indexes
