"""The statements of coverage's reads, built with SQLAlchemy Core from a name, dialect and shape."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    ARRAY,
    Integer,
    String,
    Text,
    any_,
    bindparam,
    cast,
    func,
    literal_column,
    select,
    true,
    union,
)

from neffcache.index.tables import (
    UTC_TS,
    cell_claims,
    cell_failures,
    entries,
    fingerprints,
    matrix_cells,
)
from neffcache.index.tables import cells as C
from neffcache.index.tables import matrices as M

KEYS = "keys"  # a scope: the cells whose keys are the parameter ``keys``
MATRIX = "matrix"  # a scope: the cells of the registered version ``matrix_id``


def in_keys(dialect: str, column: Any, name: str = "keys") -> Any:
    if dialect == "postgresql":
        # One text literal: psycopg adapts a 20,000-string list in 53 ms (13.5 ms as text);
        # untyped, the planner's hashed ``= ANY`` sees a constant array (0.06 s, not 0.58 s).
        return column == any_(cast(bindparam(name), ARRAY(Text)))
    listed = func.json_each(bindparam(name)).table_valued("value")
    return column.in_(select(listed.c.value))


def in_scope(dialect: str, scope: str, column: Any) -> Any:
    if scope == MATRIX:
        return column.in_(select(matrix_cells.c.cell_key)
                          .where(matrix_cells.c.matrix_id == bindparam("matrix_id", type_=Integer)))
    return in_keys(dialect, column)


def _now(dialect: str) -> Any:
    if dialect == "postgresql":
        return select(func.now().label("now"))
    return select(literal_column("strftime('%Y-%m-%d %H:%M:%f', 'now')").label("now"))


def _entries(dialect: str, *, scope: str, details: bool) -> Any:
    e = entries
    if not details and scope == MATRIX and dialect == "postgresql":
        # A LATERAL index probe per cell (``OFFSET 0``: not flattened into a join), whatever
        # the statistics say: ``IN (subquery)`` scanned every entry until the first ANALYZE
        # (0.57 s at 1M entries, 0.06 s probing).
        mc = matrix_cells
        probe = (select(e.c.cell_key, e.c.fingerprint_key).where(e.c.cell_key == mc.c.cell_key)
                 .offset(literal_column("0", Integer)).lateral("probe"))
        return (select(probe.c.cell_key, probe.c.fingerprint_key)
                .select_from(mc.join(probe, true()))
                .where(mc.c.matrix_id == bindparam("matrix_id", type_=Integer)))
    shown = (e.c.entry_key, e.c.total_bytes) if details else ()
    return select(e.c.cell_key, e.c.fingerprint_key, *shown).where(
        in_scope(dialect, scope, e.c.cell_key))


def _failures(dialect: str, *, scope: str, details: bool) -> Any:
    """Each pair's latest failure of the scope, or without details the distinct pairs."""
    f = cell_failures
    if not details:
        return (select(f.c.cell_key, f.c.fingerprint_key).distinct()
                .where(in_scope(dialect, scope, f.c.cell_key)))
    latest = (select(func.max(f.c.id)).where(in_scope(dialect, scope, f.c.cell_key))
              .group_by(f.c.cell_key, f.c.fingerprint_key))
    return select(f.c.cell_key, f.c.fingerprint_key, f.c.exit_status, f.c.log_tail,
                  f.c.created_at).where(f.c.id.in_(latest))


def _leases(dialect: str, *, scope: str, columns: tuple[str, ...] = (
        "cell_key", "fingerprint_key", "host", "claimed_at", "heartbeat_at", "expires_at",
        "attempts")) -> Any:
    """The live leases of the scope's cells (held, expiring after ``now``)."""
    c = cell_claims.c
    return select(*(c[name] for name in columns)).where(
        in_scope(dialect, scope, c.cell_key), c.holder.is_not(None),
        c.expires_at > bindparam("now", type_=UTC_TS))


def _fingerprints(dialect: str) -> Any:
    fp = fingerprints
    return select(fp.c.key, fp.c.backend, fp.c.fields).where(in_keys(dialect, fp.c.key))


def _fingerprints_with(dialect: str) -> Any:
    """Fingerprints with a row for one of the cells ``keys``: the keys sent once."""
    fp = fingerprints

    def having(t: Any) -> Any:
        # On Postgres, probing the array through the cell-key index per fingerprint took 0.6 s
        # at 20,000 cells; as an expression (``|| ''``) it is a hashed filter (~20 ms).
        cell = (t.c.cell_key + literal_column("''", String) if dialect == "postgresql"
                else t.c.cell_key)
        return select(fp.c.key).where(select(t.c.cell_key).where(
            t.c.fingerprint_key == fp.c.key, in_keys(dialect, cell)).exists())

    leased = _leases(dialect, scope=KEYS, columns=("fingerprint_key",))
    return union(having(entries), having(cell_failures), leased)


def _fingerprint_prefix(dialect: str) -> Any:
    key = fingerprints.c.key
    return (select(key).where(key >= bindparam("lo"), key < bindparam("hi"))
            .order_by(key).limit(bindparam("limit", type_=Integer)))


def _matrix_versions(dialect: str) -> Any:
    return (select(M.c.id, M.c.digest, M.c.backend, M.c.registered_at)
            .where(M.c.name == bindparam("name")).order_by(M.c.id))


def _matrix_cell_refs(dialect: str) -> Any:
    mc = matrix_cells
    return (select(C.c.id, C.c.key).select_from(C.join(mc, mc.c.cell_key == C.c.key))
            .where(mc.c.matrix_id == bindparam("matrix_id", type_=Integer))
            .order_by(mc.c.position))


BUILDERS: dict[str, Callable[..., Any]] = {
    "now": _now, "cov_entries": _entries, "cov_failures": _failures, "cov_leases": _leases,
    "cov_fingerprints": _fingerprints, "cov_fingerprints_with": _fingerprints_with,
    "fingerprint_prefix": _fingerprint_prefix, "matrix_versions": _matrix_versions,
    "matrix_cell_refs": _matrix_cell_refs,
}


def build(name: str, dialect: str, shape: tuple[tuple[str, Any], ...] = ()) -> Any:
    return BUILDERS[name](dialect, **dict(shape))
