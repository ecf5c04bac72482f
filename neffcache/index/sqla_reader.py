"""The Reader over a SQLAlchemy Connection, caching each statement's compiled form."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from sqlalchemy import JSON, Connection, DateTime, Float, exc

from neffcache.index import queries
from neffcache.index.compiled import CompiledStatement, StatementCache
from neffcache.index.engine import SCHEMA_REVISION
from neffcache.index.listing import BATCH, Shape
from neffcache.index.values import Closing


def build(name: str, dialect: str, shape: Shape) -> Any:
    """``ls`` imports no coverage."""
    builder = queries.BUILDERS.get(name)
    if builder is None:
        from neffcache.index.coverage_engine.statements import BUILDERS

        builder = BUILDERS[name]
    return builder(dialect, **dict(shape))

_SIMPLE = (str, int, float, bool, type(None))


class SqlaReader(Closing):
    """Runs ``listing``'s statements through SQLAlchemy; records them in ``cache``; ``close``
    closes ``closing`` (the connection's own, when ``readers`` opened it)."""

    def __init__(self, conn: Connection, cache: StatementCache | None = None,
                 closing: contextlib.ExitStack | None = None) -> None:
        self.conn = conn
        self.dialect = str(conn.dialect.name)
        self.cache = cache
        self._closing = closing or contextlib.ExitStack()

    def close(self) -> None:
        self._closing.close()

    def rows(self, name: str, shape: Shape, params: Mapping[str, Any]
             ) -> Iterator[tuple[Any, ...]]:
        stmt = self._statement(name, shape, params)
        yield from self.conn.execute(stmt.execution_options(yield_per=BATCH), dict(params))

    def all(self, name: str, shape: Shape, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        stmt = self._statement(name, shape, params)
        return [tuple(row) for row in self.conn.execute(stmt, dict(params))]

    def _statement(self, name: str, shape: Shape, params: Mapping[str, Any]) -> Any:
        stmt = build(name, self.dialect, shape)
        if self.cache is not None and self.cache.get(self.dialect, name, shape) is None:
            if (compiled := compile_statement(stmt, self.conn.dialect, params)) is not None:
                self.cache.put(self.dialect, name, shape, compiled, SCHEMA_REVISION)
        return stmt


def compile_statement(stmt: Any, dialect: Any, params: Mapping[str, Any]
                      ) -> CompiledStatement | None:
    """None when the statement needs more than SQL text and plain parameters."""
    compiled = stmt.compile(dialect=dialect)
    if "POSTCOMPILE" in compiled.string or dialect.paramstyle not in ("qmark", "pyformat"):
        return None
    names = tuple(compiled.positiontup) if compiled.positional else tuple(compiled.binds)
    defaults: dict[str, Any] = {}
    datetime_params = set()
    for key, bind in compiled.binds.items():
        if bind.type.dialect_impl(dialect).bind_processor(dialect) is not None:
            if not isinstance(bind.type, DateTime):
                return None
            datetime_params.add(key)
        if key not in params:
            if bind.callable is not None or not isinstance(bind.value, _SIMPLE):
                return None
            defaults[key] = bind.value
    converted = [(i, c.type) for i, c in enumerate(stmt.selected_columns)
                 if _converts(c.type, dialect)]
    if not all(isinstance(type_, (DateTime, JSON)) for _, type_ in converted):
        return None
    return CompiledStatement(
        sql=compiled.string, names=names, defaults=defaults,
        datetime_params=frozenset(datetime_params),
        datetime_columns=tuple(i for i, type_ in converted if isinstance(type_, DateTime)),
        json_columns=tuple(i for i, type_ in converted if isinstance(type_, JSON)))


def _converts(type_: Any, dialect: Any) -> bool:
    try:
        return type_.dialect_impl(dialect).result_processor(dialect, None) is not None
    except (TypeError, exc.InvalidRequestError):
        # psycopg's numeric processors need the column's type code, known only at run time:
        # a float column (our Float/Double: float8) comes back as a float, unconverted.
        return not isinstance(type_, Float)
