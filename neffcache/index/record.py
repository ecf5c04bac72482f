"""Writes of entries to the index (Core, no ORM: ~0.15 s of ``push``'s start-up)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, TableClause, delete, exists, insert, or_, select, update

from neffcache.fingerprint import Fingerprint
from neffcache.index import aggregates
from neffcache.index.engine import dialect_insert
from neffcache.index.tables import blobs, cells, entries, entry_files, fingerprints
from neffcache.index.values import as_utc, chunks
from neffcache.manifest import Manifest
from neffcache.matrix import Cell

if TYPE_CHECKING:
    from sqlalchemy.orm import Session


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def parse_timestamp(text: str, default: datetime) -> datetime:
    try:
        ts = datetime.fromisoformat(text.strip())
    except (ValueError, AttributeError):
        return default
    return as_utc(ts) or default


def strip_credentials(url: str) -> str:
    """A store URL without userinfo, query or fragment (those can carry credentials)."""
    if "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    rest = rest.split("#", 1)[0].split("?", 1)[0]
    authority, sep, path = rest.partition("/")
    authority = authority.rsplit("@", 1)[-1]
    return f"{scheme}://{authority}{sep}{path}"


@functools.cache
def _insert_ignoring(insert_of: Any, table: TableClause) -> Any:
    return insert_of(table).on_conflict_do_nothing()


def insert_if_absent(session: Session | Connection, table: TableClause | type,
                     rows: Sequence[Mapping[str, Any]]) -> None:
    """``table``: a table, or a mapped model's."""
    if not rows:
        return
    stmt = _insert_ignoring(dialect_insert(session), getattr(table, "__table__", table))
    for part in chunks(list(rows)):
        session.execute(stmt, list(part))


def fingerprint_row(fp: Fingerprint, now: datetime) -> dict[str, Any]:
    return {"key": fp.key, "backend": fp.backend, "fields": dict(fp.fields), "first_seen_at": now}


def cell_row(cell: Cell) -> dict[str, Any]:
    return {"key": cell.key, "id": cell.id, "pipeline": cell.pipeline, "mode": cell.mode,
            "height": cell.height, "width": cell.width, "batch": cell.batch, "tp": cell.tp,
            "json": cell.to_json()}


def save_fingerprints_and_cells(session: Session | Connection, fps: Iterable[Fingerprint],
                                new_cells: Iterable[Cell], now: datetime) -> None:
    by_fp = {fp.key: fingerprint_row(fp, now) for fp in fps}
    by_cell = {c.key: cell_row(c) for c in new_cells}
    insert_if_absent(session, fingerprints, [by_fp[k] for k in sorted(by_fp)])
    insert_if_absent(session, cells, [by_cell[k] for k in sorted(by_cell)])


def existing_keys(session: Session | Connection, column: Any, keys: Iterable[str]) -> set[str]:
    """Which of ``keys`` are in ``column`` (an IN list per chunk, never a whole-table read)."""
    found: set[str] = set()
    for part in chunks(sorted(set(keys))):
        found.update(str(k) for k in session.scalars(select(column).where(column.in_(part))))
    return found


def save_entries(session: Session | Connection, manifests: Sequence[Manifest],
                 store_url: str) -> int:
    """Returns how many of the manifests were new."""
    now = utcnow()
    by_key = {m.entry_key: m for m in manifests}
    known = existing_keys(session, entries.c.entry_key, by_key)
    new = [by_key[k] for k in sorted(set(by_key) - known)]
    if not new:
        return 0
    save_fingerprints_and_cells(session, (m.fingerprint for m in new),
                                (m.cell for m in new), now)
    sizes = {f.sha256: f.size for m in new for f in m.files}
    insert_if_absent(session, blobs, [{"sha256": s, "size": n} for s, n in sorted(sizes.items())])
    url = strip_credentials(store_url)
    entry_rows: list[dict[str, Any]] = [{
        "entry_key": m.entry_key, "cell_key": m.cell.key, "fingerprint_key": m.fingerprint.key,
        "store_url": url, "total_bytes": m.total_bytes, "file_count": len(m.files),
        "compile_seconds": m.compile_seconds, "producer": dict(m.producer),
        "created_at": parse_timestamp(m.created_at, now), "recorded_at": now,
        "signed_by": m.signature.key_id if m.signature is not None else None,
    } for m in new]
    for part in chunks(entry_rows):
        session.execute(insert(entries), list(part))
    aggregates.entries_changed(session, [(r["cell_key"], r["fingerprint_key"], r["total_bytes"])
                                         for r in entry_rows], 1)
    file_rows = [{"entry_key": m.entry_key, "position": i, "root": f.root, "path": f.path,
                  "sha256": f.sha256, "size": f.size, "mode": f.mode}
                 for m in new for i, f in enumerate(m.files)]
    for part in chunks(file_rows, 2000):
        session.execute(insert(entry_files), list(part))
    return len(new)


def delete_entries(session: Session | Connection, keys: Sequence[str]) -> int:
    """Entries, their file rows, and blobs no remaining entry references."""
    removed = 0
    e, f, b = entries.c, entry_files.c, blobs.c
    for part in chunks(list(keys)):
        shas = set(session.scalars(select(f.sha256).where(f.entry_key.in_(part))))
        session.execute(delete(entry_files).where(f.entry_key.in_(part)))
        gone = session.execute(select(e.cell_key, e.fingerprint_key, e.total_bytes)
                               .where(e.entry_key.in_(part))).all()
        removed += session.execute(delete(entries).where(e.entry_key.in_(part))
                                   ).rowcount or 0  # type: ignore[attr-defined]
        for sha_part in chunks(sorted(shas)):
            referenced = exists().where(f.sha256 == b.sha256)
            session.execute(delete(blobs).where(b.sha256.in_(sha_part), ~referenced))
        aggregates.entries_changed(session, [tuple(r) for r in gone], -1)  # type: ignore[misc]
    return removed


def save_verification(session: Session | Connection, entry_key: str, status: str,
                      at: datetime | None = None) -> bool:
    """A verdict older than the entry's is kept out."""
    e = entries.c
    stmt = update(entries).where(e.entry_key == entry_key)
    if at is not None:
        stmt = stmt.where(or_(e.verified_at.is_(None), e.verified_at <= at))
    result = session.execute(stmt.values(verified_status=status[:16],
                                         verified_at=at or utcnow()))
    return bool(result.rowcount)  # type: ignore[attr-defined]
