"""Read queries other than coverage: listing entries, entry keys (a page at a time),
fingerprints, fingerprints restored lately, the database's clock. Core only
(``neffcache.index.tables``): no ORM import. Each function takes a Session or a Connection."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    ARRAY,
    String,
    and_,
    any_,
    bindparam,
    false,
    func,
    or_,
    select,
    text,
    true,
)

from neffcache.errors import UsageError
from neffcache.index.tables import cells, entries, fingerprints
from neffcache.index.values import EntrySummary, as_utc, chunks

if TYPE_CHECKING:
    from neffcache.fingerprint import Fingerprint

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


def glob_clause(session: Any, column: Any, pattern: str) -> tuple[Any, bool]:
    """A WHERE clause for the glob ``pattern`` on ``column`` and whether it is exact (then no
    fnmatch re-check is needed and a LIMIT can go to SQL): SQLite's GLOB has fnmatch's
    syntax (``[!...]`` spelled ``[^...]``); LIKE is exact on Postgres without ``[...]``."""
    if dialect_name(session) == "sqlite":
        return column.op("GLOB")(pattern.replace("[!", "[^")), True
    return column.like(glob_to_like(pattern), escape=_LIKE_ESCAPE), "[" not in pattern


def key_prefix_clause(column: Any, prefix: str) -> Any:
    """``column`` starts with the hex ``prefix``, as a range an index serves under any
    collation (LIKE 'abc%' cannot use one under C.UTF-8); a non-hex prefix matches nothing."""
    p = prefix.lower()
    if not _HEX.fullmatch(p):
        return false()
    return and_(column >= p, column < p + "g")  # "g" sorts after every hex digit


def dialect_name(conn: Any) -> str:
    """``sqlite`` or ``postgresql``, of a Connection or a Session."""
    bind = conn if hasattr(conn, "dialect") else conn.get_bind()
    return str(bind.dialect.name)


def key_batches(conn: Any, keys: Sequence[str]) -> list[Sequence[str]]:
    """``keys`` in batches for ``key_in``: one on Postgres (an array parameter has no size
    limit), BATCH-sized IN lists on SQLite."""
    if dialect_name(conn) == "postgresql":
        return [keys] if keys else []
    return list(chunks(keys))


def key_in(conn: Any, column: Any, keys: Sequence[str]) -> Any:
    """``column`` is one of ``keys``: ``= ANY(array)`` on Postgres (one parameter: the driver
    need not parse hundreds of placeholders), ``IN (...)`` on SQLite. Both use an index."""
    if dialect_name(conn) == "postgresql":
        return column == any_(bindparam(None, list(keys), type_=ARRAY(String)))
    return column.in_(keys)


def database_now(conn: Any) -> datetime:
    """The database server's current time (UTC). Postgres: ``now()`` (the transaction's
    start, so one transaction sees one time); SQLite: its own clock, in milliseconds."""
    if dialect_name(conn) == "postgresql":
        value = conn.scalar(select(func.now()))
    else:
        value = conn.scalar(text("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')"))
        value = datetime.fromisoformat(str(value))
    out = as_utc(value)
    assert out is not None
    return out


CURSOR_PATTERN = r"^[0-9]{1,17}\.[0-9a-f]{1,64}$"  # every string it matches is a cursor
ID_CURSOR_PATTERN = r"^[0-9]{1,17}\.[0-9]{1,18}$"  # a cursor of a listing keyed by integer ids
NAME_CURSOR_PATTERN = r"^[0-9]{1,17}\.[0-9A-Za-z_-]{1,64}$"  # ... keyed by names (run ids)
_CURSOR = re.compile(CURSOR_PATTERN)
_PATTERNS = {p: re.compile(p) for p in (CURSOR_PATTERN, ID_CURSOR_PATTERN,
                                        NAME_CURSOR_PATTERN)}


def entry_cursor(entry: EntrySummary) -> str:
    """A keyset cursor, opaque to callers: the listing continues after ``entry`` (newest
    first). Microseconds since the epoch of its creation, a dot, its key."""
    return keyset_cursor(entry.created_at, entry.entry_key)


def keyset_cursor(at: datetime, key: str | int) -> str:
    """A keyset cursor for a listing ordered by (time, key): microseconds since the epoch of
    ``at``, a dot, ``key`` (hex, or an integer id); matches CURSOR_PATTERN."""
    micros = (at - _EPOCH) // timedelta(microseconds=1)
    return f"{micros}.{key}"


def parse_entry_cursor(cursor: str, pattern: str = CURSOR_PATTERN) -> tuple[datetime, str]:
    """(time, key) of a cursor from ``keyset_cursor`` (matching ``pattern``: hex keys by
    default); UsageError if malformed."""
    if not _PATTERNS[pattern].fullmatch(cursor):
        raise UsageError(f"bad cursor {cursor[:40]!r}", hint="pass the `next` cursor of "
                         "the previous page unchanged")
    micros, key = cursor.split(".", 1)
    return _EPOCH + timedelta(microseconds=int(micros)), key


parse_cursor = parse_entry_cursor


def glob_prefix(pattern: str) -> str:
    """The literal text a glob's matches all start with (up to its first ``*``, ``?``, ``[``)."""
    return re.split(r"[*?\[]", pattern, maxsplit=1)[0]


