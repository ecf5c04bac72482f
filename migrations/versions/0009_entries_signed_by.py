"""The signer of each entry: ``entries.signed_by``, the key id that signed its manifest (null:
unsigned), so ``ls --json`` and the dashboard show who published what. Entries indexed before
this migration read null. A plain ADD COLUMN on both databases (no batch copy of a million-row
table on SQLite).

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
    op.add_column("entries", sa.Column("signed_by", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("entries") as batch:
        batch.drop_column("signed_by")
