"""Restore reports come from store objects: a unique report id per report, and each entry's
last use (the newest ingested report that found it).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.add_column("restore_reports", sa.Column("report_id", sa.String(length=128),
                                               nullable=True))
    op.create_index(op.f("ix_restore_reports_report_id"), "restore_reports", ["report_id"],
                    unique=True)
    op.add_column("entries", sa.Column("last_used_at", TS, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("entries") as batch:
        batch.drop_column("last_used_at")
    op.drop_index(op.f("ix_restore_reports_report_id"), table_name="restore_reports")
    with op.batch_alter_table("restore_reports") as batch:
        batch.drop_column("report_id")
