"""Coverage, the one engine: ``coverage``, ``stream_coverage`` and ``find_fingerprints``."""

from __future__ import annotations

import contextlib
import fnmatch
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import starmap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neffcache.config import read_settings
from neffcache.errors import (
    CacheMissError,
    ExitRule,
    MatrixError,
    UsageError,
)
from neffcache.fingerprint import Fingerprint, collect_fingerprint
from neffcache.hashing import is_sha256
from neffcache.index.coverage_engine.reads import (
    coverage_cells,
    database_now,
    matrix_cell_refs,
    matrix_versions,
    plan_coverage,
    read_facts,
)
from neffcache.index.coverage_engine.reads import find_fingerprints as _find_fingerprints
from neffcache.index.coverage_engine.rules import (
    RowLines,
    Tally,
    build_coverage,
    cell_ids_and_keys,
    coverage_row,
)
from neffcache.index.readers import open_reader
from neffcache.index.values import READY, Closing, CoverageColumn, CoverageReport, CoverageRow
from neffcache.request_rules import checked_request

if TYPE_CHECKING:
    from neffcache.index.api import Index
    from neffcache.index.coverage_engine.reads import Cell_
    from neffcache.index.coverage_engine.rules import CoveragePlan
    from neffcache.index.listing import Reader
    from neffcache.matrix import Cell

HOST = "host"  # in CoverageRequest.fingerprints: this host's fingerprint


@checked_request
class CoverageRequest:
    """What ``coverage`` reads (the flags of ``neffcache coverage``).

    matrix: a matrix file (a path, or a name ending in .toml or holding a /), else the name
        of a matrix registered in the index (its current version).
    cells: cell id globs; only matching cells (all cells when empty).
    fingerprints: columns to show, each a key, a unique prefix of one, ``"host"`` (this
        host's fingerprint, taken with ``python``) or a Fingerprint. A full key the index
        does not know (nothing built for it yet) is a column with every cell missing.
        Empty: this host's and every fingerprint with an entry, a failure or a live lease
        for these cells.
    check: judge the cells (``CoverageResult.error``): every selected cell must be ready for
        every given fingerprint (this host's when none is given).
    python: the interpreter whose packages this host's fingerprint describes (None: as the
        CLI would: NEFFCACHE_PYTHON > config file > the running one).
    index: the index URL (None: NEFFCACHE_INDEX > config file > the embedded default,
        created on first use).
    """

    matrix: str | Path
    cells: Sequence[str] = ()
    fingerprints: Sequence[str | Fingerprint] = ()
    check: bool = False
    python: str | None = None
    index: str | None = None


class _Checked(ExitRule):
    """What ``CoverageResult`` and ``CoverageStream`` share: the head of their document, and
    ``error()`` and the check's document from ``not_ready`` (None: no check)."""

    __slots__ = ()
    matrix: str
    backend: str
    here: Fingerprint | None
    not_ready: tuple[CoverageRow, ...] | None

    def error(self) -> CacheMissError | None:
        """CacheMissError (exit 3) naming up to three cells when a checked cell is not ready."""
        if not self.not_ready:
            return None
        n = len(self.not_ready)
        ids = ", ".join(sorted({r.cell_id for r in self.not_ready})[:3])
        return CacheMissError(f"{n} cell x fingerprint pair(s) of {self.matrix} are "
                              f"not ready: {ids}{', ...' if n > 3 else ''}",
                              hint="neffcache precompile MATRIX (on a build host)")

    def _head_json(self) -> dict[str, Any]:
        return {"matrix": self.matrix, "backend": self.backend,
                "here": self.here.key if self.here else None}

    def _check_json(self) -> dict[str, Any]:
        if self.not_ready is None:
            return {}
        return {"check": {"ok": not self.not_ready, "not_ready": [
            {"cell_id": r.cell_id, "fingerprint_key": r.fingerprint_key, "status": r.status}
            for r in self.not_ready]}}


