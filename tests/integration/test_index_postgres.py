"""The index on the real PostgreSQL: migrations match the models, writes and queries work,
concurrent writers agree, outdated schemas are refused."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import create_engine, inspect, text

from neffcache.errors import SchemaOutdatedError
from neffcache.index import SCHEMA_REVISION, Index, open_index, schema_state, upgrade_index
from neffcache.index.models import Base
from tests.support.coverage import coverage_of
from tests.unit.test_index_factories import make_cell, make_fingerprint, make_manifest

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def pg_index_url(pg_database_url: str) -> str:
    assert upgrade_index(pg_database_url) == (None, SCHEMA_REVISION)
    return pg_database_url


@pytest.fixture
def ix(pg_index_url: str) -> Iterator[Index]:
    with open_index(pg_index_url, auto_upgrade=False) as index:
        yield index


def test_models_match_migrations_on_postgres(pg_index_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    engine = create_engine(pg_index_url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}),
                                Base.metadata)
    engine.dispose()
    assert diff == []


def test_upgrade_is_a_no_op_when_current(pg_index_url: str) -> None:
    assert upgrade_index(pg_index_url) == (SCHEMA_REVISION, SCHEMA_REVISION)
    assert schema_state(pg_index_url).up_to_date


def test_empty_database_is_refused_then_upgraded(pg_new_database: Callable[[], str]) -> None:
    url = pg_new_database()
    with pytest.raises(SchemaOutdatedError, match="no neffcache schema") as err:
        open_index(url, auto_upgrade=False)
    assert err.value.hint == "neffcache db upgrade"
    assert upgrade_index(url.replace("postgresql+psycopg://", "postgresql://")) == (
        None, SCHEMA_REVISION)
    engine = create_engine(url)
    assert "entries" in inspect(engine).get_table_names()
    engine.dispose()
    open_index(url, auto_upgrade=False).close()


def test_entries_failures_and_coverage(ix: Index) -> None:
    fp, other = make_fingerprint(101), make_fingerprint(102)
    cells = [make_cell(n, pipeline="pg-cover") for n in range(4)]
    m = make_manifest(cells[0], fp, files=[("inductor", "a/" + "x" * 3000, 5, "long path")])
    assert ix.record_entry(m, "s3://k:s@bucket/p") is True
    assert ix.record_entry(m, "s3://bucket/p") is False
    ix.record_entries([make_manifest(c, other) for c in cells[1:3]], "s3://bucket/p")
    run = ix.start_run("ci", fp, "pg")
    ix.record_failure(run, cells[1], fp, 1, 2.0, "older")
    ix.record_failure(run, cells[1], fp, 139, 2.0, "segfault")
    ix.finish_run(run, ok=1, failed=1)
    ix.record_restore({"host": "i-1", "fingerprint_key": fp.key, "cells_restored": [cells[0].id],
                       "cells_missing": [c.id for c in cells[1:]], "exit_code": 3})

    report = coverage_of(ix, cells, [fp])
    assert report.counts(fp.key) == {"ready": 1, "failed": 1, "missing": 2, "in_progress": 0}
    assert report.counts(other.key) == {"ready": 2, "failed": 0, "missing": 2, "in_progress": 0}
    assert report.row(cells[1].key, fp.key).exit_status == 139
    listed = ix.entries(cell_glob="pg-cover/*")
    assert len(listed) == 3 and {e.store_url for e in listed} == {"s3://bucket/p"}
    assert ix.entries(cell_glob="PG-cover/*") == []
    assert ix.record_verification(m.entry_key, "ok")
    assert ix.remove_entries([m.entry_key]) == 1


def test_concurrent_writers_of_the_same_entries(pg_index_url: str) -> None:
    fp = make_fingerprint(103)
    manifests = [make_manifest(make_cell(n, pipeline="pg-race"), fp) for n in range(30)]
    results: list[int] = []
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            with open_index(pg_index_url, auto_upgrade=False) as ix:
                results.append(sum(ix.record_entry(m, "/store") for m in manifests))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(results) == 30  # each entry is new exactly once


def test_concurrent_report_ingesters_add_each_report_once(pg_new_database: Callable[[], str]
                                                          ) -> None:
    from datetime import datetime, timezone

    from neffcache.index.ops_queries import list_restores
    from neffcache.reports import build_report

    url = pg_new_database()
    upgrade_index(url)
    fp = make_fingerprint(3)
    m = make_manifest(make_cell(3), fp)
    when = datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc)
    reports = [build_report({"status": "ok", "exit_code": 0, "entries": [m.entry_key]},
                            fingerprint=fp, host=f"i-{n}", matrix="m", now=when,
                            nonce=f"{n:08x}", version="0.1.0") for n in range(40)]
    with open_index(url, auto_upgrade=False) as ix:
        ix.record_entry(m, "s3://b/p")
    added: list[int] = []
    barrier = threading.Barrier(4)

    def ingest() -> None:
        with open_index(url, auto_upgrade=False) as own:
            barrier.wait()
            added.append(own.record_reports(reports))

    threads = [threading.Thread(target=ingest) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open_index(url, auto_upgrade=False) as ix:
        assert sum(added) == 40 and len(list_restores(ix, limit=100)) == 40
        assert ix.record_reports(reports) == 0
        (entry,) = ix.entries()
        assert ix.restored_fingerprints(when) == {fp.key}
    assert entry.last_used_at == when
    assert entry.restore_count == 40  # each report counted by the one ingester that inserted it


def test_key_lookups_and_pages_read_only_what_they_name(
        pg_new_database: Callable[[], str], monkeypatch: pytest.MonkeyPatch) -> None:
    from neffcache.index import api
    from neffcache.index.reindex import remove_stale

    url = pg_new_database()
    upgrade_index(url)
    fp = make_fingerprint(4)
    ms = [make_manifest(make_cell(n), fp) for n in range(7)]
    keys = sorted(m.entry_key for m in ms)
    monkeypatch.setattr(api, "ENTRY_BATCH", 3)
    with open_index(url, auto_upgrade=False) as ix:
        assert ix.record_entries(ms, "s3://b/p") == 7
        assert ix.indexed_entry_keys([keys[0], keys[6], "0" * 64]) == {keys[0], keys[6]}
        assert list(ix.entry_key_pages(size=3)) == [keys[:3], keys[3:6], keys[6:]]
        assert remove_stale(ix, keys[::2]) == 3
        assert [k for page in ix.entry_key_pages(size=2) for k in page] == keys[::2]
        cover = coverage_of(ix, [m.cell for m in ms], [fp])
    assert cover.counts(fp.key)["ready"] == 4


def test_refresh_statistics_vacuums_and_analyzes_the_tables_named(
        pg_new_database: Callable[[], str]) -> None:
    url = pg_new_database()
    with open_index(url, auto_upgrade=True) as index:
        index.record_entries([make_manifest(make_cell(n, pipeline="pg-stats"),
                                            make_fingerprint(7)) for n in range(3)], "s3://b")

        def refreshed() -> dict[str, tuple[bool, bool, bool]]:
            """Per table: analysed, vacuumed, and pages marked all-visible (index-only
            scans need no table visit)."""
            with index.connection() as conn:
                return {name: (analyzed is not None, vacuumed is not None, visible > 0)
                        for name, analyzed, vacuumed, visible in conn.execute(text(
                            "SELECT s.relname, s.last_analyze, s.last_vacuum, c.relallvisible "
                            "FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid "
                            "WHERE s.relname IN ('entries', 'cells', 'matrices')"))}

        assert refreshed() == {t: (False, False, False) for t in ("entries", "cells", "matrices")}
        index.refresh_statistics(["entries", "cells"])
        assert refreshed() == {"entries": (True, True, True), "cells": (True, True, True),
                               "matrices": (False, False, False)}


BULK = [  # 10 matrices x 400 cells, 20 fingerprints, 79,200 entries; statistics never taken
    "ALTER TABLE entries SET (autovacuum_enabled = false)",
    """INSERT INTO fingerprints (key, backend, fields, first_seen_at)
       SELECT md5('f' || f) || md5('g' || f), 'neuron', '{"target": "trn2"}', now()
       FROM generate_series(0, 19) f""",
    """INSERT INTO cells (key, id, pipeline, mode, height, width, batch, tp, json)
       SELECT md5('c' || n) || md5('d' || n), 'p/compile/' || n, 'p', 'compile', 512, 512, 1,
              1, '{}' FROM generate_series(0, 3999) n""",
    """INSERT INTO matrices (id, name, digest, backend, toml, registered_at)
       SELECT m, 'm' || m, md5('m' || m) || md5('n' || m), 'neuron', '', now()
       FROM generate_series(0, 9) m""",
    """INSERT INTO matrix_cells (matrix_id, cell_key, position)
       SELECT n / 400, md5('c' || n) || md5('d' || n), n % 400 FROM generate_series(0, 3999) n""",
    """INSERT INTO entries (entry_key, cell_key, fingerprint_key, store_url, total_bytes,
                           file_count, producer, created_at, recorded_at, verified_status)
       SELECT md5('e' || n || '/' || f) || md5('x' || n || '/' || f), md5('c' || n) ||
              md5('d' || n), md5('f' || f) || md5('g' || f), 's3://b', 4096, 1, '{}', now(),
              now(), CASE WHEN n % 97 = 0 THEN 'hit' END
       FROM generate_series(0, 3999) n, generate_series(0, 19) f WHERE (n + f) % 100 <> 0""",
]


def test_a_matrix_grid_probes_entries_per_cell_before_any_analyze(
        pg_new_database: Callable[[], str]) -> None:
    """Right after a bulk fill (no ANALYZE, autovacuum off) the planner has no statistics:
    the plain ``IN (subquery)`` reads every entry (a sequential scan), while the grid's
    LATERAL probe is a nested loop over the (cell, fingerprint) index, and a page's verified
    cells come from the partial index. The grid's counts are still right."""
    from sqlalchemy import select

    from neffcache.index.coverage_engine.grid import verified_pairs
    from neffcache.index.tables import entries, matrix_cells
    from tests.support.coverage import matrix_entry_pairs

    url = pg_new_database()
    upgrade_index(url)
    with open_index(url, auto_upgrade=False) as ix:
        with ix.engine.begin() as conn:
            for sql in BULK:
                conn.execute(text(sql))
        with ix.connection() as conn:
            assert conn.scalar(text("SELECT count(*) FROM pg_stats WHERE tablename = 'entries'"
                                    )) == 0

            def plan(query: object) -> str:
                sql = query.compile(conn, compile_kwargs={"literal_binds": True})  # type: ignore[attr-defined]
                return "\n".join(r[0] for r in conn.execute(text(f"EXPLAIN {sql}")))

            e, mc = entries, matrix_cells
            plain = select(e.c.cell_key, e.c.fingerprint_key).where(e.c.cell_key.in_(
                select(mc.c.cell_key).where(mc.c.matrix_id == 3)))
            assert "Seq Scan on entries" in plan(plain)
            probe = plan(matrix_entry_pairs(conn, 3))
            assert "Nested Loop" in probe and "Seq Scan on entries" not in probe, probe
            assert len(conn.execute(matrix_entry_pairs(conn, 3)).all()) == 400 * 20 - 80
            keys = list(conn.scalars(select(mc.c.cell_key).where(mc.c.matrix_id == 3)))
            assert len(verified_pairs(conn, keys)) == 4 * 20  # cells 1261, 1358, 1455, 1552
        grid = ix.matrix_coverage("m3", limit=200)
        assert sum(f.ready for f in grid.fingerprints) == 400 * 20 - 80
        assert sum(len(r.verified) for r in grid.rows) == 2 * 20  # on the first 200 rows
