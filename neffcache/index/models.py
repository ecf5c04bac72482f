"""The index's tables as SQLAlchemy 2 typed models; ORM rows never leave ``neffcache.index``.

    fingerprints   key, backend, fields
    cells          key, readable id, pipeline, mode, shape, batch, tp, full JSON
    entries        one per (cell, fingerprint): where, how big, how long it took, verified?
    blobs          sha256 -> size (identical files across entries counted once)
    entry_files    an entry's files: position, root, path, sha256, size, mode
    precompile_runs / cell_failures      precompile attempts and the cells that failed
    restore_reports                      what each restore fetched, skipped or missed (one row
                                         per report object, unique by report_id)
    matrices / matrix_cells              registered matrix files and their cells
    cell_claims    the work queue of ``precompile --claim``: one row per (cell, fingerprint)
                   still to warm, with the lease of the worker warming it (if any)
    coverage_counts / fingerprint_counts / restore_counts / report_fingerprints
                   aggregates kept up to date by every write (``neffcache.index.aggregates``)
                   so the ops surface never reads whole tables per request
    index_changes  one row: a counter every write transaction raises (triggers on every
                   table, migration 0009), so a reader knows cheaply whether anything changed

Every constraint and index is named by ``NAMING_CONVENTION`` so migrations stay portable.
Timestamps are stored in UTC.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from neffcache.index.tables import KEY, UTC_TS

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}



class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON, datetime: UTC_TS}


class FingerprintRow(Base):
    __tablename__ = "fingerprints"

    key: Mapped[str] = mapped_column(String(KEY), primary_key=True)
    backend: Mapped[str] = mapped_column(String(32))
    fields: Mapped[dict[str, Any]]
    first_seen_at: Mapped[datetime]


class CellRow(Base):
    __tablename__ = "cells"
    __table_args__ = (Index(None, "id"), Index(None, "pipeline", "mode"))

    key: Mapped[str] = mapped_column(String(KEY), primary_key=True)
    id: Mapped[str] = mapped_column(String(255))
    pipeline: Mapped[str] = mapped_column(String(64))
    mode: Mapped[str] = mapped_column(String(16))
    height: Mapped[int]
    width: Mapped[int]
    batch: Mapped[int]
    tp: Mapped[int]
    json: Mapped[dict[str, Any]]


class EntryRow(Base):
    __tablename__ = "entries"
    __table_args__ = (
        UniqueConstraint("cell_key", "fingerprint_key"),
        # Covering: coverage reads a matrix's entries from this index alone (migration 0006).
        Index(None, "cell_key", "fingerprint_key", "entry_key", "total_bytes"),
        Index(None, "fingerprint_key"),
        Index(None, "created_at"),
        # A cell's entries newest first: ``ls --cell GLOB`` reads each matching cell's newest
        # through it, whatever the rows' age (migration 0008).
        Index(None, "cell_key", "created_at", "entry_key"),
        Index(None, "last_used_at"),
        # The verified few: the grid's warm marks for a page of cells (migration 0007).
        Index("ix_entries_verified", "cell_key", "fingerprint_key", "verified_status",
              sqlite_where=text("verified_status IS NOT NULL"),
              postgresql_where=text("verified_status IS NOT NULL")),
    )

    entry_key: Mapped[str] = mapped_column(String(KEY), primary_key=True)
    cell_key: Mapped[str] = mapped_column(ForeignKey("cells.key"))
    fingerprint_key: Mapped[str] = mapped_column(ForeignKey("fingerprints.key"))
    store_url: Mapped[str] = mapped_column(String(1024))
    total_bytes: Mapped[int] = mapped_column(BigInteger)
    file_count: Mapped[int]
    compile_seconds: Mapped[float | None]
    producer: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]
    recorded_at: Mapped[datetime]
    verified_status: Mapped[str | None] = mapped_column(String(16))
    verified_at: Mapped[datetime | None]
    # The newest restore report (ingested from the store) that found this entry.
    last_used_at: Mapped[datetime | None]
    # How many ingested ok/partial restore reports found this entry.
    restore_count: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    # The key id that signed the entry's manifest (null: unsigned; migration 0009).
    signed_by: Mapped[str | None] = mapped_column(String(16))


class BlobRow(Base):
    __tablename__ = "blobs"

    sha256: Mapped[str] = mapped_column(String(KEY), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)


class EntryFileRow(Base):
    __tablename__ = "entry_files"
    __table_args__ = (Index(None, "sha256"),)

    entry_key: Mapped[str] = mapped_column(
        ForeignKey("entries.entry_key", ondelete="CASCADE"), primary_key=True)
    # Place in the manifest's (root, path)-sorted file list; paths may be too long for a key.
    position: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    root: Mapped[str] = mapped_column(String(32))
    path: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(ForeignKey("blobs.sha256"))
    size: Mapped[int] = mapped_column(BigInteger)
    mode: Mapped[int]


class PrecompileRunRow(Base):
    __tablename__ = "precompile_runs"
    __table_args__ = (Index(None, "started_at"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    host: Mapped[str] = mapped_column(String(255))
    fingerprint_key: Mapped[str] = mapped_column(ForeignKey("fingerprints.key"))
    matrix_name: Mapped[str] = mapped_column(String(255))
    cells_ok: Mapped[int | None]
    cells_failed: Mapped[int | None]
    cells_cancelled: Mapped[int | None]  # set when the run was stopped (migration 0009)


class CellFailureRow(Base):
    __tablename__ = "cell_failures"
    __table_args__ = (Index(None, "cell_key", "fingerprint_key"), Index(None, "run_id"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str | None] = mapped_column(
        ForeignKey("precompile_runs.id", ondelete="SET NULL"))
    cell_key: Mapped[str] = mapped_column(ForeignKey("cells.key"))
    fingerprint_key: Mapped[str] = mapped_column(ForeignKey("fingerprints.key"))
    exit_status: Mapped[int | None]
    seconds: Mapped[float]
    log_tail: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]


class RestoreReportRow(Base):
    __tablename__ = "restore_reports"
    __table_args__ = (Index(None, "created_at"), Index(None, "fingerprint_key"),
                      Index(None, "report_id", unique=True))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    # The report object's id (reports/<date>/<report-id>.json); ingesting it twice adds nothing.
    # NULL for reports recorded before reports went through the store.
    report_id: Mapped[str | None] = mapped_column(String(128))
    host: Mapped[str] = mapped_column(String(255))
    fingerprint_key: Mapped[str] = mapped_column(String(KEY))  # this host's; may have no entry
    matrix: Mapped[str] = mapped_column(String(255))
    cells_restored: Mapped[int]
    cells_missing: Mapped[int]
    restored: Mapped[list[Any]]
    missing: Mapped[list[Any]]
    files_fetched: Mapped[int]
    files_skipped: Mapped[int]
    bytes_fetched: Mapped[int] = mapped_column(BigInteger)
    seconds: Mapped[float]
    exit_code: Mapped[int]
    report: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]


class MatrixRow(Base):
    __tablename__ = "matrices"
    __table_args__ = (UniqueConstraint("name", "digest"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(255))
    digest: Mapped[str] = mapped_column(String(KEY))
    backend: Mapped[str] = mapped_column(String(32))
    toml: Mapped[str] = mapped_column(Text)
    registered_at: Mapped[datetime]


class MatrixCellRow(Base):
    __tablename__ = "matrix_cells"
    __table_args__ = (Index(None, "cell_key"),)

    matrix_id: Mapped[int] = mapped_column(
        ForeignKey("matrices.id", ondelete="CASCADE"), primary_key=True)
    cell_key: Mapped[str] = mapped_column(ForeignKey("cells.key"), primary_key=True)
    position: Mapped[int]


class CellClaimRow(Base):
    """A (cell, fingerprint) queued for ``precompile --claim``; while ``holder`` is set and
    ``expires_at`` is in the future (database clock), that worker holds the lease. The row is
    deleted once the entry is published; ``attempts`` counts claims across the fleet."""

    __tablename__ = "cell_claims"
    __table_args__ = (Index(None, "fingerprint_key", "expires_at"), Index(None, "matrix_name"),
                      Index(None, "expires_at"))

    cell_key: Mapped[str] = mapped_column(ForeignKey("cells.key"), primary_key=True)
    fingerprint_key: Mapped[str] = mapped_column(ForeignKey("fingerprints.key"),
                                                 primary_key=True)
    matrix_name: Mapped[str] = mapped_column(String(255))
    position: Mapped[int]  # the cell's place in its matrix: claims go in matrix order
    attempts: Mapped[int]
    queued_at: Mapped[datetime]
    holder: Mapped[str | None] = mapped_column(String(32))  # the lease's random token
    host: Mapped[str | None] = mapped_column(String(255))  # "hostname pid N", for people
    claimed_at: Mapped[datetime | None]
    heartbeat_at: Mapped[datetime | None]
    expires_at: Mapped[datetime | None]


class CoverageCountRow(Base):
    """Per registered matrix version x fingerprint: cells with an entry (``ready``) and cells
    whose warm-up failed with no entry (``failed``). Missing = the version's cells - both."""

    __tablename__ = "coverage_counts"
    __table_args__ = (Index(None, "fingerprint_key"),)

    matrix_id: Mapped[int] = mapped_column(
        ForeignKey("matrices.id", ondelete="CASCADE"), primary_key=True)
    fingerprint_key: Mapped[str] = mapped_column(String(KEY), primary_key=True)
    ready: Mapped[int] = mapped_column(BigInteger)
    failed: Mapped[int] = mapped_column(BigInteger)