def prefix_range(column: Any, prefix: str) -> Any:
    """``column`` starts with ``prefix``, as a range an index serves (``>= prefix`` and
    ``< prefix`` with its last character incremented; SQLite compares bytes: BINARY)."""
    upper = prefix[:-1] + chr(ord(prefix[-1]) + 1) if ord(prefix[-1]) < 0x10FFFF else None
    return column >= prefix if upper is None else and_(column >= prefix, column < upper)


def list_entries(conn: Any, cell_glob: str | None = None,
                 fingerprint_key: str | None = None,
                 limit: int | None = None, after: str | None = None) -> list[EntrySummary]:
    """``iter_entries`` as a list."""
    return list(iter_entries(conn, cell_glob, fingerprint_key, limit, after))


def iter_entries(conn: Any, cell_glob: str | None = None,
                 fingerprint_key: str | None = None,
                 limit: int | None = None, after: str | None = None) -> Iterator[EntrySummary]:
    """Entries, newest first, yielded as the database returns them (a server-side cursor on
    Postgres, ``yield_per`` batches on SQLite: memory stays one batch, whatever the count);
    ``cell_glob`` matches cell ids (fnmatch, case-sensitive) and ``fingerprint_key`` may be
    a full key or a prefix of one. ``after`` (a cursor from ``entry_cursor``): only the
    entries listed after that one (keyset paging).

    With a glob and a limit, the cheaper of two plans (same rows, same order), neither
    depending on table statistics: read the newest ``limit`` entries of each matching cell
    (``ix_entries_cell_key_created_at_entry_key``; on Postgres a LATERAL per cell) and keep
    the newest ``limit`` of those (~matching cells x min(fingerprints, limit) index rows,
    whatever the rows' age), or, for a broad glob, walk the entries newest first and keep
    those whose cell matches (~limit x cells / matching cells rows if the matching cells'
    entries are spread over time; bounded, then the first plan answers); see ``_walk``."""
    e, c, f = entries, cells, fingerprints
    position = parse_entry_cursor(after) if after else None

    def listing(src: Any, cell_key: Any, order: tuple[Any, Any] | None = None,
                base: Any = None) -> Any:
        """The listing's columns and filters over entries ``src`` (read from ``base``: src
        itself, or a join starting from a subquery of chosen keys), joined to each entry's
        cell by ``cell_key``, ordered newest first by ``order`` (created_at, entry_key)."""
        created_at, entry_key = order or (src.c.created_at, src.c.entry_key)
        return (select(src.c.entry_key, c.c.id, src.c.cell_key, src.c.fingerprint_key,
                       f.c.backend, src.c.store_url, src.c.total_bytes, src.c.file_count,
                       src.c.compile_seconds, src.c.created_at, src.c.verified_status,
                       src.c.verified_at, src.c.last_used_at, src.c.restore_count)
                .select_from((src if base is None else base).join(c, c.c.key == cell_key)
                             .join(f, f.c.key == src.c.fingerprint_key))
                .where(*entry_filters(src, fingerprint_key, position))
                .order_by(created_at.desc(), entry_key))

    if not cell_glob:
        yield from _rows(conn, listing(e, e.c.cell_key), None, limit)
        return
    clause, exact = glob_clause(conn, c.c.id, cell_glob)
    if glob_prefix(cell_glob) and dialect_name(conn) == "sqlite":
        clause = and_(prefix_range(c.c.id, glob_prefix(cell_glob)), clause)
    check = None if exact else cell_glob  # LIKE ignores [...] classes: fnmatch re-checks
    if not limit:
        yield from _rows(conn, listing(e, e.c.cell_key).where(clause), check, limit)
        return
    # the walk counts from the newest entry: a page further on is read per cell
    plan = walk_plan(conn, clause, limit, bool(fingerprint_key)) if position is None else None
    found = None if plan is None else _walk(conn, listing, clause, check, limit, plan)
    if found is not None:
        yield from found
        return
    # the fnmatch re-check keeps or drops a cell's entries all together: each cell's newest
    # ``limit`` still hold the newest ``limit`` of the cells it keeps
    newest = newest_keys(conn, clause, entry_filters(e, fingerprint_key, position), limit,
                         whole=check is None)
    yield from _rows(conn, listing(e, e.c.cell_key, (newest.c.created_at, newest.c.entry_key),
                                   newest.join(e, e.c.entry_key == newest.c.entry_key)),
                     check, limit)


