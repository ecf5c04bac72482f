"""A ``Reader`` for a read command (``ls``, ``coverage``): the index opened as the CLI opens
it, its statements (``listing_statements``, ``coverage_engine.statements``) run through
SQLAlchemy (``sqla_reader``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from neffcache.config import Settings

if TYPE_CHECKING:
    from neffcache.index.api import Index
    from neffcache.index.sqla_reader import SqlaReader


def open_index_as_cli(settings: Settings) -> Index:
    """The index as the CLI opens it (SQLAlchemy): the embedded default is created or
    upgraded on first use; a named one must already be at this code's schema."""
    from neffcache.index.api import open_index

    return open_index(settings.index_url, auto_upgrade=settings.index_is_embedded)


@contextlib.contextmanager
def open_reader(settings: Settings, *, snapshot: bool = False) -> Iterator[SqlaReader]:
    """A Reader on the index of ``settings``, for the block. ``snapshot``: every statement
    sees one snapshot (Postgres: REPEATABLE READ; SQLite's read has one). Raises
    UnavailableError (exit 6) or SchemaOutdatedError (7) for the index."""
    from neffcache.index.sqla_reader import SqlaReader

    with open_index_as_cli(settings) as ix, ix.connection() as conn:
        if snapshot and conn.dialect.name == "postgresql":
            conn.execution_options(isolation_level="REPEATABLE READ")
        yield SqlaReader(conn)
