"""Coverage of any cells on an open index, from the engine's own parts: its reads
(``read_facts``, at the index's lease clock) and its rules (``build_coverage``): the given
fingerprints, then every one with an entry, a failure or a live lease for the cells, then
``keys``. The tests' way to the engine for cells no matrix declares (the face call,
``neffcache.coverage``, takes a matrix file or a registered name)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection

from neffcache.fingerprint import Fingerprint
from neffcache.index import CoverageReport, Index
from neffcache.index.coverage_engine.reads import Scope, find_fingerprints, read_facts
from neffcache.index.coverage_engine.rules import build_coverage
from neffcache.index.listing import Reader
from neffcache.index.ops_values import CoverageColumn, severity
from neffcache.index.sqla_reader import SqlaReader
from neffcache.matrix import Cell


def by_severity(columns: Iterable[CoverageColumn]) -> list[CoverageColumn]:
    return sorted(columns, key=severity)


def scope_of_keys(keys: Sequence[str]) -> Scope:
    return ("keys", keys)


def scope_of_matrix(matrix_id: int) -> Scope:
    return ("matrix", matrix_id)


def find_fingerprint_keys(reader: Reader, prefix: str) -> list[str]:
    """Up to 10 fingerprint keys starting with the hex ``prefix``, in order."""
    return list(find_fingerprints(reader, prefix))


def coverage_of(ix: Index, cells: Sequence[Cell], fingerprints: Sequence[Fingerprint] = (),
                keys: Sequence[str] = ()) -> CoverageReport:
    with ix.connection() as conn:
        facts = read_facts(SqlaReader(conn), scope_of_keys(sorted({c.key for c in cells})),
                           ix.now(conn), named=keys)
    return build_coverage(cells, fingerprints, facts)


def matrix_entry_pairs(conn: Connection, matrix_id: int) -> Any:
    """(cell key, fingerprint key) of every entry for a cell of a matrix version (on
    Postgres a LATERAL probe per cell: ``statements._entries``)."""
    from neffcache.index.coverage_engine import statements

    stmt = statements.build("cov_entries", conn.dialect.name,
                            (("details", False), ("scope", "matrix")))
    return stmt.params(matrix_id=matrix_id)
