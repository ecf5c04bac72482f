"""A precompile run stopped by SIGTERM/SIGINT says so: ``cells_cancelled`` on
precompile_runs, the cells whose workers the stop ended (NULL: the run was not stopped, or
finished before this revision), so the dashboard and /api/runs show "cancelled" rather than
"ok 0 failed 0".

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("precompile_runs") as batch:
        batch.add_column(sa.Column("cells_cancelled", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("precompile_runs") as batch:
        batch.drop_column("cells_cancelled")
