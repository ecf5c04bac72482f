"""The index's change counter (migration 0010): every table but the counter's own is watched
by a trigger, every write raises the counter, a read does not; on SQLite and Postgres."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text

from neffcache.index import Index, open_index
from neffcache.index.models import Base
from tests.support.ops_seed import sdk_fingerprint, seed_demo


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ix(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
       ) -> Iterator[Index]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('changes') / 'index.db'}"
    else:
        url = str(request.getfixturevalue("pg_new_database")())
    with open_index(url, auto_upgrade=True) as index:
        yield index


def watched_tables(ix: Index) -> set[str]:
    with ix.connection() as conn:
        if conn.dialect.name == "postgresql":
            rows = conn.execute(text(
                "SELECT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                "WHERE t.tgname LIKE 'index_changes_%'"))
        else:
            rows = conn.execute(text("SELECT tbl_name FROM sqlite_master "
                                     "WHERE type = 'trigger' AND name LIKE 'index_changes_%'"))
        return {r[0] for r in rows}


def test_every_table_is_watched(ix: Index) -> None:
    tables = set(Base.metadata.tables) - {"index_changes"}
    assert watched_tables(ix) == tables


def test_writes_raise_the_counter_and_reads_do_not(ix: Index) -> None:
    before = ix.change_count()
    seeded = seed_demo(ix)
    after_seed = ix.change_count()
    assert after_seed > before
    ix.entries(limit=10)
    ix.coverage_summaries()
    assert ix.change_count() == after_seed
    entry = ix.entries(limit=1)[0]
    assert ix.record_verification(entry.entry_key, "hit")
    after_verify = ix.change_count()
    assert after_verify > after_seed
    assert ix.remove_entries([entry.entry_key]) == 1
    assert ix.change_count() > after_verify
    ix.queue_claims("demo", seeded.matrix.cells, sdk_fingerprint(7),
                    [c.key for c in seeded.matrix.cells])
    assert ix.change_count() > after_verify + 1


@pytest.mark.postgres
def test_postgres_raises_it_once_per_transaction(pg_new_database: object) -> None:
    url = pg_new_database()  # type: ignore[operator]
    with open_index(url, auto_upgrade=True) as index:
        seed_demo(index)
        before = index.change_count()
        keys = [e.entry_key for e in index.entries(limit=3)]
        assert index.remove_entries(keys) == 3  # rows in entries and the aggregates
        assert index.change_count() == before + 1
