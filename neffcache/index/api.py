"""``open_index`` and the ``Index`` handle: the only way the rest of neffcache talks to SQL."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, exc, insert, select, text

from neffcache.index import listing
from neffcache.index.compiled import StatementCache
from neffcache.index.engine import (
    WRITE,
    current_engine,
    normalise_url,
    read_schema_state,
    translate_errors,
)
from neffcache.index.sqla_reader import SqlaReader
from neffcache.index.tables import entries, index_changes, restore_reports
from neffcache.index.values import (
    ClaimResult,
    Closing,
    EntrySummary,
    Lease,
    LiveLease,
    SchemaState,
)

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from neffcache.fingerprint import Fingerprint
    from neffcache.index import claims as _claims
    from neffcache.index import record
    from neffcache.index.coverage_engine import grid as _coverage
    from neffcache.index.ops_values import CoverageGrid
    from neffcache.manifest import Manifest
    from neffcache.matrix import Cell
    from neffcache.reports import Report


class _OnFirstUse:
    """Imports a module at first attribute read (``LazyLoader``: not thread-safe < 3.12)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)


if not TYPE_CHECKING:
    # ``ls``, ``coverage`` and ``push`` start without the ORM; ``ls`` without coverage.
    _claims = _OnFirstUse("neffcache.index.claims")
    _coverage = _OnFirstUse("neffcache.index.coverage_engine.grid")
    record = _OnFirstUse("neffcache.index.record")

ENTRY_BATCH = 200  # entries recorded per transaction (a short write lock, few round trips)
KEY_PAGE = 10_000  # entry keys per page when every key must be visited (reindex's prune)


