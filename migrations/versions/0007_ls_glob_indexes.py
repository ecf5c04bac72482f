"""Indexes for ``ls --cell GLOB --limit N`` whatever the age of the rows: (cell_key,
created_at, entry_key) on entries, so each matching cell's newest entries are read from it
(the listing no longer walks every newer entry first: an old pipeline read 838k rows to
return 100); and on Postgres cells.id with varchar_pattern_ops, so a glob's literal prefix
(LIKE 'p07/compile/%') is an index range under any collation.

Revision ID: 0007_ls_glob
Revises: 0006
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0007_ls_glob"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(op.f("ix_entries_cell_key_created_at_entry_key"), "entries",
                    ["cell_key", "created_at", "entry_key"])
    op.create_index("ix_cells_id_pattern", "cells", ["id"],
                    postgresql_ops={"id": "varchar_pattern_ops"})


def downgrade() -> None:
    op.drop_index("ix_cells_id_pattern", table_name="cells")
    op.drop_index(op.f("ix_entries_cell_key_created_at_entry_key"), table_name="entries")
