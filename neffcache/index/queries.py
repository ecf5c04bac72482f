"""Core clauses other reads share, and the statements of ``listing``'s plan by name and shape."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Exists, Integer, and_, bindparam, false, func, or_, select, true

from neffcache.index.listing import HEX, LIKE_ESCAPE, glob_to_like
from neffcache.index.tables import UTC_TS, cells, entries, fingerprints


def glob_clause(dialect: str, column: Any, pattern: str) -> tuple[Any, bool]:
    """A WHERE clause for the glob and whether it is exact (no fnmatch re-check needed)."""
    if dialect == "sqlite":
        return column.op("GLOB")(pattern.replace("[!", "[^")), True
    return column.like(glob_to_like(pattern), escape=LIKE_ESCAPE), "[" not in pattern


def key_prefix_clause(column: Any, prefix: str) -> Any:
    """A hex prefix as a range (LIKE uses no index under C.UTF-8); non-hex matches nothing."""
    p = prefix.lower()
    if not HEX.fullmatch(p):
        return false()
    return and_(column >= p, column < p + "g")  # "g" sorts after every hex digit


def has_entry(cell_key: Any, fingerprint_key: Any) -> Exists:
    e = entries.c
    return (select(e.entry_key)
            .where(e.cell_key == cell_key, e.fingerprint_key == fingerprint_key).exists())


def _cell_clause(dialect: str, glob: bool, prefix: str | None = None) -> Any:
    if not glob:
        return None
    c = cells.c.id
    if dialect != "sqlite":
        return c.like(bindparam("glob"), escape=LIKE_ESCAPE)
    lo, hi = c >= bindparam("lo"), c < bindparam("hi")  # the literal prefix's range
    bounds = {"range": [lo, hi], "from": [lo]}.get(prefix or "", [])
    return and_(*bounds, c.op("GLOB")(bindparam("glob")))


def _entry_filters(src: Any, fp: str | None, pos: bool) -> list[Any]:
    out: list[Any] = []
    if fp == "range":
        out.append(and_(src.c.fingerprint_key >= bindparam("fp_lo"),
                        src.c.fingerprint_key < bindparam("fp_hi")))
    elif fp == "never":
        out.append(false())
    if pos:
        out.append(or_(src.c.created_at < bindparam("pos_at", type_=UTC_TS), and_(
            src.c.created_at == bindparam("pos_at", type_=UTC_TS),
            src.c.entry_key > bindparam("pos_key"))))
    return out


def _listing(src: Any, cell_key: Any, fp: str | None, pos: bool, limited: bool,
             order: tuple[Any, Any] | None = None, base: Any = None) -> Any:
    """The listing's columns over entries ``src`` (read from ``base``), newest first."""
    c, f = cells, fingerprints
    created_at, entry_key = order or (src.c.created_at, src.c.entry_key)
    return (select(src.c.entry_key, c.c.id, src.c.cell_key, src.c.fingerprint_key,
                   f.c.backend, src.c.store_url, src.c.total_bytes, src.c.file_count,
                   src.c.compile_seconds, src.c.created_at, src.c.verified_status,
                   src.c.verified_at, src.c.last_used_at, src.c.restore_count,
                   src.c.signed_by)
            .select_from((src if base is None else base).join(c, c.c.key == cell_key)
                         .join(f, f.c.key == src.c.fingerprint_key))
            .where(*_entry_filters(src, fp, pos))
            .order_by(created_at.desc(), entry_key)
            .limit(bindparam("limit", type_=Integer) if limited else None))


def _entries(dialect: str, *, fp: str | None, pos: bool, glob: bool, limited: bool,
             prefix: str | None = None) -> Any:
    stmt = _listing(entries, entries.c.cell_key, fp, pos, limited)
    clause = _cell_clause(dialect, glob, prefix)
    return stmt if clause is None else stmt.where(clause)


