"""Schema and migrations on SQLite: one head, models match migrations, open/upgrade rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from neffcache.errors import SchemaOutdatedError, UnavailableError
from neffcache.index import SCHEMA_REVISION, open_index, schema_state, upgrade_index
from neffcache.index.engine import (
    downgrade_engine,
    make_engine,
    migrations_dir,
)
from neffcache.index.models import Base
from tests.support.migrations import script_heads

TABLES = {"fingerprints", "cells", "entries", "blobs", "entry_files", "precompile_runs",
          "cell_failures", "restore_reports", "matrices", "matrix_cells", "cell_claims",
          "coverage_counts", "fingerprint_counts", "restore_counts", "report_fingerprints",
          "index_changes", "alembic_version"}


def sqlite_url(tmp_path: Path, name: str = "index.db") -> str:
    return f"sqlite:///{tmp_path / name}"


def test_migrations_have_one_head_and_it_is_the_schema_revision() -> None:
    assert script_heads() == (SCHEMA_REVISION,)


def test_migrations_dir_has_env_and_template() -> None:
    d = migrations_dir()
    assert (d / "env.py").is_file() and (d / "script.py.mako").is_file()
    assert any(p.suffix == ".py" and p.stem != "__init__" for p in (d / "versions").iterdir())


def test_models_match_migrations_on_sqlite(tmp_path: Path) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    url = sqlite_url(tmp_path)
    upgrade_index(url)
    engine = create_engine(url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(
            conn, opts={"compare_type": True, "render_as_batch": True}), Base.metadata)
    engine.dispose()
    assert diff == []


def test_upgrade_creates_parent_dir_and_tables_then_is_a_no_op(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "deep" / "er")
    assert upgrade_index(url) == (None, SCHEMA_REVISION)
    assert upgrade_index(url) == (SCHEMA_REVISION, SCHEMA_REVISION)
    engine = create_engine(url)
    assert set(inspect(engine).get_table_names()) == TABLES
    engine.dispose()


def test_downgrade_to_base_then_upgrade_again(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    upgrade_index(url)
    engine = make_engine(url)
    downgrade_engine(engine, url, "base")
    assert set(inspect(engine).get_table_names()) == {"alembic_version"}
    engine.dispose()
    assert upgrade_index(url) == (None, SCHEMA_REVISION)


def test_constraints_follow_the_naming_convention(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    upgrade_index(url)
    insp = inspect(create_engine(url))
    fks = insp.get_foreign_keys("entries")
    assert {fk["name"] for fk in fks} == {"fk_entries_cell_key_cells",
                                          "fk_entries_fingerprint_key_fingerprints"}
    assert insp.get_pk_constraint("entries")["name"] == "pk_entries"
    assert {i["name"] for i in insp.get_indexes("entries")} >= {"ix_entries_fingerprint_key"}


def test_explicit_index_missing_file_is_refused_and_not_created(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    with pytest.raises(SchemaOutdatedError) as err:
        open_index(url, auto_upgrade=False)
    assert err.value.hint == "neffcache db upgrade"
    assert not (tmp_path / "index.db").exists()
    assert schema_state(url).current is None
    assert not (tmp_path / "index.db").exists()


def test_explicit_index_with_empty_schema_is_refused(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    create_engine(url).connect().close()  # an empty database file
    with pytest.raises(SchemaOutdatedError, match="no neffcache schema"):
        open_index(url, auto_upgrade=False)


def test_embedded_index_is_created_on_first_use(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "home")
    with open_index(url, auto_upgrade=True) as ix:
        assert ix.schema_state().up_to_date
        assert ix.entries() == []
    with open_index(url, auto_upgrade=False) as ix:
        assert ix.entries() == []


@pytest.mark.parametrize("auto_upgrade", [True, False])
def test_a_newer_schema_is_refused_even_with_auto_upgrade(tmp_path: Path,
                                                          auto_upgrade: bool) -> None:
    url = sqlite_url(tmp_path)
    upgrade_index(url)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    with pytest.raises(SchemaOutdatedError, match="newer than this neffcache"):
        open_index(url, auto_upgrade=auto_upgrade)


def test_sqlite_runs_in_wal_mode_with_a_busy_timeout(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    upgrade_index(url)
    engine = make_engine(url)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 1000
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    engine.dispose()


def test_uncreatable_sqlite_directory_is_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(UnavailableError, match="cannot create"):
        open_index(f"sqlite:///{blocker}/index.db", auto_upgrade=True)


def test_unreachable_postgres_is_unavailable_without_the_password() -> None:
    url = "postgresql+psycopg://neff:s3cret-pw@127.0.0.1:1/neff"
    with pytest.raises(UnavailableError) as err:
        open_index(url, auto_upgrade=False)
    message = str(err.value)
    assert "s3cret-pw" not in message
    assert "127.0.0.1" in message and "\n" not in message


def test_plain_postgresql_scheme_means_psycopg() -> None:
    from neffcache.index.engine import normalise_url

    assert normalise_url("postgresql://u@h/d") == "postgresql+psycopg://u@h/d"
    assert normalise_url("postgres://u@h/d") == "postgresql+psycopg://u@h/d"
    assert normalise_url("sqlite:///x") == "sqlite:///x"


def test_concurrent_first_use_creates_the_schema_once(tmp_path: Path) -> None:
    import threading

    url = sqlite_url(tmp_path / "fresh")
    errors: list[BaseException] = []

    def first_use() -> None:
        try:
            open_index(url, auto_upgrade=True).close()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=first_use) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    import traceback

    assert errors == [], "".join(traceback.format_exception(errors[0]))
    assert schema_state(url).up_to_date
