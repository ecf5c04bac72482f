"""A change counter: ``index_changes`` holds one row whose ``version`` every write
transaction raises, whatever writes it (this neffcache, an older one on a runner, a bulk
load, a hand-made fix), by triggers on every table. ``neffcache serve`` reads it (one row)
to decide whether an answer built from the index is still current (``Index.change_count``).

The tables' own columns cannot say it: ids and timestamps are taken before a transaction
commits, so a later commit may carry a smaller one, and deletions leave no trace.

SQLite: an AFTER INSERT/UPDATE/DELETE trigger per table and event, FOR EACH ROW (SQLite has
no other kind; writers are serialised anyway). Postgres: a constraint trigger per table,
DEFERRABLE INITIALLY DEFERRED, so the counter row is locked only at commit, after every
other lock the transaction takes (no deadlock with row locks taken in between), and the
function raises the counter once per transaction. A table added later needs its trigger
(``tests/integration/test_index_changes.py`` fails without it).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

WATCHED = ("fingerprints", "cells", "entries", "blobs", "entry_files", "precompile_runs",
           "cell_failures", "restore_reports", "matrices", "matrix_cells", "cell_claims",
           "coverage_counts", "fingerprint_counts", "restore_counts", "report_fingerprints")
EVENTS = ("insert", "update", "delete")
BUMP = "UPDATE index_changes SET version = version + 1 WHERE id = 1"
PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION neffcache_index_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('neffcache.changed_in', true) IS DISTINCT FROM txid_current()::text THEN
    PERFORM set_config('neffcache.changed_in', txid_current()::text, true);
    {BUMP};
  END IF;
  RETURN NULL;
END $$"""


def upgrade() -> None:
    op.create_table("index_changes",
                    sa.Column("id", sa.Integer(), nullable=False),
                    sa.Column("version", sa.BigInteger(), nullable=False),
                    sa.PrimaryKeyConstraint("id", name=op.f("pk_index_changes")))
    op.execute("INSERT INTO index_changes (id, version) VALUES (1, 0)")
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PG_FUNCTION)
        for t in WATCHED:
            op.execute(f"CREATE CONSTRAINT TRIGGER index_changes_{t} AFTER INSERT OR UPDATE "
                       f"OR DELETE ON {t} DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
                       f"EXECUTE FUNCTION neffcache_index_changed()")
        return
    for t in WATCHED:
        for event in EVENTS:
            op.execute(f"CREATE TRIGGER index_changes_{t}_{event} AFTER {event.upper()} ON {t} "
                       f"BEGIN {BUMP}; END")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for t in WATCHED:
            op.execute(f"DROP TRIGGER IF EXISTS index_changes_{t} ON {t}")
        op.execute("DROP FUNCTION IF EXISTS neffcache_index_changed()")
    else:
        for t in WATCHED:
            for event in EVENTS:
                op.execute(f"DROP TRIGGER IF EXISTS index_changes_{t}_{event}")
    op.drop_table("index_changes")
