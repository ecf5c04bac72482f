"""A ``Reader`` for a read command: the bare driver when it can, else SQLAlchemy."""

from __future__ import annotations

import contextlib
import functools
import os
from typing import TYPE_CHECKING

from neffcache.config import Settings, default_home
from neffcache.index.bare_reader import BareReader, open_bare
from neffcache.index.compiled import StatementCache

if TYPE_CHECKING:
    from neffcache.index.api import Index
    from neffcache.index.sqla_reader import SqlaReader


def open_index_as_cli(settings: Settings) -> Index:
    """The embedded default is created or upgraded on first use."""
    from neffcache.index.api import open_index

    return open_index(settings.index_url, auto_upgrade=settings.index_is_embedded)


def open_reader(settings: Settings, *, snapshot: bool = False) -> BareReader | SqlaReader:
    """Close it when done. Raises UnavailableError (exit 6) or SchemaOutdatedError (7)."""
    statements = StatementCache.load(default_home(os.environ))
    sqla = functools.partial(open_sqla, settings, statements, snapshot=snapshot)
    return open_bare(settings.index_url, statements, sqla, snapshot=snapshot) or sqla()


def open_sqla(settings: Settings, statements: StatementCache, *,
              snapshot: bool = False) -> SqlaReader:
    """For the statements the cache lacks; what it compiles is cached when it is closed."""
    from neffcache.index.sqla_reader import SqlaReader

    with contextlib.ExitStack() as opening:
        ix = opening.enter_context(open_index_as_cli(settings))
        conn = opening.enter_context(ix.connection())
        opening.callback(statements.save)  # the first thing ``close`` does
        if snapshot and conn.dialect.name == "postgresql":
            conn.execution_options(isolation_level="REPEATABLE READ")
        return SqlaReader(conn, statements, opening.pop_all())
