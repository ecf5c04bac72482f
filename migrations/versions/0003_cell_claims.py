"""Claims: the cell_claims work queue of ``precompile --claim`` (leases with heartbeats).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-08
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY = sa.String(length=64)
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "cell_claims",
        sa.Column("cell_key", KEY, nullable=False),
        sa.Column("fingerprint_key", KEY, nullable=False),
        sa.Column("matrix_name", sa.String(length=255), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("queued_at", TS, nullable=False),
        sa.Column("holder", sa.String(length=32), nullable=True),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("claimed_at", TS, nullable=True),
        sa.Column("heartbeat_at", TS, nullable=True),
        sa.Column("expires_at", TS, nullable=True),
        sa.ForeignKeyConstraint(["cell_key"], ["cells.key"],
                                name=op.f("fk_cell_claims_cell_key_cells")),
        sa.ForeignKeyConstraint(["fingerprint_key"], ["fingerprints.key"],
                                name=op.f("fk_cell_claims_fingerprint_key_fingerprints")),
        sa.PrimaryKeyConstraint("cell_key", "fingerprint_key", name=op.f("pk_cell_claims")),
    )
    op.create_index(op.f("ix_cell_claims_fingerprint_key_expires_at"), "cell_claims",
                    ["fingerprint_key", "expires_at"])
    op.create_index(op.f("ix_cell_claims_matrix_name"), "cell_claims", ["matrix_name"])
    op.create_index(op.f("ix_cell_claims_expires_at"), "cell_claims", ["expires_at"])


def downgrade() -> None:
    op.drop_table("cell_claims")  # dropping a table drops its indexes