class Index(Closing):
    """An open index; ``close()`` it, or use it as a context manager."""

    def __init__(self, engine: Engine, url: str) -> None:
        self._engine = engine
        self._writer = engine.execution_options(**WRITE)
        self.url = url
        # Where lease times come from: None = the database's clock; tests set a fake clock.
        self.lease_clock: Callable[[], datetime] | None = None
        # Where ``iter_entries`` keeps compiled statements for the bare driver (None: nowhere).
        self.statements: StatementCache | None = None

    @property
    def engine(self) -> Engine:
        """For event listeners and bulk tools; queries use the sessions below."""
        return self._engine

    @contextlib.contextmanager
    def read_session(self) -> Iterator[Session]:
        """An ORM session for reads; driver errors become UnavailableError/SchemaOutdatedError."""
        from sqlalchemy.orm import Session

        with translate_errors(self.url), Session(self._engine) as session:
            yield session

    @contextlib.contextmanager
    def connection(self) -> Iterator[Connection]:
        with translate_errors(self.url), self._engine.connect() as conn:
            yield conn

    @contextlib.contextmanager
    def write_session(self) -> Iterator[Session]:
        """One write transaction, committed when the block ends; SQLite locks at BEGIN."""
        from sqlalchemy.orm import Session

        with translate_errors(self.url), Session(self._writer) as session, session.begin():
            yield session

    @contextlib.contextmanager
    def _write_connection(self) -> Iterator[Connection]:
        with translate_errors(self.url), self._writer.begin() as conn:
            yield conn

    def refresh_statistics(self, tables: Sequence[str]) -> None:
        """``VACUUM (ANALYZE)`` ``tables`` after a bulk write on PostgreSQL: without fresh
        statistics and visibility map, a million-row ``entries`` read took 353 ms, not 23 ms."""
        if self._engine.dialect.name != "postgresql":
            return
        with translate_errors(self.url), self._writer.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")  # VACUUM: no txn
            for table in tables:
                conn.execute(text("VACUUM (ANALYZE) "
                                  + conn.dialect.identifier_preparer.quote(table)))

    def now(self, conn: Connection | Session) -> datetime:
        """``lease_clock()`` when set (tests), else the database's clock."""
        if self.lease_clock:
            return self.lease_clock()
        from neffcache.index.coverage_engine.reads import database_now

        return database_now(SqlaReader(conn if isinstance(conn, Connection)
                                       else conn.connection()))

    def close(self) -> None:
        self._engine.dispose()

    def schema_state(self) -> SchemaState:
        return read_schema_state(self._engine, self.url)

    def change_count(self) -> int:
        """Write transactions committed (raised by triggers): equal counts mean no change."""
        with self.connection() as conn:
            return int(conn.execute(select(index_changes.c.version)
                                    .where(index_changes.c.id == 1)).scalar_one())

    def record_entry(self, manifest: Manifest, store_url: str) -> bool:
        """Index a published entry; idempotent. True if it was not indexed before."""
        return self.record_entries([manifest], store_url) == 1

    def record_entries(self, manifests: Sequence[Manifest], store_url: str) -> int:
        """ENTRY_BATCH entries per transaction; returns how many were new."""
        return sum(self._record_batch(part, store_url)
                   for part in record.chunks(list(manifests), ENTRY_BATCH))

    def _record_batch(self, manifests: Sequence[Manifest], store_url: str) -> int:
        with contextlib.suppress(exc.IntegrityError), self._write_connection() as conn:
            return record.save_entries(conn, manifests, store_url)
        # Another writer indexed some of them between our check and our insert: retry once;
        # the existing ones are then skipped.
        with self._write_connection() as conn:
            return record.save_entries(conn, manifests, store_url)

    def record_failure(self, run_id: str | None, cell: Cell, fingerprint: Fingerprint,
                       exit_status: int | None, seconds: float, log_tail: str) -> None:
        with self.write_session() as s:
            record.save_failure(s, run_id, cell, fingerprint, exit_status, seconds, log_tail)

    def start_run(self, host: str, fingerprint: Fingerprint, matrix_name: str) -> str:
        """Returns the run's id."""
        with self.write_session() as s:
            return record.save_run_start(s, host, fingerprint, matrix_name)

    def finish_run(self, run_id: str, ok: int, failed: int,
                   cancelled: int | None = None) -> None:
        """``cancelled``: how many cells the run's stop ended (None: not stopped)."""
        with self.write_session() as s:
            record.save_run_finish(s, run_id, ok, failed, cancelled)

    def record_restore(self, report: Mapping[str, Any]) -> None:
        """``RestoreResult.to_json()`` plus ``host`` and ``matrix``, kept whole as JSON too."""
        with self.write_session() as s:
            row = record.restore_report_row(report)
            s.execute(insert(restore_reports), [row])
            record.restores_recorded(s, [row])

    def record_reports(self, reports: Sequence[Report]) -> int:
        """Ingest validated restore reports; idempotent by report id. Returns how many were new."""
        if not reports:
            return 0
        with self.write_session() as s:
            return record.save_reports(s, reports)

    def known_report_ids(self, report_ids: Sequence[str]) -> set[str]:
        with self.read_session() as s:
            return record.existing_keys(s, restore_reports.c.report_id, report_ids)

    def record_verification(self, entry_key: str, status: str,
                            at: datetime | None = None) -> bool:
        """A verdict older than the one recorded is not kept; False if unknown or older."""
        with self._write_connection() as conn:
            return record.save_verification(conn, entry_key, status, at)

    def remove_entries(self, entry_keys: Sequence[str]) -> int:
        """Forget entries (not the store's manifests); returns how many were removed."""
        with self._write_connection() as conn:
            return record.delete_entries(conn, entry_keys)

    def queue_claims(self, matrix_name: str, cells: Sequence[Cell], fingerprint: Fingerprint,
                     declared_keys: Sequence[str]) -> int:
        """Queue these cells, dropping rows of undeclared ones; returns how many were dropped."""
        with self.write_session() as s:
            now = self.now(s)
            removed = _claims.remove_undeclared(s, matrix_name, declared_keys, now)
            _claims.queue_cells(s, matrix_name, cells, fingerprint, now)
            return removed

    def claim_next(self, cell_keys: Sequence[str], fingerprint_key: str, *, holder: str,
                   host: str, lease_seconds: float, max_attempts: int) -> ClaimResult:
        """Claim the next claimable cell, after failing leases expired on their last attempt."""
        with self.write_session() as s:
            now = self.now(s)
            _claims.fail_exhausted(s, cell_keys, fingerprint_key, max_attempts, now)
            return _claims.claim_next(s, cell_keys, fingerprint_key, holder=holder, host=host,
                                      lease_seconds=lease_seconds, max_attempts=max_attempts,
                                      now=now)

    def renew_lease(self, lease: Lease, lease_seconds: float) -> bool:
        with self.write_session() as s:
            return _claims.renew(s, lease, lease_seconds, self.now(s))

    def release_done(self, lease: Lease) -> None:
        with self.write_session() as s:
            _claims.release_done(s, lease)

    def release_failed(self, lease: Lease) -> bool:
        with self.write_session() as s:
            return _claims.release(s, lease)

    def release_cancelled(self, lease: Lease) -> bool:
        """Free the lease without spending an attempt; False if it was no longer ours."""
        with self.write_session() as s:
            return _claims.release(s, lease, give_back=True)

    def live_leases(self, limit: int = 500) -> list[LiveLease]:
        """Cells in progress anywhere, oldest claim first."""
        with self.connection() as conn:
            return [lease for _, lease in _claims.held_leases(conn, self.now(conn), limit)]

    def entries(self, cell_glob: str | None = None, fingerprint_key: str | None = None,
                limit: int | None = None, after: str | None = None) -> list[EntrySummary]:
        """Entries newest first; ``after``: continue after the entry of that cursor."""
        return list(self.iter_entries(cell_glob, fingerprint_key, limit, after))

    def iter_entries(self, cell_glob: str | None = None, fingerprint_key: str | None = None,
                     limit: int | None = None,
                     after: str | None = None) -> Iterator[EntrySummary]:
        """``entries`` as they are read, holding one connection until exhausted or closed."""
        with self.connection() as conn:
            try:
                yield from listing.iter_entries(SqlaReader(conn, self.statements), cell_glob,
                                                fingerprint_key, limit, after)
            finally:
                if self.statements is not None:
                    self.statements.save()

    def indexed_entry_keys(self, keys: Sequence[str]) -> set[str]:
        """Which of these entry keys are indexed (never reads every key)."""
        with self.connection() as conn:
            return record.existing_keys(conn, entries.c.entry_key, keys)

    def entry_key_pages(self, size: int = KEY_PAGE) -> Iterator[list[str]]:
        """Entry keys in key order, a page per transaction (pages may be deleted in between)."""
        key, after = entries.c.entry_key, ""  # every key sorts after ""
        while True:
            with self.read_session() as s:
                page = list(s.scalars(select(key).where(key > after).order_by(key).limit(size)))
            if not page:
                return
            yield page
            after = page[-1]

    def restored_fingerprints(self, since: datetime) -> set[str]:
        """Fingerprints an ingested ok/partial report found entries of since ``since``."""
        with self.read_session() as s:
            return set(s.scalars(select(entries.c.fingerprint_key).distinct()
                                 .where(entries.c.last_used_at >= since)))

    def fingerprints(self, keys: Sequence[str]) -> dict[str, Fingerprint]:
        from neffcache.index.coverage_engine.reads import read_fingerprints

        with self.connection() as conn:
            return read_fingerprints(SqlaReader(conn), sorted(set(keys)))

    def matrix_coverage(self, name: str, *, version: int | None = None,
                        pattern: str | None = None, offset: int = 0,
                        limit: int | None = None) -> CoverageGrid:
        """A page of a registered matrix's grid; NotFoundError for an unknown name or version."""
        with self.connection() as conn:
            return _coverage.matrix_coverage(conn, self.now(conn), name, version=version,
                                             pattern=pattern, offset=offset, limit=limit)

    def coverage_summaries(self) -> list[CoverageGrid]:
        """Coverage counts (no rows) of every registered matrix's current version."""
        with self.connection() as conn:
            return _coverage.coverage_summaries(conn, self.now(conn))


def open_index(url: str, *, auto_upgrade: bool) -> Index:
    """Open the index at ``url``: with ``auto_upgrade`` create or migrate it, else refuse any
    other schema (SchemaOutdatedError); UnavailableError when unreachable."""
    url = normalise_url(url)
    return Index(current_engine(url, auto_upgrade=auto_upgrade), url)
