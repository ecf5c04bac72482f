"""``listing``'s Reader on the bare DB-API driver, from the compiled statements in the cache."""

from __future__ import annotations

import contextlib
import json
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import Any

from neffcache.config import redact_url
from neffcache.errors import UnavailableError
from neffcache.index.compiled import CompiledStatement, StatementCache
from neffcache.index.listing import BATCH, Reader, Shape
from neffcache.index.values import Closing

BUSY_TIMEOUT_S = 30  # ``engine``'s too: the index's writers hold the lock briefly
CONNECT_TIMEOUT_S = 10


class BareReader(Closing):
    """Runs cached statements on a DB-API connection ``conn`` of ``dialect``."""

    def __init__(self, conn: Any, dialect: str, url: str, cache: StatementCache,
                 fallback: Callable[[], Reader]) -> None:
        self.conn = conn
        self.dialect = dialect
        self._url = url
        self._cache = cache
        self._open_fallback = fallback
        self._fallback: Reader | None = None

    def rows(self, name: str, shape: Shape, params: Mapping[str, Any]
             ) -> Iterator[tuple[Any, ...]]:
        compiled = self._cache.get(self.dialect, name, shape)
        if compiled is None:
            yield from self._sqlalchemy().rows(name, shape, params)
        else:
            yield from self._run(compiled, params, stream=True)

    def all(self, name: str, shape: Shape, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        compiled = self._cache.get(self.dialect, name, shape)
        if compiled is None:
            return self._sqlalchemy().all(name, shape, params)
        return list(self._run(compiled, params, stream=False))

    def _run(self, compiled: CompiledStatement, params: Mapping[str, Any], *, stream: bool
             ) -> Iterator[tuple[Any, ...]]:
        """``stream``: a server-side cursor on Postgres (one batch in memory), else the whole
        result in one round trip."""
        server_side = stream and self.dialect == "postgresql"
        converts = self.dialect == "sqlite" and bool(compiled.datetime_columns
                                                     or compiled.json_columns)
        try:
            with contextlib.closing(self.conn.cursor(name="neffcache_listing") if server_side
                                    else self.conn.cursor()) as cur:
                cur.execute(compiled.sql, self._args(compiled, params))
                while batch := cur.fetchmany(BATCH):
                    # SQLite's text timestamps and JSON converted, else the driver's tuples
                    yield from (self._row(compiled, row) for row in batch) if converts else batch
        except Exception as e:  # the driver's errors: sqlite3.Error, psycopg.Error
            if type(e).__module__.split(".")[0] not in ("sqlite3", "psycopg"):
                raise
            raise UnavailableError(describe(self._url, e)) from None

    def _args(self, compiled: CompiledStatement, params: Mapping[str, Any]) -> Any:
        values = {**compiled.defaults, **params}
        if self.dialect == "sqlite":
            for name in compiled.datetime_params:
                if isinstance(value := values.get(name), datetime):  # SQLAlchemy's SQLite DATETIME
                    values[name] = value.replace(tzinfo=None).isoformat(" ", "microseconds")
            return tuple(values[n] for n in compiled.names)
        return {n: values[n] for n in compiled.names}

    def _row(self, compiled: CompiledStatement, row: tuple[Any, ...]) -> tuple[Any, ...]:
        out = list(row)
        for i in compiled.datetime_columns:
            if isinstance(out[i], str):
                out[i] = datetime.fromisoformat(out[i])
        for i in compiled.json_columns:
            if isinstance(out[i], str):
                out[i] = json.loads(out[i])
        return tuple(out)

    def _sqlalchemy(self) -> Reader:
        if self._fallback is None:
            self._fallback = self._open_fallback()
        return self._fallback

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()
        close = getattr(self._fallback, "close", None)
        if close is not None:
            close()


def open_bare(url: str, cache: StatementCache, fallback: Callable[[], Reader], *,
              snapshot: bool = False) -> BareReader | None:
    """None unless the cache has this code's statements and the database is at their schema."""
    if cache.head is None or (opened := _connect(url)) is None:
        return None
    conn, dialect = opened
    try:
        found = [r[0] for r in conn.execute("SELECT version_num FROM alembic_version")]
        if found != [cache.head]:
            raise LookupError(found)
        if dialect == "postgresql":
            conn.rollback()  # end the check's transaction: the listing starts its own
            if snapshot:
                import psycopg

                conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    except Exception:  # no schema, another schema, the driver's own errors: SQLAlchemy says
        with contextlib.suppress(Exception):
            conn.close()
        return None
    return BareReader(conn, dialect, url, cache, fallback)


def _connect(url: str) -> tuple[Any, str] | None:
    """A DB-API connection (an existing SQLite file, never created); None if not possible."""
    try:
        if url.startswith("sqlite:///") and "?" not in url:
            import sqlite3

            path = url[len("sqlite:///"):]
            if not path or path == ":memory:":
                return None
            uri = "file:" + urllib.parse.quote(path) + "?mode=rw"
            return sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                   check_same_thread=False), "sqlite"
        for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
            if url.startswith(prefix):
                import psycopg

                try:
                    return psycopg.connect("postgresql://" + url[len(prefix):],
                                           connect_timeout=CONNECT_TIMEOUT_S,
                                           options="-c jit=off"), "postgresql"
                except psycopg.OperationalError as e:  # unreachable: once, not twice
                    raise UnavailableError(describe(url, e)) from None
    except UnavailableError:
        raise
    except Exception:
        return None
    return None


def describe(url: str, err: BaseException) -> str:
    """One line naming the index (password redacted) and the driver's reason."""
    reason = " ".join(str(err).split()) or type(err).__name__
    with contextlib.suppress(ValueError):
        password = urllib.parse.urlsplit(url).password
        if password:
            reason = reason.replace(urllib.parse.unquote(password), "***").replace(
                password, "***")
    return f"index {redact_url(url)}: {reason}"