def entry_filters(src: Any, fingerprint_key: str | None,
                  position: tuple[datetime, str] | None) -> list[Any]:
    """The listing's conditions on an entry: its fingerprint (a key prefix), and for a next
    page, listed after ``position`` (created_at, entry_key) newest first."""
    out = []
    if fingerprint_key:
        out.append(key_prefix_clause(src.c.fingerprint_key, fingerprint_key))
    if position is not None:
        out.append(or_(src.c.created_at < position[0], and_(
            src.c.created_at == position[0], src.c.entry_key > position[1])))
    return out


def newest_keys(conn: Any, clause: Any, filters: list[Any], limit: int,
                whole: bool = True) -> Any:
    """A subquery (entry_key, created_at) of the newest ``limit`` entries of the cells
    matching ``clause`` (``whole=False``: each cell's newest ``limit``, for a caller that
    drops cells), read cell by cell from ix_entries_cell_key_created_at_entry_key alone:
    never a walk of the entries by created_at (which reads every newer entry first: 838k
    rows for an old pipeline); the listing's other columns are then read for ``limit`` rows.
    Without other filters, only entries at least as new as ``newest_bound`` are read."""
    e, c = entries, cells
    if whole and not filters:
        since = newest_bound(conn, clause, limit)
        filters = [] if since is None else [e.c.created_at >= since]
    if dialect_name(conn) == "postgresql":
        matching = select(c.c.key).where(clause).subquery("matching")
        lateral = (select(e.c.entry_key, e.c.created_at)
                   .where(e.c.cell_key == matching.c.key, *filters)
                   .order_by(e.c.created_at.desc(), e.c.entry_key).limit(limit)
                   .lateral("per_cell"))
        return (select(lateral.c.entry_key, lateral.c.created_at)
                .select_from(matching.join(lateral, true()))
                .order_by(lateral.c.created_at.desc(), lateral.c.entry_key)
                .limit(limit if whole else None).subquery("newest"))
    # SQLite has no LATERAL: ordering by an expression no index serves (the same value)
    # keeps its planner from the created_at index; it reads the matching cells (a range on
    # ix_cells_id) and each one's entries from the covering index, then sorts those.
    per_cell_order = func.coalesce(e.c.created_at, e.c.created_at)
    return (select(e.c.entry_key, e.c.created_at)
            .where(e.c.cell_key.in_(select(c.c.key).where(clause)), *filters)
            .order_by(per_cell_order.desc(), e.c.entry_key)
            .limit(limit if whole else None).subquery("newest"))


def newest_bound(conn: Any, clause: Any, limit: int) -> datetime | None:
    """The ``limit``-th newest of the matching cells' newest entries (None: fewer cells
    have one): ``limit`` cells have an entry that new, so the newest ``limit`` entries are all
    at least that new. One index probe per cell, in a statement of its own: its result is a
    plain parameter of the listing (a subquery there inflates the planner's estimates)."""
    e, c = entries, cells
    newest = select(func.max(e.c.created_at)).where(e.c.cell_key == c.c.key).scalar_subquery()
    per_cell = select(newest.label("newest")).where(clause).subquery("cell_newest")
    value = conn.scalar(select(per_cell.c.newest)  # a cell without entries: NULL, last
                        .order_by(per_cell.c.newest.desc().nulls_last())
                        .offset(limit - 1).limit(1))
    return None if value is None else as_utc(value)


