"""Reads of registered matrices on an open connection (Core, no ORM)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select

from neffcache.index.coverage_engine.reads import (  # noqa: F401  (choose_version, re-exported)
    choose_version,
    matrix_cell_refs,
    matrix_versions,
)
from neffcache.index.ops_values import MatrixVersion
from neffcache.index.sqla_reader import SqlaReader
from neffcache.index.tables import cells as C
from neffcache.index.tables import matrices as M
from neffcache.index.tables import matrix_cells as MC
from neffcache.index.values import as_utc
from neffcache.matrix import Cell

if TYPE_CHECKING:
    from sqlalchemy import Connection


def versions_in(conn: Connection, name: str, *, counts: bool = True) -> list[MatrixVersion]:
    """Oldest first; without ``counts`` every ``cell_count`` is 0 (one query fewer)."""
    versions = matrix_versions(SqlaReader(conn), name)
    if not versions or not counts:
        return versions
    n_cells = cell_counts(conn, [v.id for v in versions])
    return [replace(v, cell_count=n_cells.get(v.id, 0)) for v in versions]


def cell_counts(conn: Connection, ids: Sequence[int]) -> dict[int, int]:
    if not ids:
        return {}
    return {int(k): int(n) for k, n in conn.execute(
        select(MC.c.matrix_id, func.count()).where(MC.c.matrix_id.in_(ids))
        .group_by(MC.c.matrix_id)).all()}


def current_versions_in(conn: Connection) -> list[MatrixVersion]:
    rows = conn.execute(select(M.c.id, M.c.name, M.c.digest, M.c.backend, M.c.registered_at)
                        .order_by(M.c.name, M.c.id)).all()
    by_name: dict[str, list[Any]] = {}
    for r in rows:
        by_name.setdefault(r.name, []).append(r)
    current = {name: max(enumerate(rs, 1), key=lambda x: (as_utc(x[1].registered_at),
                                                          x[1].id))
               for name, rs in by_name.items()}
    counts = cell_counts(conn, [r.id for _, r in current.values()])
    return [MatrixVersion(r.id, name, n, r.digest, r.backend, counts.get(r.id, 0),
                          as_utc(r.registered_at), True)  # type: ignore[arg-type]
            for name, (n, r) in sorted(current.items())]


def cell_refs_in(conn: Connection, matrix_id: int) -> list[tuple[str, str]]:
    return matrix_cell_refs(SqlaReader(conn), matrix_id)


def cells_in(conn: Connection, matrix_id: int) -> tuple[Cell, ...]:
    rows = conn.scalars(select(C.c.json).select_from(C.join(MC, MC.c.cell_key == C.c.key))
                        .where(MC.c.matrix_id == matrix_id).order_by(MC.c.position))
    return tuple(Cell.from_json(j) for j in rows)


def toml_in(conn: Connection, matrix_id: int) -> str | None:
    return conn.scalar(select(M.c.toml).where(M.c.id == matrix_id))
