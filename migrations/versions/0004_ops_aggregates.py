"""Ops at fleet scale: aggregate tables kept up to date by every write (coverage counts per
matrix version x fingerprint, entries and bytes per fingerprint, restore reports per hour x
exit code x duration bucket, fingerprints named by restore reports), filled from the existing
rows.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-09
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY = sa.String(length=64)
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "coverage_counts",
        sa.Column("matrix_id", sa.Integer(), nullable=False),
        sa.Column("fingerprint_key", KEY, nullable=False),
        sa.Column("ready", sa.BigInteger(), nullable=False),
        sa.Column("failed", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["matrix_id"], ["matrices.id"], ondelete="CASCADE",
                                name=op.f("fk_coverage_counts_matrix_id_matrices")),
        sa.PrimaryKeyConstraint("matrix_id", "fingerprint_key", name=op.f("pk_coverage_counts")),
    )
    op.create_index(op.f("ix_coverage_counts_fingerprint_key"), "coverage_counts",
                    ["fingerprint_key"])
    op.create_table(
        "fingerprint_counts",
        sa.Column("fingerprint_key", KEY, nullable=False),
        sa.Column("entries", sa.BigInteger(), nullable=False),
        sa.Column("total_bytes", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("fingerprint_key", name=op.f("pk_fingerprint_counts")),
    )
    op.create_table(
        "restore_counts",
        sa.Column("period_start", TS, nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=False),
        sa.Column("restored_any", sa.Integer(), nullable=False),
        sa.Column("bucket", sa.Integer(), nullable=False),
        sa.Column("restores", sa.BigInteger(), nullable=False),
        sa.Column("seconds_sum", sa.Double(), nullable=False),
        sa.Column("bytes_sum", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("period_start", "exit_code", "restored_any", "bucket",
                                name=op.f("pk_restore_counts")),
    )
    op.create_table(
        "report_fingerprints",
        sa.Column("matrix", sa.String(length=255), nullable=False),
        sa.Column("fingerprint_key", KEY, nullable=False),
        sa.Column("reports", sa.BigInteger(), nullable=False),
        sa.Column("last_seen_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("matrix", "fingerprint_key", name=op.f("pk_report_fingerprints")),
    )
    _fill()


def _fill() -> None:
    """Compute the aggregates from the rows already in the index."""
    from sqlalchemy.orm import Session

    from neffcache.index.aggregates import rebuild_aggregates

    session = Session(bind=op.get_bind())
    rebuild_aggregates(session)
    session.flush()


def downgrade() -> None:
    for table in ("report_fingerprints", "restore_counts", "fingerprint_counts",
                  "coverage_counts"):
        op.drop_table(table)
