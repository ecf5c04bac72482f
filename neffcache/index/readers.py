"""A ``Reader`` for a read command: the bare driver when it can, else SQLAlchemy."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from neffcache.config import Settings, default_home
from neffcache.index.bare_reader import BareReader, open_bare
from neffcache.index.compiled import StatementCache
from neffcache.index.listing import Shape
from neffcache.index.values import Closing

if TYPE_CHECKING:
    from neffcache.index.api import Index


def open_index_as_cli(settings: Settings) -> Index:
    """The embedded default is created or upgraded on first use."""
    from neffcache.index.api import open_index

    return open_index(settings.index_url, auto_upgrade=settings.index_is_embedded)


def open_reader(settings: Settings, *, snapshot: bool = False) -> BareReader | SqlaFallback:
    """Close it when done. Raises UnavailableError (exit 6) or SchemaOutdatedError (7)."""
    statements = StatementCache.load(default_home(os.environ))
    bare = open_bare(settings.index_url, statements, snapshot=snapshot,
                     fallback=lambda: SqlaFallback(settings, statements, snapshot=snapshot))
    if bare is not None:
        return bare
    return SqlaFallback(settings, statements, snapshot=snapshot)


class SqlaFallback(Closing):
    """For the statements the cache lacks; what it compiles is cached when it is closed."""

    dialect: str

    def __init__(self, settings: Settings, statements: StatementCache, *,
                 snapshot: bool = False) -> None:
        from neffcache.index.sqla_reader import SqlaReader

        with contextlib.ExitStack() as opening:
            ix = opening.enter_context(open_index_as_cli(settings))
            conn = opening.enter_context(ix.connection())
            opening.callback(statements.save)  # the first thing ``close`` does
            self._stack = opening.pop_all()
        if snapshot and conn.dialect.name == "postgresql":
            conn.execution_options(isolation_level="REPEATABLE READ")
        self._reader = SqlaReader(conn, statements)
        self.dialect = self._reader.dialect

    def rows(self, name: str, shape: Shape, params: Mapping[str, Any]
             ) -> Iterator[tuple[Any, ...]]:
        return self._reader.rows(name, shape, params)

    def all(self, name: str, shape: Shape, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        return self._reader.all(name, shape, params)

    def close(self) -> None:
        self._stack.close()
