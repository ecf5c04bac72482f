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


def coverage_document(matrix_source: str, backend: str, here: str,
                      report: CoverageReport) -> dict[str, Any]:
    doc = {"matrix": matrix_source, "backend": backend, "here": here}
    doc.update(report.to_json())
    return doc


@click.command("coverage")
@click.argument("matrix", type=click.Path(dir_okay=False))
@click.option("--cells", "cell_globs", metavar="GLOB", multiple=True,
              help="Only cells whose id matches this glob (repeatable).")
@python_option
@index_option
@json_option
def coverage(matrix: str, cell_globs: tuple[str, ...], python: str | None, index: str | None,
             as_json: bool) -> None:
    """Show which cells of MATRIX are cached, for which fingerprints.

    Rows are the matrix's cells; columns are this host's fingerprint (marked *) and every
    other fingerprint with an entry or a failure for any of these cells. A status is
    `ready` (an entry exists), `in_progress(HOST since TIME)` (no entry yet; a `precompile
    --claim` worker on HOST holds a live lease on it, claimed at TIME, UTC), `failed(N)` (no
    entry, and the latest warm-up exited with N; its log tail is in the JSON) or `missing`
    (never warmed). Reads the index only.

    \b
    Examples:
      neffcache coverage matrix.toml
      neffcache coverage matrix.toml --cells 'flux2-klein/compile/*'
      neffcache coverage matrix.toml --json | jq '.fingerprints[] | {key, ready, missing}'
      neffcache coverage matrix.toml --python /opt/venv/bin/python   # * = that interpreter's

    JSON output: {"matrix", "backend", "here" (this host's fingerprint key),
    "cells": [{"id", "key"}], "fingerprints": [{"key", "backend", "fields", "here", "ready",
    "failed", "missing", "in_progress"}], "rows": [{"cell_id", "cell_key", "fingerprint_key",
    "status", "entry_key", "total_bytes", "exit_status", "log_tail", "failed_at", "host",
    "since", "lease_expires_at"}]}.
    """
    from neffcache.fingerprint import collect_fingerprint
    from neffcache.index import open_index
    from neffcache.matrix import select_cells
    from neffcache.matrix_io import load_matrix

    spec = load_matrix(matrix)
    cells = select_cells(spec.cells, cell_globs)
    settings = settings_from(index=index, python=python)
    here = collect_fingerprint(spec.backend, os.environ, python=settings.python)
    with open_index(settings.index_url, auto_upgrade=settings.index_is_embedded) as ix:
        report = ix.coverage(cells, [here])
    if as_json:
        emit_json(coverage_document(spec.source, spec.backend, here.key, report))
    elif not cells:
        click.echo(f"{spec.source}: no cell matches {list(cell_globs)}", err=True)
    else:
        click.echo(render_coverage(report))
