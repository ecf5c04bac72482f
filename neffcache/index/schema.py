"""Schema revisions: which migration a database is at, and upgrading it with Alembic."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, exc, inspect, text

from neffcache.config import redact_url
from neffcache.errors import NeffcacheError, SchemaOutdatedError, UnavailableError
from neffcache.index.engine import (
    WRITE,
    ensure_parent_dir,
    index_engine,
    make_engine,
    normalise_url,
    sqlite_path,
    translate_errors,
)
from neffcache.index.values import SchemaState

if TYPE_CHECKING:
    from alembic.config import Config

# The head of migrations/versions; tests/unit/test_index_schema.py keeps the two in step.
SCHEMA_REVISION = "0011"
VERSION_TABLE = "alembic_version"
_PG_LOCK_ID = 0x6E656666  # "neff"


def migrations_dir() -> Path:
    spec = importlib.util.find_spec("neffcache.migrations")
    if spec is None or spec.origin is None:
        raise NeffcacheError("neffcache.migrations is not installed with this package")
    return Path(spec.origin).resolve().parent


def alembic_config(url: str, connection: Connection | None = None) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def current_revision(conn: Connection) -> str | None:
    """None: no neffcache schema. One query, no reflection before it."""
    try:
        with conn.begin_nested() if conn.in_transaction() else conn.begin():
            rows = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")
                                ).scalars().all()
    except (exc.OperationalError, exc.ProgrammingError):
        if inspect(conn).has_table(VERSION_TABLE):
            raise  # not a missing table: unreachable, locked, ...
        return None
    return rows[0] if len(rows) == 1 else (",".join(sorted(rows)) or None)


def read_schema_state(engine: Engine, url: str) -> SchemaState:
    with translate_errors(url), engine.connect() as conn:
        return SchemaState(url=redact_url(url), current=current_revision(conn),
                           head=SCHEMA_REVISION)


def require_current(state: SchemaState) -> None:
    if state.up_to_date:
        return
    if state.current is None:
        raise SchemaOutdatedError(f"index {state.url} has no neffcache schema "
                                  f"(expected revision {state.head})")
    if state.current not in known_revisions():
        raise SchemaOutdatedError(
            f"index {state.url} is at revision {state.current}, newer than this neffcache "
            f"knows (head {state.head})", hint="upgrade neffcache on this host")
    raise SchemaOutdatedError(f"index {state.url} is at revision {state.current}, "
                              f"this neffcache needs {state.head}")


def known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(alembic_config("sqlite://"))
    return {s.revision for s in scripts.walk_revisions()}


def upgrade_engine(engine: Engine, url: str, revision: str = "head") -> tuple[str | None, str]:
    """In one transaction; returns (from revision, to revision)."""
    from alembic import command

    ensure_parent_dir(url)
    with translate_errors(url), engine.connect().execution_options(**WRITE) as conn:
        with conn.begin():
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _PG_LOCK_ID})
            before = current_revision(conn)
            if revision == "head" and before == SCHEMA_REVISION:
                return before, before  # a concurrent first use did it while we waited
            command.upgrade(alembic_config(url, conn), revision)
            after = current_revision(conn)
    return before, after or "base"


def downgrade_engine(engine: Engine, url: str, revision: str = "base") -> None:
    from alembic import command

    with translate_errors(url), engine.connect().execution_options(**WRITE) as conn:
        with conn.begin():
            command.downgrade(alembic_config(url, conn), revision)


def upgrade_index(url: str) -> tuple[str | None, str]:
    """Create or migrate the index at ``url``: (from revision, to revision)."""
    url = normalise_url(url)
    engine = make_engine(url)
    try:
        return upgrade_engine(engine, url)
    finally:
        engine.dispose()


def schema_state(url: str) -> SchemaState:
    """Where the index at ``url`` stands; a missing SQLite file is reported, not created."""
    url = normalise_url(url)
    path = sqlite_path(url)
    if path is not None and not path.exists():
        return SchemaState(url=redact_url(url), current=None, head=SCHEMA_REVISION)
    engine = make_engine(url)
    try:
        return read_schema_state(engine, url)
    finally:
        engine.dispose()


def current_engine(url: str, *, auto_upgrade: bool) -> Engine:
    """The engine of ``url`` (normalised) at this code's schema: with ``auto_upgrade`` created or
    migrated, else any other schema refused."""
    path = sqlite_path(url)
    if not auto_upgrade and path is not None and not path.exists():
        raise SchemaOutdatedError(f"index {url}: no such database file "
                                  f"(create it with: neffcache db upgrade --index {url})")
    if auto_upgrade:
        ensure_parent_dir(url)
    engine = index_engine(url)
    try:
        try:
            state: SchemaState | None = read_schema_state(engine, url)
        except UnavailableError:
            if not (auto_upgrade and path is not None):
                raise
            state = None  # busy: a concurrent first use creating it (the upgrade waits)
        if state is None or (not state.up_to_date and auto_upgrade and (
                state.current is None or state.current in known_revisions())):
            upgrade_engine(engine, url)  # under the write lock: one first use migrates
        else:
            require_current(state)
    except BaseException:
        engine.dispose()
        raise
    return engine
