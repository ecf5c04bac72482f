"""Engines for index URLs (SQLite WAL, Postgres psycopg 3), driver errors, Alembic revisions."""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event, exc, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import StaticPool

from neffcache.config import redact_url
from neffcache.errors import ConfigError, NeffcacheError, SchemaOutdatedError, UnavailableError
from neffcache.index.bare_reader import BUSY_TIMEOUT_S, CONNECT_TIMEOUT_S, describe
from neffcache.index.values import SchemaState

if TYPE_CHECKING:
    from alembic.config import Config

SHARED_ENGINES = 8  # databases whose engine a process keeps (``index_engine``)
WRITE = {"neffcache_write": True}  # execution option: SQLite takes the write lock at BEGIN
# The head of migrations/versions; tests/unit/test_index_schema.py keeps the two in step.
SCHEMA_REVISION = "0011"
VERSION_TABLE = "alembic_version"
_PG_LOCK_ID = 0x6E656666  # "neff"


def normalise_url(url: str) -> str:
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def sqlite_path(url: str) -> Path | None:
    """None for in-memory or other databases."""
    u = make_url(url)
    if u.get_backend_name() != "sqlite" or u.database in (None, "", ":memory:"):
        return None
    return Path(u.database)


def index_engine(url: str) -> Engine:
    """A view of this process's one engine per database (reopening found the statements compiled:
    a third of a reopen and a write); in-memory SQLite is new per open."""
    url = normalise_url(url)
    if url.startswith("sqlite") and sqlite_path(url) is None:
        return make_engine(url)
    return _shared_engine(url).execution_options()


@functools.lru_cache(maxsize=SHARED_ENGINES)
def _shared_engine(url: str) -> Engine:
    return make_engine(url, max_overflow=-1)


def make_engine(url: str, **pool: Any) -> Engine:
    url = normalise_url(url)
    try:
        parsed = make_url(url)
    except exc.ArgumentError:
        raise ConfigError(f"index {redact_url(url)!r}: not a SQLAlchemy URL") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return _sqlite_engine(url, **pool)
    if backend == "postgresql":
        try:
            # No hstore lookup: a round trip at every start-up. No JIT: a per-cell plan's cost
            # estimate crosses jit_above_cost, and compiling took longer (~200 ms) than running.
            return create_engine(url, pool_pre_ping=True, use_native_hstore=False,
                                 connect_args={"connect_timeout": CONNECT_TIMEOUT_S,
                                               "options": "-c jit=off"}, **pool)
        except ImportError as e:
            raise ConfigError(f"index {redact_url(url)}: driver missing ({e}); "
                              f"install neffcache[postgres]") from None
    raise ConfigError(f"index {redact_url(url)!r}: expected sqlite:///PATH or "
                      f"postgresql+psycopg://USER@HOST/DB")


def _sqlite_engine(url: str, **pool: Any) -> Engine:
    in_memory = sqlite_path(url) is None
    if in_memory:
        pool["poolclass"] = StaticPool
    engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_S,
                                              "check_same_thread": False}, **pool)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (below)
        dbapi_conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")
        if not in_memory:
            dbapi_conn.execute("PRAGMA journal_mode=WAL")
        dbapi_conn.execute("PRAGMA foreign_keys=ON")

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # A deferred transaction that later writes gets SQLITE_BUSY at once: writers lock first.
        immediate = conn.get_execution_options().get("neffcache_write")
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def dialect_insert(session: Any) -> Any:
    """``insert`` of the bound dialect, importing only that one (the other is ~40 ms)."""
    bind = session.get_bind() if hasattr(session, "get_bind") else session
    name = "postgresql" if bind.dialect.name == "postgresql" else "sqlite"
    return importlib.import_module(f"sqlalchemy.dialects.{name}").insert


@contextlib.contextmanager
def translate_errors(url: str) -> Iterator[None]:
    try:
        yield
    except (exc.OperationalError, exc.InterfaceError, exc.ProgrammingError) as e:
        reason = describe(url, getattr(e, "orig", None) or e)
        if _is_missing_table(e):
            raise SchemaOutdatedError(f"{reason} (schema missing or old)") from None
        if isinstance(e, exc.ProgrammingError):
            raise
        raise UnavailableError(reason) from None


def _is_missing_table(e: exc.DBAPIError) -> bool:
    text = str(getattr(e, "orig", e)).lower()
    return ("no such table" in text or "no such column" in text
            or "does not exist" in text and ("relation" in text or "column" in text))


def ensure_parent_dir(url: str) -> None:
    path = sqlite_path(url)
    if path is not None:
        try:
            os.makedirs(path.parent, exist_ok=True)
        except OSError as e:
            raise UnavailableError(f"index {url}: cannot create {path.parent}: "
                                   f"{e.strerror}") from None


def migrations_dir() -> Path:
    spec = importlib.util.find_spec("neffcache.migrations")
    if spec is None or spec.origin is None:
        raise NeffcacheError("neffcache.migrations is not installed with this package")
    return Path(spec.origin).resolve().parent


def alembic_config(url: str, connection: Connection | None = None) -> Config:
    from alembic.config import Config

    cfg = Config(attributes={"connection": connection})  # env.py: None opens its own
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
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

    with translate_errors(url), engine.connect().execution_options(**WRITE) as conn, conn.begin():
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
