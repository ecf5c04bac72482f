"""Each entry's restore count (how many ingested ok/partial restore reports found it), and an
index on its last use (``retire --keep-restored-days`` asks which fingerprints were restored
lately). The count is filled from the reports already in the index.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-10
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("entries") as batch:
        batch.add_column(sa.Column("restore_count", sa.Integer(), nullable=False,
                                   server_default=sa.text("0")))
    op.create_index(op.f("ix_entries_last_used_at"), "entries", ["last_used_at"])
    _fill()


def _fill() -> None:
    """Count, per entry, the ok/partial reports already ingested that found it."""
    from collections import Counter

    bind = op.get_bind()
    reports = sa.table("restore_reports", sa.column("report_id", sa.String()),
                       sa.column("report", sa.JSON()))
    entries = sa.table("entries", sa.column("entry_key", sa.String()),
                       sa.column("restore_count", sa.Integer()))
    counts: Counter[str] = Counter()
    rows = bind.execute(sa.select(reports.c.report).where(reports.c.report_id.is_not(None))
                        .execution_options(yield_per=1000))
    for (doc,) in rows:
        if isinstance(doc, dict) and doc.get("status") in ("ok", "partial"):
            counts.update({k for k in doc.get("entries") or () if isinstance(k, str)})
    by_count: dict[int, list[str]] = {}
    for key, n in counts.items():
        by_count.setdefault(n, []).append(key)
    for n, keys in sorted(by_count.items()):
        for i in range(0, len(keys), 500):
            bind.execute(sa.update(entries).where(entries.c.entry_key.in_(keys[i:i + 500]))
                         .values(restore_count=n))


def downgrade() -> None:
    op.drop_index(op.f("ix_entries_last_used_at"), table_name="entries")
    with op.batch_alter_table("entries") as batch:
        batch.drop_column("restore_count")