def _walk(conn: Any, listing: Callable[..., Any], clause: Any, check: str | None,
          limit: int, plan: tuple[int, int]) -> list[EntrySummary] | None:
    """The walk: the newest entries whose cell matches, up to ``limit``; None when the
    per-cell plan should answer. The walk is bounded to the newest few times the rows it
    expects to read and widened eightfold while it finds fewer than ``limit`` (the matching
    cells' entries are older than the rest), while it reads fewer rows than half of what the
    per-cell plan reads: an old pipeline costs at most about three times that plan."""
    e, c = entries, cells
    budget, per_cell_rows = plan
    # entries.cell_key as an expression (``|| ''``) no index serves: the planner cannot
    # start from the matching cells and look their entries up, so it reads entries by
    # created_at, newest first, no older than the walk's budget allows, and stops at the
    # limit; each entry's cell is then one primary-key lookup.
    unindexed = e.c.cell_key + ""
    matching = select(c.c.key).where(clause).scalar_subquery()
    while True:
        oldest = (select(e.c.created_at).order_by(e.c.created_at.desc())
                  .offset(budget).limit(1).scalar_subquery())
        found = list(_rows(conn, listing(e, unindexed).where(
            unindexed.in_(matching), e.c.created_at >= func.coalesce(oldest, _EPOCH)),
            check, limit))
        if len(found) >= limit:
            return found
        budget *= 8  # the newest entries are not spread like the rest: walk further
        if budget > per_cell_rows // 2:
            return None


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _rows(conn: Any, stmt: Any, check: str | None,
          limit: int | None) -> Iterator[EntrySummary]:
    """Rows of ``stmt`` whose cell id matches the glob ``check`` (None: all), up to ``limit``
    (in SQL unless rows are re-checked here), as they are read: ``yield_per`` streams them
    (a server-side cursor on Postgres), a thousand at a time."""
    if limit is not None and check is None:
        stmt = stmt.limit(limit)
    n = 0
    for row in conn.execute(stmt.execution_options(yield_per=1000)):
        if check is not None and not fnmatch.fnmatchcase(row[1], check):
            continue
        yield _summary(row)
        n += 1
        if limit is not None and n >= limit:
            return


def walk_plan(conn: Any, cell_clause: Any, limit: int,
              by_fingerprint: bool) -> tuple[int, int] | None:
    """(how many of the newest entries to walk first, how many rows the per-cell plan
    reads) if a first walk reads no more rows than that plan, else None. Counted
    from how many cells match (not from statistics), assuming their entries are spread over
    time like the rest; the first walk is four times the estimate. The per-cell plan reads
    about one index probe per matching cell plus ``limit`` rows (with a fingerprint: each
    matching cell's entries), so a walk pays only for globs matching most cells."""
    matching, all_cells, n_fps = conn.execute(select(
        select(func.count()).select_from(cells).where(cell_clause).scalar_subquery(),
        select(func.count()).select_from(cells).scalar_subquery(),
        select(func.count()).select_from(fingerprints).scalar_subquery())).one()
    if not matching:
        return None
    n_fps = max(1, n_fps)  # entries per cell, at most
    walked = int(4 * limit * all_cells / matching * (n_fps if by_fingerprint else 1)) + limit
    per_cell_rows = matching * min(n_fps, limit) if by_fingerprint else matching + limit
    if walked > per_cell_rows:
        return None
    return walked, per_cell_rows


def _summary(row: Any) -> EntrySummary:
    (entry_key, cell_id, cell_key, fp_key, backend, store_url, total_bytes, file_count,
     compile_seconds, created_at, verified_status, verified_at, last_used_at,
     restore_count) = row
    return EntrySummary(
        entry_key=entry_key, cell_id=cell_id, cell_key=cell_key, fingerprint_key=fp_key,
        backend=backend, store_url=store_url, total_bytes=total_bytes, file_count=file_count,
        compile_seconds=compile_seconds, created_at=as_utc(created_at),  # type: ignore[arg-type]
        verified_status=verified_status, verified_at=as_utc(verified_at),
        last_used_at=as_utc(last_used_at), restore_count=int(restore_count or 0))


def restored_fingerprint_keys(session: Any, since: datetime) -> set[str]:
    """Fingerprint keys with an entry an ok/partial restore report found at or after ``since``
    (its ``last_used_at``); read through the last-use index, never every entry."""
    return set(session.scalars(select(entries.c.fingerprint_key).distinct()
                               .where(entries.c.last_used_at >= since)))


KEY_PAGE = 10_000  # entry keys per page when every key must be visited (reindex's prune)


def entry_keys_after(session: Any, after: str | None, limit: int) -> list[str]:
    """Up to ``limit`` entry keys greater than ``after`` (all from the start when None), in
    key order: one range scan of the primary key."""
    stmt = select(entries.c.entry_key).order_by(entries.c.entry_key).limit(limit)
    if after is not None:
        stmt = stmt.where(entries.c.entry_key > after)
    return list(session.scalars(stmt))


def get_fingerprints(session: Any, keys: Sequence[str]) -> dict[str, Fingerprint]:
    from neffcache.fingerprint import Fingerprint  # not on ``ls``'s path

    out: dict[str, Fingerprint] = {}
    for part in key_batches(session, sorted(set(keys))):
        for key, backend, fields in session.execute(
                select(fingerprints.c.key, fingerprints.c.backend, fingerprints.c.fields)
                .where(key_in(session, fingerprints.c.key, part))).all():
            out[key] = Fingerprint(backend=backend, fields=tuple(
                sorted((str(k), str(v)) for k, v in fields.items())))
    return out
