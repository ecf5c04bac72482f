"""The ops aggregates, kept up to date by the writes that change them (atomic upserts)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from itertools import groupby
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Table, delete, func, select

from neffcache.index.engine import dialect_insert
from neffcache.index.queries import has_entry
from neffcache.index.tables import (
    cell_failures,
    coverage_counts,
    entries,
    fingerprint_counts,
    matrix_cells,
    report_fingerprints,
    restore_counts,
    restore_reports,
)
from neffcache.index.values import chunks

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

Pair = tuple[str, str]  # (cell key, fingerprint key)


@functools.cache
def _upsert(insert_of: Any, table: Table, replace: tuple[str, ...]) -> Any:
    stmt: Any = insert_of(table)
    greatest = func.max if "sqlite" in insert_of.__module__ else func.greatest
    update = {c.name: greatest(c, stmt.excluded[c.name]) if c.name in replace
              else c + stmt.excluded[c.name] for c in table.c if not c.primary_key}
    return stmt.on_conflict_do_update(index_elements=list(table.primary_key), set_=update)


def _add(session: Session | Connection, table: Table,
         rows: Iterable[tuple[tuple[Any, ...], Sequence[Any]]], replace: Sequence[str] = ()
         ) -> None:
    """Upsert (key, values) rows: values add, except ``replace`` columns, which take the
    greatest; rows of one key are merged so first."""
    values = [c.name for c in table.c if not c.primary_key]
    merged: dict[tuple[Any, ...], list[Any]] = {}
    for key, row in rows:
        acc = merged.get(key)
        merged[key] = list(row) if acc is None else [
            max(a, b) if name in replace else a + b
            for name, a, b in zip(values, acc, row, strict=True)]
    stmt = _upsert(dialect_insert(session), table, tuple(replace))
    names = [c.name for c in table.primary_key] + values
    # rows in key order: concurrent writers do not deadlock
    docs = [dict(zip(names, (*k, *v), strict=True)) for k, v in sorted(merged.items())]
    for part in chunks(docs):
        session.execute(stmt, list(part))


def _matrices_of(session: Session | Connection, cell_keys: Iterable[str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    mc = matrix_cells.c
    for part in chunks(sorted(set(cell_keys))):
        for matrix_id, cell_key in session.execute(
                select(mc.matrix_id, mc.cell_key).where(mc.cell_key.in_(part))):
            out.setdefault(cell_key, []).append(matrix_id)
    return out


def _pairs_with(session: Session | Connection, table: Table, pairs: Iterable[Pair]
                ) -> set[Pair]:
    found: set[Pair] = set()
    t = table.c
    for fp, group in groupby(sorted(pairs, key=itemgetter(1)), itemgetter(1)):
        for part in chunks(sorted({cell for cell, _ in group})):
            found.update((c, fp) for c in session.scalars(
                select(t.cell_key).where(t.fingerprint_key == fp, t.cell_key.in_(part))
                .distinct()))
    return found


def entries_changed(session: Session | Connection, entries: Sequence[tuple[str, str, int]],
                    sign: int) -> None:
    """Entries just inserted (``sign`` 1) or deleted (-1): ready and failed move, in every
    matrix version holding the cell."""
    matrices = _matrices_of(session, (c for c, _, _ in entries))
    held = dict.fromkeys((c, f) for c, f, _ in entries if c in matrices)
    failed = _pairs_with(session, cell_failures, held)
    _add(session, coverage_counts, (((m, fp), (sign, -sign if (cell, fp) in failed else 0))
                                    for cell, fp in held for m in matrices[cell]))
    _add(session, fingerprint_counts, (((fp,), (sign, sign * int(size)))
                                       for _, fp, size in entries))


def failure_adding(session: Session | Connection, cell_key: str, fingerprint_key: str) -> None:
    """Call before inserting a failure."""
    pair = [(cell_key, fingerprint_key)]
    if _pairs_with(session, entries, pair) or _pairs_with(session, cell_failures, pair):
        return
    _add(session, coverage_counts, (((m, fingerprint_key), (0, 1))
                                    for m in _matrices_of(session, [cell_key]).get(cell_key, ())))


def hour_of(when: datetime) -> datetime:
    when = when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when
    return when.astimezone(timezone.utc).replace(minute=0, second=0, microsecond=0)


def bucket_of(seconds: float) -> int:
    from neffcache.index.ops_values import DURATION_BUCKETS  # the restore paths' values

    return next((i for i, b in enumerate(DURATION_BUCKETS) if seconds <= b),
                len(DURATION_BUCKETS))


def restores_added(session: Session | Connection,
                   rows: Iterable[tuple[datetime, int, int, float, int, str, str]]) -> None:
    """Rows: (time, exit code, cells restored, seconds, bytes, matrix, fingerprint key)."""
    rows = list(rows)
    _add(session, restore_counts, (
        ((hour_of(when), int(code), 1 if restored > 0 else 0, bucket_of(float(seconds))),
         (1, float(seconds), int(nbytes)))
        for when, code, restored, seconds, nbytes, _, _ in rows))
    _add(session, report_fingerprints, (((matrix, fp), (1, when))
                                        for when, *_, matrix, fp in rows if fp),
         replace=("last_seen_at",))


def matrix_registered(session: Session | Connection, matrix_id: int | None) -> None:
    """Counts the coverage of the version ``matrix_id`` (None: of every version)."""
    held = select(matrix_cells.c.cell_key, matrix_cells.c.matrix_id)
    if matrix_id is not None:
        held = held.where(matrix_cells.c.matrix_id == matrix_id)
    mc, e, f = held.subquery(), entries.c, cell_failures.c
    ready = [((m, fp), (int(n), 0)) for m, fp, n in session.execute(
        select(mc.c.matrix_id, e.fingerprint_key, func.count())
        .select_from(mc.join(entries, e.cell_key == mc.c.cell_key))
        .group_by(mc.c.matrix_id, e.fingerprint_key))]
    failed_pairs = select(f.cell_key, f.fingerprint_key).distinct().subquery()
    failed = [((m, fp), (0, int(n))) for m, fp, n in session.execute(
        select(mc.c.matrix_id, failed_pairs.c.fingerprint_key, func.count())
        .join(failed_pairs, failed_pairs.c.cell_key == mc.c.cell_key)
        .where(~has_entry(failed_pairs.c.cell_key, failed_pairs.c.fingerprint_key))
        .group_by(mc.c.matrix_id, failed_pairs.c.fingerprint_key))]
    _add(session, coverage_counts, ready + failed)  # a pair's two rows merge


def rebuild_aggregates(session: Session | Connection) -> None:
    for table in (coverage_counts, fingerprint_counts, restore_counts, report_fingerprints):
        session.execute(delete(table))
    matrix_registered(session, None)
    e = entries.c
    per_fp = session.execute(select(e.fingerprint_key, func.count(), func.sum(e.total_bytes))
                             .group_by(e.fingerprint_key))
    _add(session, fingerprint_counts, [((fp,), (int(n), int(b or 0))) for fp, n, b in per_fp])
    r = restore_reports.c
    restores_added(session, [tuple(row) for row in session.execute(  # type: ignore[misc]
        select(r.created_at, r.exit_code, r.cells_restored, r.seconds, r.bytes_fetched,
               r.matrix, r.fingerprint_key))])
