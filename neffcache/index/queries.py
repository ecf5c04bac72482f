"""Read queries other than coverage: listing entries, entry keys (a page at a time),
fingerprints, fingerprints restored lately."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, false, select
from sqlalchemy.orm import Session

from neffcache.fingerprint import Fingerprint
from neffcache.index.models import CellRow, EntryRow, FingerprintRow
from neffcache.index.record import as_utc, chunks
from neffcache.index.values import EntrySummary

_LIKE_ESCAPE = "\\"
_HEX = re.compile(r"[0-9a-f]{1,64}")


def glob_to_like(pattern: str) -> str:
    """A LIKE pattern matching at least everything the glob matches (exact for * and ?;
    a [...] class and everything after it become %). Callers re-check with fnmatch."""
    out = []
    for ch in pattern:
        if ch == "[":
            out.append("%")
            break
        if ch == "*":
            out.append("%")
        elif ch == "?":
            out.append("_")
        elif ch in ("%", "_", _LIKE_ESCAPE):
            out.append(_LIKE_ESCAPE + ch)
        else:
            out.append(ch)
    return "".join(out)


def glob_clause(session: Session, column: Any, pattern: str) -> tuple[Any, bool]:
    """A WHERE clause for the glob ``pattern`` on ``column`` and whether it is exact (then no
    fnmatch re-check is needed and a LIMIT can go to SQL): SQLite's GLOB has fnmatch's
    syntax (``[!...]`` spelled ``[^...]``); LIKE is exact on Postgres without ``[...]``."""
    if session.get_bind().dialect.name == "sqlite":
        return column.op("GLOB")(pattern.replace("[!", "[^")), True
    return column.like(glob_to_like(pattern), escape=_LIKE_ESCAPE), "[" not in pattern


def key_prefix_clause(column: Any, prefix: str) -> Any:
    """``column`` starts with the hex ``prefix``, as a range an index serves under any
    collation (LIKE 'abc%' cannot use one under C.UTF-8); a non-hex prefix matches nothing."""
    p = prefix.lower()
    if not _HEX.fullmatch(p):
        return false()
    return and_(column >= p, column < p + "g")  # "g" sorts after every hex digit


def list_entries(session: Session, cell_glob: str | None = None,
                 fingerprint_key: str | None = None,
                 limit: int | None = None) -> list[EntrySummary]:
    """Entries, newest first; ``cell_glob`` matches cell ids (fnmatch, case-sensitive) and
    ``fingerprint_key`` may be a full key or a prefix of one."""
    stmt = (select(EntryRow, CellRow.id, FingerprintRow.backend)
            .join(CellRow, CellRow.key == EntryRow.cell_key)
            .join(FingerprintRow, FingerprintRow.key == EntryRow.fingerprint_key)
            .order_by(EntryRow.created_at.desc(), EntryRow.entry_key))
    exact = True
    if cell_glob:
        clause, exact = glob_clause(session, CellRow.id, cell_glob)
        stmt = stmt.where(clause)
    if fingerprint_key:
        stmt = stmt.where(key_prefix_clause(EntryRow.fingerprint_key, fingerprint_key))
    if limit is not None and exact:
        stmt = stmt.limit(limit)
    out: list[EntrySummary] = []
    for row, cell_id, backend in session.execute(stmt.execution_options(yield_per=1000)):
        if not exact and not fnmatch.fnmatchcase(cell_id, cell_glob or "*"):
            continue  # LIKE ignores [...] classes
        out.append(_summary(row, cell_id, backend))
        if limit is not None and len(out) >= limit:
            break
    return out


def _summary(row: EntryRow, cell_id: str, backend: str) -> EntrySummary:
    return EntrySummary(
        entry_key=row.entry_key, cell_id=cell_id, cell_key=row.cell_key,
        fingerprint_key=row.fingerprint_key, backend=backend, store_url=row.store_url,
        total_bytes=row.total_bytes, file_count=row.file_count,
        compile_seconds=row.compile_seconds, created_at=as_utc(row.created_at),  # type: ignore[arg-type]
        verified_status=row.verified_status, verified_at=as_utc(row.verified_at),
        last_used_at=as_utc(row.last_used_at), restore_count=int(row.restore_count or 0))


def restored_fingerprint_keys(session: Session, since: datetime) -> set[str]:
    """Fingerprint keys with an entry an ok/partial restore report found at or after ``since``
    (its ``last_used_at``); read through the last-use index, never every entry."""
    return set(session.scalars(select(EntryRow.fingerprint_key).distinct()
                               .where(EntryRow.last_used_at >= since)))


KEY_PAGE = 10_000  # entry keys per page when every key must be visited (reindex's prune)


def entry_keys_after(session: Session, after: str | None, limit: int) -> list[str]:
    """Up to ``limit`` entry keys greater than ``after`` (all from the start when None), in
    key order: one range scan of the primary key."""
    stmt = select(EntryRow.entry_key).order_by(EntryRow.entry_key).limit(limit)
    if after is not None:
        stmt = stmt.where(EntryRow.entry_key > after)
    return list(session.scalars(stmt))


def get_fingerprints(session: Session, keys: Sequence[str]) -> dict[str, Fingerprint]:
    out: dict[str, Fingerprint] = {}
    for part in chunks(sorted(set(keys))):
        for key, backend, fields in session.execute(
                select(FingerprintRow.key, FingerprintRow.backend, FingerprintRow.fields)
                .where(FingerprintRow.key.in_(part))):
            out[key] = Fingerprint(backend=backend, fields=tuple(
                sorted((str(k), str(v)) for k, v in fields.items())))
    return out