def _walk_counts(dialect: str, *, glob: bool, prefix: str | None = None) -> Any:
    clause = _cell_clause(dialect, glob, prefix)
    return select(
        select(func.count()).select_from(cells).where(clause).scalar_subquery(),
        select(func.count()).select_from(cells).scalar_subquery(),
        select(func.count()).select_from(fingerprints).scalar_subquery())


def _walk(dialect: str, *, fp: str | None, pos: bool, glob: bool, limited: bool,
          prefix: str | None = None) -> Any:
    e = entries
    # cell_key as an expression no index serves: the planner must read entries newest first
    # (within the budget) and stop at the limit, not start from the matching cells.
    unindexed = e.c.cell_key + ""
    matching = select(cells.c.key).where(_cell_clause(dialect, glob, prefix)).scalar_subquery()
    oldest = (select(e.c.created_at).order_by(e.c.created_at.desc())
              .offset(bindparam("budget", type_=Integer)).limit(1).scalar_subquery())
    return _listing(e, unindexed, fp, pos, limited).where(
        unindexed.in_(matching),
        e.c.created_at >= func.coalesce(oldest, bindparam("epoch", type_=UTC_TS)))


def _newest_bound(dialect: str, *, glob: bool, prefix: str | None = None) -> Any:
    e, c = entries, cells
    newest = select(func.max(e.c.created_at)).where(e.c.cell_key == c.c.key).scalar_subquery()
    per_cell = (select(newest.label("newest")).where(_cell_clause(dialect, glob, prefix))
                .subquery("cell_newest"))
    return (select(per_cell.c.newest)  # a cell without entries: NULL, last
            .order_by(per_cell.c.newest.desc().nulls_last())
            .offset(bindparam("skip", type_=Integer)).limit(1))


def _newest_keys(dialect: str, fp: str | None, pos: bool, glob: bool,
                 prefix: str | None, whole: bool, since: bool) -> Any:
    """(entry_key, created_at) of each matching cell's newest ``per_cell`` (``whole``: of all of
    them), from the cell-key index alone (a created_at walk read 838k rows for an old pipeline)."""
    e, c = entries, cells
    filters = _entry_filters(e, fp, pos)
    if since:
        filters.append(e.c.created_at >= bindparam("since", type_=UTC_TS))
    clause = _cell_clause(dialect, glob, prefix)
    per_cell = bindparam("per_cell", type_=Integer)
    if dialect == "postgresql":
        matching = select(c.c.key).where(clause).subquery("matching")
        lateral = (select(e.c.entry_key, e.c.created_at)
                   .where(e.c.cell_key == matching.c.key, *filters)
                   .order_by(e.c.created_at.desc(), e.c.entry_key).limit(per_cell)
                   .lateral("per_cell"))
        return (select(lateral.c.entry_key, lateral.c.created_at)
                .select_from(matching.join(lateral, true()))
                .order_by(lateral.c.created_at.desc(), lateral.c.entry_key)
                .limit(per_cell if whole else None).subquery("newest"))
    # SQLite has no LATERAL: ordering by an unindexed expression keeps its planner off the
    # created_at index; it reads each matching cell's entries from the covering index.
    per_cell_order = func.coalesce(e.c.created_at, e.c.created_at)
    return (select(e.c.entry_key, e.c.created_at)
            .where(e.c.cell_key.in_(select(c.c.key).where(clause)), *filters)
            .order_by(per_cell_order.desc(), e.c.entry_key)
            .limit(per_cell if whole else None).subquery("newest"))


def _entries_newest(dialect: str, *, fp: str | None, pos: bool, glob: bool, limited: bool,
                    whole: bool, since: bool, prefix: str | None = None) -> Any:
    e = entries
    newest = _newest_keys(dialect, fp, pos, glob, prefix, whole, since)
    return _listing(e, e.c.cell_key, fp, pos, limited, (newest.c.created_at, newest.c.entry_key),
                    newest.join(e, e.c.entry_key == newest.c.entry_key))


BUILDERS: dict[str, Callable[..., Any]] = {
    "entries": _entries, "walk_counts": _walk_counts, "walk": _walk,
    "newest_bound": _newest_bound, "entries_newest": _entries_newest,
}