class FingerprintCountRow(Base):
    """Entries and their bytes per fingerprint."""

    __tablename__ = "fingerprint_counts"

    fingerprint_key: Mapped[str] = mapped_column(String(KEY), primary_key=True)
    entries: Mapped[int] = mapped_column(BigInteger)
    total_bytes: Mapped[int] = mapped_column(BigInteger)


class RestoreCountRow(Base):
    """Restore reports per hour (UTC, by report time), exit code, whether any cell was
    restored, and duration bucket (index into DURATION_BUCKETS; len = over the last bound)."""

    __tablename__ = "restore_counts"

    period_start: Mapped[datetime] = mapped_column(primary_key=True)
    exit_code: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    restored_any: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    bucket: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    restores: Mapped[int] = mapped_column(BigInteger)
    seconds_sum: Mapped[float]
    bytes_sum: Mapped[int] = mapped_column(BigInteger)


class ReportFingerprintRow(Base):
    """A fingerprint some host restored a matrix with (from restore reports), built for or
    not: the dashboard shows it as a column even at 0 % coverage."""

    __tablename__ = "report_fingerprints"

    matrix: Mapped[str] = mapped_column(String(255), primary_key=True)
    fingerprint_key: Mapped[str] = mapped_column(String(KEY), primary_key=True)
    reports: Mapped[int] = mapped_column(BigInteger)
    last_seen_at: Mapped[datetime]


class IndexChangeRow(Base):
    """The change counter (one row, id 1): raised by a trigger on every other table once per
    write transaction (migration 0009; the triggers are not part of these models)."""

    __tablename__ = "index_changes"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    version: Mapped[int] = mapped_column(BigInteger)
