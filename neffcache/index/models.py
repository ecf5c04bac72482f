"""ORM rows mapped onto the Core tables of ``neffcache.index.tables``, for tests, tools, Alembic."""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import Index, Table, text
from sqlalchemy.orm import DeclarativeBase

from neffcache.index import tables

# The verified few: the grid's warm marks for a page of cells (migration 0007). Declared here,
# not in ``tables``: its dialect options import the Postgres dialect (~70 ms of start-up).
Index("ix_entries_verified", tables.entries.c.cell_key, tables.entries.c.fingerprint_key,
      tables.entries.c.verified_status,
      sqlite_where=text("verified_status IS NOT NULL"),
      postgresql_where=text("verified_status IS NOT NULL"))


class Base(DeclarativeBase):
    metadata = tables.metadata
    __table__: ClassVar[Table]

    def __init_subclass__(cls, **kw: Any) -> None:
        cls.__tablename__ = cls.__table__.name
        super().__init_subclass__(**kw)


class EntryRow(Base):
    __table__ = tables.entries


class BlobRow(Base):
    __table__ = tables.blobs


class EntryFileRow(Base):
    __table__ = tables.entry_files


class PrecompileRunRow(Base):
    __table__ = tables.precompile_runs


class CellFailureRow(Base):
    __table__ = tables.cell_failures


class RestoreReportRow(Base):
    __table__ = tables.restore_reports
