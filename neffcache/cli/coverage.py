"""``neffcache coverage MATRIX``: every cell of a matrix x every relevant fingerprint, with
its status (ready, in_progress, failed, missing), as a table or JSON."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import click

from neffcache.cli._common import (
    emit_json,
    format_table,
    index_option,
    json_option,
    python_option,
    settings_from,
)
from neffcache.cli._process import without_cyclic_gc

if TYPE_CHECKING:
    from neffcache.index.values import CoverageReport, CoverageRow


def _status_text(row: CoverageRow) -> str:
    if row.status == "failed":
        return "failed" if row.exit_status is None else f"failed({row.exit_status})"
    if row.status == "in_progress" and row.since is not None:
        return f"in_progress({row.host} since {row.since:%Y-%m-%d %H:%M:%S}Z)"
    return row.status


def render_coverage(report: CoverageReport) -> str:
    """A cell x fingerprint grid, then one summary line per fingerprint (pure)."""
    fps = report.fingerprints
    heads = ["CELL"] + [f"{fp.short}{'*' if fp.here else ''}" for fp in fps]
    n = len(fps)
    grid = [[cell_id] + [_status_text(report.rows[i * n + j]) for j in range(n)]
            for i, (cell_id, _key) in enumerate(report.cells)]
    summary = [[f"{fp.short}{'*' if fp.here else ''}", fp.backend, fp.ready, fp.in_progress,
                fp.failed, fp.missing] for fp in fps]
    parts = [format_table(heads, grid), "",
             format_table(["FINGERPRINT", "BACKEND", "READY", "IN PROGRESS", "FAILED",
                           "MISSING"], summary),
             "* = this host's fingerprint"]
    return "\n".join(parts)


def coverage_document(matrix_source: str, backend: str, here: str | None,
                      report: CoverageReport) -> dict[str, Any]:
    doc = {"matrix": matrix_source, "backend": backend, "here": here}
    doc.update(report.to_json())
    return doc


@click.command("coverage")
@click.argument("matrix", metavar="NAME|FILE")
@click.option("--cells", "cell_globs", metavar="GLOB", multiple=True,
              help="Only cells whose id matches this glob (repeatable).")
@click.option("--fingerprint", "fingerprints", metavar="KEY|host", multiple=True,
              help="Only this fingerprint's column: a key or a unique prefix of one (as "
                   "`coverage` and `ls` print them), or `host` for this host's (repeatable). "
                   "Default: this host's and every fingerprint with an entry, a failure or "
                   "a lease for these cells.")
@click.option("--check", is_flag=True,
              help="Exit 3 unless every selected cell is ready for every shown fingerprint "
                   "(this host's when no --fingerprint is given): a CI gate.")
@python_option
@index_option
@json_option
@without_cyclic_gc
def coverage(matrix: str, cell_globs: tuple[str, ...], fingerprints: tuple[str, ...],
             check: bool, python: str | None, index: str | None, as_json: bool) -> None:
    """Show which cells of a matrix are cached, for which fingerprints.

    NAME|FILE is a matrix file, or the name of a matrix registered in the index (`neffcache
    matrix register FILE`; `precompile` registers its matrix): its current version.
    Rows are the matrix's cells; columns are this host's fingerprint (marked *) and every
    other fingerprint with an entry or a failure for any of these cells. A status is
    `ready` (an entry exists), `in_progress(HOST since TIME)` (no entry yet; a `precompile
    --claim` worker on HOST holds a live lease on it, claimed at TIME, UTC), `failed(N)` (no
    entry, and the latest warm-up exited with N; its log tail is in the JSON) or `missing`
    (never warmed). Reads the index only.

    With --check the exit code says whether the cells are covered: 0 every selected cell is
    ready for every checked fingerprint, 3 some are not (listed on stderr).

    \b
    Examples:
      neffcache coverage matrix.toml
      neffcache coverage flux2-prod                      # a registered matrix, by name
      neffcache coverage matrix.toml --cells 'flux2-klein/compile/*'
      neffcache coverage flux2-prod --fingerprint 3fc2ffe4a216 --check   # CI gate
      neffcache coverage matrix.toml --fingerprint host --check --json
      neffcache coverage matrix.toml --json | jq '.fingerprints[] | {key, ready, missing}'
      neffcache coverage matrix.toml --python /opt/venv/bin/python   # * = that interpreter's

    JSON output: {"matrix", "backend", "here" (this host's fingerprint key, null when only
    given keys are shown), "cells": [{"id", "key"}], "fingerprints": [{"key", "backend",
    "fields", "here", "ready", "failed", "missing", "in_progress"}], "rows": [{"cell_id",
    "cell_key", "fingerprint_key", "status", "entry_key", "total_bytes", "exit_status",
    "log_tail", "failed_at", "host", "since", "lease_expires_at"}], "check" (with --check:
    {"ok", "not_ready": [{"cell_id", "fingerprint_key", "status"}]})}.
    """
    from neffcache.index import open_index
    from neffcache.index.coverage import only_fingerprints

    settings = settings_from(index=index, python=python)
    with open_index(settings.index_url, auto_upgrade=settings.index_is_embedded) as ix:
        source, backend, all_cells = _load_cells(ix, matrix)
        cells = _select(all_cells, cell_globs)
        here, given = _fingerprints(ix, backend, fingerprints, settings.python,
                                    host_default=not fingerprints)
        report = ix.coverage(cells, given)
    if fingerprints:
        report = only_fingerprints(report, [fp.key for fp in given])
    checked = _check(report, [fp.key for fp in given]) if check else None
    if as_json:
        doc = coverage_document(source, backend, here.key if here else None, report)
        if checked is not None:
            doc["check"] = {"ok": not checked, "not_ready": [
                {"cell_id": r.cell_id, "fingerprint_key": r.fingerprint_key,
                 "status": r.status} for r in checked]}
        emit_json(doc)
    elif not cells:
        click.echo(f"{source}: no cell matches {list(cell_globs)}", err=True)
    else:
        click.echo(render_coverage(report))
    if checked:
        from neffcache.errors import CacheMissError

        ids = ", ".join(sorted({r.cell_id for r in checked})[:3])
        raise CacheMissError(f"{len(checked)} cell x fingerprint pair(s) of {source} are not "
                             f"ready: {ids}{', ...' if len(checked) > 3 else ''}",
                             hint="neffcache precompile MATRIX (on a build host)")


def _load_cells(ix: Any, matrix: str) -> tuple[str, str, Any]:
    """(source, backend, cells) of a matrix file, else of a registered matrix by name."""
    from pathlib import Path

    from neffcache.errors import MatrixError, NotFoundError
    from neffcache.matrix_io import load_matrix

    if Path(matrix).exists() or "/" in matrix or matrix.endswith(".toml"):  # a file
        spec = load_matrix(matrix)
        return spec.source, spec.backend, spec.cells
    from neffcache.index.matrices import get_matrix, registered_cells

    try:
        version = get_matrix(ix, matrix)
    except NotFoundError:
        raise MatrixError(f"{matrix}: no such matrix file, and no matrix of that name is "
                          f"registered in the index",
                          hint="neffcache matrix register FILE") from None
    return version.name, version.backend, registered_cells(ix, matrix)


def _select(cells: Any, globs: tuple[str, ...]) -> Any:
    from neffcache.matrix import select_cells

    return select_cells(cells, globs)


def _fingerprints(ix: Any, backend: str, wanted: tuple[str, ...], python: str | None, *,
                  host_default: bool) -> tuple[Any, list[Any]]:
    """(this host's fingerprint or None, the fingerprints to show first, in order)."""
    from neffcache.errors import UsageError
    from neffcache.fingerprint import collect_fingerprint

    here = None
    if host_default or "host" in wanted:
        here = collect_fingerprint(backend, os.environ, python=python)
    given = []
    for w in wanted or ("host",):
        if w == "host":
            given.append(here)
            continue
        found = ix.find_fingerprints(w.strip().lower())
        if len(found) != 1:
            what = "no fingerprint" if not found else f"{len(found)} fingerprints"
            raise UsageError(f"--fingerprint {w}: {what} in the index with that key prefix "
                             f"(expected a key or a unique prefix of one, or 'host')")
        given.extend(found.values())
    return here, given


def _check(report: Any, keys: list[str]) -> list[Any]:
    """Rows of the checked fingerprints that are not ready (pure)."""
    wanted = set(keys)
    return [r for r in report.rows if r.fingerprint_key in wanted and r.status != "ready"]
