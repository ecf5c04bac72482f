"""A partial index on the entries that were verified (a first call after a restore: hit,
compiled or verify-failed): (cell_key, fingerprint_key, verified_status) WHERE
verified_status IS NOT NULL. The dashboard's grid shows each page's verified cells; few
entries are verified, so the index is small and the page's lookup never reads the table,
whatever the statistics say.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-14
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NAME = "ix_entries_verified"
WHERE = sa.text("verified_status IS NOT NULL")


def upgrade() -> None:
    op.create_index(op.f(NAME), "entries", ["cell_key", "fingerprint_key", "verified_status"],
                    sqlite_where=WHERE, postgresql_where=WHERE)


def downgrade() -> None:
    op.drop_index(op.f(NAME), table_name="entries")
