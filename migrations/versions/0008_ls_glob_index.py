"""An index for ``ls --cell GLOB --limit N`` whatever the age of the rows: (cell_key,
created_at, entry_key) on entries, so each matching cell's newest entry keys are read from
it alone (the listing no longer walks every newer entry first: for an old pipeline it read
838k rows to return 100). No Postgres-only pattern index on cells.id: naming one in the
models makes every command that loads them import the Postgres dialect (see fea8788); the
cells table is small and a glob on it is a small scan.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(op.f("ix_entries_cell_key_created_at_entry_key"), "entries",
                    ["cell_key", "created_at", "entry_key"])


def downgrade() -> None:
    op.drop_index(op.f("ix_entries_cell_key_created_at_entry_key"), table_name="entries")
