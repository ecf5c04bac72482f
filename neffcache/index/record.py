"""Writes of entries, runs, failures, restore reports (Core, no ORM: ~0.15 s of push's start-up)."""

from __future__ import annotations

import functools
import json
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, TableClause, delete, exists, insert, or_, select, update

from neffcache.errors import UsageError
from neffcache.fingerprint import Fingerprint
from neffcache.index import aggregates
from neffcache.index.engine import dialect_insert
from neffcache.index.tables import (
    blobs,
    cell_failures,
    cells,
    entries,
    entry_files,
    fingerprints,
    precompile_runs,
    restore_reports,
)
from neffcache.index.values import as_utc, chunks
from neffcache.manifest import Manifest
from neffcache.matrix import Cell

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from neffcache.reports import Report  # it imports the store package: not on push's path

LOG_TAIL_CHARS = 16_000


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
    return {str(k) for part in chunks(sorted(set(keys)))
            for k in session.scalars(select(column).where(column.in_(part)))}


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


def save_failure(session: Session, run_id: str | None, cell: Cell, fingerprint: Fingerprint,
                 exit_status: int | None, seconds: float, log_tail: str) -> None:
    now = utcnow()
    save_fingerprints_and_cells(session, [fingerprint], [cell], now)
    aggregates.failure_adding(session, cell.key, fingerprint.key)
    session.execute(insert(cell_failures).values(
        run_id=run_id, cell_key=cell.key, fingerprint_key=fingerprint.key,
        exit_status=exit_status, seconds=float(seconds), log_tail=log_tail[-LOG_TAIL_CHARS:],
        created_at=now))


def save_run_start(session: Session, host: str, fingerprint: Fingerprint,
                   matrix_name: str) -> str:
    now = utcnow()
    save_fingerprints_and_cells(session, [fingerprint], [], now)
    run_id = uuid.uuid4().hex
    session.execute(insert(precompile_runs).values(
        id=run_id, started_at=now, host=host[:255], fingerprint_key=fingerprint.key,
        matrix_name=matrix_name[:255]))
    return run_id


def save_run_finish(session: Session, run_id: str, ok: int, failed: int,
                    cancelled: int | None = None) -> None:
    result = session.execute(update(precompile_runs).where(precompile_runs.c.id == run_id)
                             .values(finished_at=utcnow(), cells_ok=int(ok),
                                     cells_failed=int(failed), cells_cancelled=cancelled))
    if not result.rowcount:  # type: ignore[attr-defined]
        raise UsageError(f"precompile run {run_id!r}: no such run in the index")


def _int(report: Mapping[str, Any], *names: str, default: int = 0) -> int:
    for n in names:
        if isinstance(v := report.get(n), (int, float)) and not isinstance(v, bool):
            return int(v)
    return default


def _cell_ids(value: Any) -> list[str]:
    """Cell ids from ids, or from objects with an ``id``/``cell_id``."""
    if not isinstance(value, (list, tuple)):
        return []
    return [str(v.get("cell_id") or v.get("id") if isinstance(v, Mapping) else v) for v in value]


def _cells_and_count(report: Mapping[str, Any], name: str) -> tuple[list[str], int]:
    listed = _cell_ids(report.get(name))
    value = report.get(f"cells_{name}")
    if isinstance(value, (list, tuple)):
        return listed or _cell_ids(value), len(value)
    return listed, _int(report, f"cells_{name}", default=len(listed))


def restore_report_row(report: Mapping[str, Any]) -> dict[str, Any]:
    """Every key of the report is also kept in the ``report`` JSON column."""
    fp = report.get("fingerprint")
    fp_key = report.get("fingerprint_key") or (fp.get("key") if isinstance(fp, Mapping) else fp)
    restored, n_restored = _cells_and_count(report, "restored")
    missing, n_missing = _cells_and_count(report, "missing")
    seconds = report.get("seconds", 0.0)
    return dict(
        host=str(report.get("host") or "unknown")[:255],
        fingerprint_key=str(fp_key or "")[:64],
        matrix=str(report.get("matrix") or "")[:255],
        cells_restored=n_restored, cells_missing=n_missing,
        restored=restored, missing=missing,
        files_fetched=_int(report, "files_fetched"),
        files_skipped=_int(report, "files_skipped"),
        bytes_fetched=_int(report, "bytes_fetched", "bytes"),
        seconds=float(seconds) if isinstance(seconds, (int, float)) else 0.0,
        exit_code=_int(report, "exit_code"),
        report=json.loads(json.dumps(report, default=str)),  # what JSON cannot hold: its str
        created_at=utcnow(),
    )


def save_reports(session: Session, reports: Sequence[Report]) -> int:
    """Insert the reports not yet ingested, with their fingerprints and entries' last use."""
    now = utcnow()
    by_id = {r.report_id: r for r in reports}
    fresh = set(by_id) - existing_keys(session, restore_reports.c.report_id, by_id)
    new = sorted((by_id[k] for k in fresh), key=lambda r: (r.time, r.report_id))  # oldest first
    if not new:
        return 0
    fps = {r.fingerprint.key: fingerprint_row(r.fingerprint, min(r.time, now))
           for r in new if r.fingerprint is not None}
    insert_if_absent(session, fingerprints, [fps[k] for k in sorted(fps)])
    stmt = (dialect_insert(session)(restore_reports)
            .on_conflict_do_nothing(index_elements=["report_id"]))
    added: list[dict[str, Any]] = []
    for r in new:
        row = restore_report_row(r.to_json()) | {"report_id": r.report_id,
                                                  "created_at": min(r.time, now)}
        inserted = session.execute(stmt.values(row).returning(restore_reports.c.id))
        if inserted.all():  # no row back: another ingester has it
            added.append(row)
    restores_recorded(session, added)
    inserted_ids = {row["report_id"] for row in added}
    last_use: dict[str, datetime] = {}
    counts: Counter[str] = Counter()  # per entry key, the ok or partial reports that found it
    for r in new:
        if r.status == "failed":
            continue
        when = min(r.time, now)  # a clock ahead of ours does not set a future last use
        for key in r.entries:
            last_use[key] = max(last_use.get(key, when), when)
        if r.report_id in inserted_ids:  # only reports this session inserted: none counts twice
            counts.update(set(r.entries))
    e = entries.c
    _update_per_value(session, last_use, lambda when: update(entries).where(
        e.last_used_at.is_(None) | (e.last_used_at < when)).values(last_used_at=when))
    _update_per_value(session, counts, lambda n: update(entries).values(
        restore_count=e.restore_count + n))
    return len(added)


def restores_recorded(session: Session, rows: Sequence[Mapping[str, Any]]) -> None:
    aggregates.restores_added(session, [
        (r["created_at"], r["exit_code"], r["cells_restored"], r["seconds"], r["bytes_fetched"],
         r["matrix"], r["fingerprint_key"]) for r in rows])


def _update_per_value(session: Session, values: Mapping[str, Any],
                      statement: Callable[[Any], Any]) -> None:
    """One UPDATE per distinct value."""
    by_value: dict[Any, list[str]] = {}
    for key, value in values.items():
        by_value.setdefault(value, []).append(key)
    for value, keys in sorted(by_value.items()):
        for part in chunks(sorted(keys)):
            session.execute(statement(value).where(entries.c.entry_key.in_(part)))
