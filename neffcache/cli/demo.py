"""``neffcache demo``: run ``neffcache.demo.run_demo`` and render cold vs restored first calls."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from neffcache.cli._common import finish, format_table, human_bytes, progress
from neffcache.cli._options import ranged, shared, workers_option

if TYPE_CHECKING:
    from neffcache.demo import DemoResult


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def render_demo(report: DemoResult) -> str:
    from neffcache.cli.coverage import render_coverage

    rows = [[c.cell_id,
             _secs(c.cold_seconds) + ("" if c.cold_source == "this run" else " (entry)"),
             _secs(c.restored_seconds), "-" if c.speedup is None else f"{c.speedup:.1f}x",
             c.verdict.summary() if c.verdict else f"FAILED: {c.error}"] for c in report.cells]
    table = format_table(["CELL", "COLD FIRST CALL", "RESTORED FIRST CALL", "SPEED-UP",
                          "COMPILED AFTER RESTORE"], rows)
    restore = report.restore
    fetched = restore.get("bytes_fetched")
    size = human_bytes(fetched) if isinstance(fetched, int) else "?"
    restored = (f"restore: exit {report.restore_exit}, {restore.get('files_fetched', '?')} "
                f"files, {size} in {restore.get('seconds', '?')} s into {report.instance_dir}")
    return "\n".join([
        table, "", restored,
        "cold = first call compiling from scratch; restored = first call in a fresh process "
        "against the restored cache.",
        "", "Coverage:", render_coverage(report.coverage), "",
        f"Demo {'passed' if report.ok else 'FAILED'} in {report.seconds:.0f} s "
        f"(store {report.store_url}, index {report.index_url})",
    ])


@click.command("demo")
@click.option("--shapes", metavar="HxW[,HxW...]", default=None,
              help="Shapes to warm instead of the demo matrix's two (64x64,96x128).")
@workers_option("DemoRequest", 1, "Cells compiled at the same time.")
@click.option("--timeout", type=ranged("DemoRequest", "timeout"), default=1800, show_default=True,
              metavar="SECONDS", help="Kill one warm-up after this long.")
@shared("store", "index", "json")
def demo(as_json: bool, **params: Any) -> None:
    """Show the whole job on this machine: compile once, boot a fresh instance warm.

    On the embedded default (or --store/--index) this builds a tiny random-weight
    Flux2KleinPipeline under $NEFFCACHE_HOME/demo/ (once, no download), precompiles the demo
    matrix with TorchInductor on the CPU (each cell cold, in its own process, published to the
    store), then acts as a new instance: an empty directory, `neffcache restore` in a separate
    process, and the first call of each cell in a fresh process against the restored cache.
    It prints, per cell, the cold and restored first-call seconds, the speed-up and whether
    anything compiled after restore (new files in the cache roots, FX-graph/AOTAutograd cache
    misses, C++ compiles), then the coverage table. A rerun reuses the model and the entries
    (cold times then come from the entries) and restores into a new empty directory again.

    Exits 1 if anything compiled after restore or a step failed. Sets OMP_NUM_THREADS=1 and
    TORCHINDUCTOR_COMPILE_THREADS=1 for the workers unless already set.

    \b
    Examples:
      neffcache demo
      neffcache demo --shapes 64x64 --json | jq '.cells[] | {cell_id, speedup}'
      NEFFCACHE_HOME=/tmp/nc neffcache demo --store s3://my-bucket/neff

    JSON output: {"ok", "model", "matrix", "store", "index", "fingerprint_key", "instance",
    "seconds", "precompile" (as `precompile --json`), "restore" (as `restore --json`),
    "restore_exit_code", "cells": [{"cell_id", "entry_key", "cold_seconds", "cold_source",
    "restored_seconds", "speedup", "compiled_after_restore", "evidence", "error"}],
    "coverage" (as `coverage --json`)}.
    """
    from neffcache.demo import DemoRequest, run_demo

    result = run_demo(DemoRequest(**params, notice=progress,
                                  progress=lambda e: progress(f"      {e[0]}: {e[1]}: {e[2]}")))
    finish(result, as_json, lambda: render_demo(result))
