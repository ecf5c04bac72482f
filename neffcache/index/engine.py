"""Engines for index URLs (SQLite in WAL mode, Postgres through psycopg 3); driver errors."""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, exc
from sqlalchemy.engine import make_url
from sqlalchemy.pool import StaticPool

from neffcache.config import redact_url
from neffcache.errors import ConfigError, SchemaOutdatedError, UnavailableError

SHARED_ENGINES = 8  # databases whose engine a process keeps (``index_engine``)
BUSY_TIMEOUT_S = 30
CONNECT_TIMEOUT_S = 10
WRITE = {"neffcache_write": True}  # execution option: SQLite takes the write lock at BEGIN


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
    kwargs: dict[str, Any] = {"connect_args": {"timeout": BUSY_TIMEOUT_S,
                                               "check_same_thread": False}, **pool}
    if in_memory:
        kwargs["poolclass"] = StaticPool
    engine = create_engine(url, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (below)
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")
        if not in_memory:
            cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

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


def describe_error(url: str, err: BaseException) -> str:
    from neffcache.index.bare_reader import describe

    return describe(url, getattr(err, "orig", None) or err)


@contextlib.contextmanager
def translate_errors(url: str) -> Iterator[None]:
    try:
        yield
    except (exc.OperationalError, exc.InterfaceError, exc.ProgrammingError) as e:
        if _is_missing_table(e):
            raise SchemaOutdatedError(f"{describe_error(url, e)} (schema missing or old)"
                                      ) from None
        if isinstance(e, exc.ProgrammingError):
            raise
        raise UnavailableError(describe_error(url, e)) from None


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
