"""A precompile run stopped by SIGTERM/SIGINT says so: ``cells_cancelled`` on
precompile_runs, the cells whose workers the stop ended (NULL: the run was not stopped, or
finished before this revision), so the dashboard and /api/runs show "cancelled" rather than
"ok 0 failed 0".

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # a plain ADD COLUMN (no batch copy): the table keeps its change-counter triggers (0010)
    op.add_column("precompile_runs", sa.Column("cells_cancelled", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("precompile_runs") as batch:
        batch.drop_column("cells_cancelled")
