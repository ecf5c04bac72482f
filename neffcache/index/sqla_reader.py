"""The Reader (``listing``'s protocol) over a SQLAlchemy Connection: builds each statement
(``listing_statements``, ``coverage_engine.statements``) and runs it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from sqlalchemy import Connection

from neffcache.index import listing_statements
from neffcache.index.listing import BATCH, Shape


def build(name: str, dialect: str, shape: Shape) -> Any:
    """The statement ``name`` (of ``listing`` or ``coverage_engine.reads``) in ``shape``
    (``ls`` imports no coverage)."""
    builder = listing_statements.BUILDERS.get(name)
    if builder is None:
        from neffcache.index.coverage_engine.statements import BUILDERS

        builder = BUILDERS[name]
    return builder(dialect, **dict(shape))


class SqlaReader:
    """Runs ``listing``'s and coverage's statements through SQLAlchemy."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.dialect = str(conn.dialect.name)

    def rows(self, name: str, shape: Shape, params: Mapping[str, Any]
             ) -> Iterator[tuple[Any, ...]]:
        stmt = build(name, self.dialect, shape)
        yield from self.conn.execute(stmt.execution_options(yield_per=BATCH), dict(params))

    def first(self, name: str, shape: Shape, params: Mapping[str, Any]
              ) -> tuple[Any, ...] | None:
        row = self.conn.execute(build(name, self.dialect, shape), dict(params)).first()
        return None if row is None else tuple(row)

    def all(self, name: str, shape: Shape, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in self.conn.execute(build(name, self.dialect, shape),
                                                        dict(params))]