@dataclass(frozen=True, slots=True)
class CoverageResult(_Checked):
    """A coverage report of one matrix, and the check when one was asked for.

    matrix: the matrix file as given, or the registered matrix's name; backend: its backend.
    here: this host's fingerprint when it was taken (no --fingerprint, or ``host``).
    report: cells x fingerprints with statuses and counts (``CoverageReport``).
    not_ready: with ``check``, the rows of the checked fingerprints that are not ready
        (None without ``check``).
    ``exit_code``: 0, or 3 (CacheMissError) when a checked cell is not ready.
    """

    matrix: str
    backend: str
    here: Fingerprint | None
    report: CoverageReport
    cell_globs: tuple[str, ...] = ()
    not_ready: tuple[CoverageRow, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        return {**self._head_json(), **self.report.to_json(), **self._check_json()}


def coverage(request: CoverageRequest) -> CoverageResult:
    """Every cell of a matrix x every relevant fingerprint, with statuses and counts.

    Raises MatrixError (exit 2) for a matrix neither a file nor registered, UsageError (2) for a
    malformed --fingerprint or a prefix naming no single fingerprint, UnavailableError (6) /
    SchemaOutdatedError (7) for the index. The check's outcome is in the result, not raised."""
    settings = read_settings(os.environ, index=request.index, python=request.python)
    with open_reader(settings) as reader:
        chosen = _choose(reader, request, settings.python)
        facts = read_facts(reader, ("keys", sorted({k for _, k in chosen.cells})),
                           database_now(reader), named=chosen.named)
    report = build_coverage(chosen.cells, chosen.given, facts,
                            only=chosen.order if request.fingerprints else None)
    keys = set(chosen.order)
    not_ready = tuple(r for r in report.rows if r.fingerprint_key in keys
                      and r.status != READY) if request.check else None
    return CoverageResult(chosen.source, chosen.backend, chosen.here, report,
                          tuple(request.cells), not_ready)


@dataclass(frozen=True, slots=True)
class _Chosen:
    source: str
    backend: str
    cells: tuple[tuple[str, str], ...]  # (id, key), distinct, in order
    here: Fingerprint | None
    given: list[Fingerprint]
    order: list[str]
    named: list[str]  # the keys of order with no Fingerprint: nothing built for them yet


def _choose(reader: Reader, request: CoverageRequest, python: str | None) -> _Chosen:
    source, backend, all_cells = _load_cells(reader, str(request.matrix))
    pats = [p for p in request.cells if p]
    cells = tuple(c for c in cell_ids_and_keys(all_cells)
                  if not pats or any(fnmatch.fnmatchcase(c[0], p) for p in pats))
    here, given, order = _fingerprints(reader, backend, tuple(request.fingerprints), python)
    known = {fp.key for fp in given}
    return _Chosen(source, backend, cells, here, given, order,
                   [k for k in order if k not in known])


class CoverageStream(_Checked, Closing):
    """``coverage`` as it is read, in flat memory (``coverage --json``/``--jsonl``): rows as
    ``rows()`` yields them (iterate once); ``fingerprints``, ``not_ready`` and ``error()`` are
    known after the rows. Holds an index connection: ``close()`` it, or use ``with``."""

    __slots__ = ("_cells", "_check", "_closer", "_counts", "_plan", "backend", "cells",
                 "fingerprints", "here", "matrix", "not_ready")

    def __init__(self, chosen: _Chosen, plan: CoveragePlan, cells: Iterator[Cell_],
                 check: bool, closer: contextlib.ExitStack) -> None:
        self.matrix, self.backend, self.here = chosen.source, chosen.backend, chosen.here
        self.cells, self._plan = plan.cells, plan
        self._counts, self._cells, self._closer = Tally(plan.keys), cells, closer
        self._check = set(chosen.order) if check else None
        self.fingerprints: tuple[CoverageColumn, ...] | None = None
        self.not_ready: tuple[CoverageRow, ...] | None = None

    def head_json(self) -> dict[str, Any]:
        return {**self._head_json(), "cells": [{"id": i, "key": k} for i, k in self.cells]}

    def rows(self) -> Iterator[CoverageRow]:
        """Every cell x fingerprint, row-major by cell; when done, sets ``fingerprints``."""
        return starmap(coverage_row, self._tally())

    def lines(self, encode: Callable[[Any], str]) -> Iterator[str]:
        """``encode(row.to_json())`` of each of ``rows()``, without building most rows."""
        return starmap(RowLines(encode).line, self._tally())

    def _tally(self) -> Iterator[Cell_]:
        missed: list[CoverageRow] = []
        add, check = self._counts.add, self._check
        for item in self._cells:
            cell_id, cell_key, fp_key, status, _ = item
            add(fp_key, status)
            if check is not None and status != READY and fp_key in check:
                missed.append(CoverageRow(cell_id, cell_key, fp_key, status))
            yield item
        self.fingerprints = self._plan.columns(self._counts)
        if check is not None:
            self.not_ready = tuple(missed)

    def tail_json(self) -> dict[str, Any]:
        return {"fingerprints": [f.report_json() for f in self.fingerprints or ()],
                **self._check_json()}

    def close(self) -> None:
        self._closer.close()


def stream_coverage(request: CoverageRequest) -> CoverageStream:
    """``coverage`` as a stream (``CoverageStream``), a batch of cells read at a time.
    Raises what ``coverage`` raises, before any row is read."""
    settings = read_settings(os.environ, index=request.index, python=request.python)
    with contextlib.ExitStack() as stack:  # closed here if anything raises before the rows
        reader = open_reader(settings, snapshot=True)
        stack.callback(reader.close)
        chosen = _choose(reader, request, settings.python)
        now = database_now(reader)
        plan = plan_coverage(reader, chosen.cells, chosen.given, now, named=chosen.named,
                             only=chosen.order if request.fingerprints else None)
        cells = coverage_cells(reader, plan, now)
        return CoverageStream(chosen, plan, cells, request.check, stack.pop_all())


def _load_cells(reader: Reader, matrix: str
                ) -> tuple[str, str, Sequence[Cell] | Sequence[tuple[str, str]]]:
    """(source, backend, cells) of a matrix file, else of a registered matrix."""
    from neffcache.matrix_io import load_matrix

    if Path(matrix).exists() or "/" in matrix or matrix.endswith(".toml"):  # a file
        spec = load_matrix(matrix)
        return spec.source, spec.backend, tuple(spec.cells)
    current = [v for v in matrix_versions(reader, matrix) if v.current]
    if not current:
        raise MatrixError(f"{matrix}: no such matrix file, and no matrix of that name is "
                          f"registered in the index",
                          hint="neffcache matrix register FILE")
    return matrix, current[0].backend, matrix_cell_refs(reader, current[0].id)


def find_fingerprints(index: Index, prefix: str) -> dict[str, Fingerprint]:
    """Fingerprints in ``index`` whose key starts with ``prefix`` (hex), at most 10."""
    from neffcache.index.sqla_reader import SqlaReader

    with index.connection() as conn:
        return _find_fingerprints(SqlaReader(conn), prefix)


def _fingerprints(reader: Reader, backend: str, wanted: Sequence[str | Fingerprint],
                  python: str | None
                  ) -> tuple[Fingerprint | None, list[Fingerprint], list[str]]:
    """(this host's, the ones to show first, the columns' keys); UsageError for a bad prefix."""
    here = (collect_fingerprint(backend, os.environ, python=python)
            if not wanted or HOST in wanted else None)
    given: list[Fingerprint] = []
    order: list[str] = []
    for w in wanted or (HOST,):
        fp = here if w == HOST else w
        if isinstance(fp, str):
            key = fp.strip().lower()
            found = _find_fingerprints(reader, key)
            if not found and is_sha256(key):
                order.append(key)  # a fingerprint nothing has been built for yet
                continue
            if len(found) != 1:
                what = "no fingerprint" if not found else f"{len(found)} fingerprints"
                raise UsageError(f"--fingerprint {w}: {what} in the index with that key "
                                 f"prefix (expected a key or a unique prefix of one, or "
                                 f"'host')",
                                 hint=None if found else "a fingerprint nothing has been "
                                 "built for yet: give its full 64-hex key "
                                 "(`neffcache fingerprint` on a host that has it prints it)")
        else:
            assert fp is not None
            found = {fp.key: fp}
        given.extend(found.values())
        order.extend(found)
    return here, given, order
