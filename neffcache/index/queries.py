"""Read queries other than coverage and ``ls``, and the clauses other reads share (Core only)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Exists, and_, false, select

from neffcache.index.listing import HEX, LIKE_ESCAPE, glob_to_like
from neffcache.index.tables import entries


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
