"""ORM rows of the claim queue and the aggregates, for the tests that read them whole."""

from __future__ import annotations

from neffcache.index import tables
from neffcache.index.models import Base

ALL = tuple(tables.metadata.tables.values())  # every table of the schema


class CellClaimRow(Base):
    __table__ = tables.cell_claims


class CoverageCountRow(Base):
    __table__ = tables.coverage_counts


class FingerprintCountRow(Base):
    __table__ = tables.fingerprint_counts


class RestoreCountRow(Base):
    __table__ = tables.restore_counts


class ReportFingerprintRow(Base):
    __table__ = tables.report_fingerprints
