"""``neffcache warm``: the boot health check (``neffcache.precompile.check_warm``) rendered."""

from __future__ import annotations

from typing import Any

import click

from neffcache.cli._common import finish, format_table, progress
from neffcache.cli._options import ranged, shared
from neffcache.errors import EXIT_CODE_HELP


@click.command("warm", epilog=EXIT_CODE_HELP)
@click.argument("matrix", metavar="MATRIX", type=click.Path(dir_okay=False))
@click.option("--cache", "cache", required=True, metavar="DIR",
              type=click.Path(file_okay=False),
              help="The directory `neffcache restore --to DIR` filled: each cache root R is "
                   "DIR/R. Warmed in place, never copied.")
@shared("cells")
@click.option("--strict", is_flag=True,
              help="Exit 3 when any cell compiled (a cache miss), for health checks.")
@click.option("--timeout", type=ranged("WarmRequest", "timeout"), default=None, metavar="SECONDS",
              help="Kill a cell's warm-up after this long (reported as failed).")
@shared("python", "index", "json")
def warm(as_json: bool, **params: Any) -> None:
    """Run each declared cell's first call against the restored cache in DIR and report any
    cell that compiled.

    Meant for an instance right after `neffcache restore MATRIX --to DIR`: each cell (or
    each cell matching --cells) is warmed in turn in a fresh worker process whose cache
    variables point at DIR itself, exactly as the inference service will see it: the
    pipeline is loaded, compiled per mode and called once at the cell's shape and batch. A
    cell that left new or rewritten files in the cache roots, or moved a compile counter,
    compiled: its entry is missing, incomplete or built for another environment. What it
    compiled stays in DIR (the service benefits), and `neffcache capture` can back-fill it.
    Cells run one at a time, since they share DIR.

    Without --strict a cell that compiled is reported and the exit is 0; with --strict it
    exits 3. A cell whose warm-up failed, crashed or timed out always exits 1. When an index
    is configured (or the embedded one exists) each cell's result is recorded on its entry
    (verified: hit or compiled) within 2 seconds; an index error is only a warning, and the
    results wait in the report spool (DIR/.neffcache-entries/report-spool, or
    NEFFCACHE_REPORT_SPOOL) until the next warm that reaches the index records them.

    --json prints: matrix, backend, fingerprint_key, cache_dir, seconds, counts {hit,
    compiled, failed}, cells [{cell_id, cell_key, entry_key, status, seconds, wall_seconds,
    compiled (the evidence: reasons, new_files, ...), error, log_tail}].

    \b
    Examples:
      neffcache restore matrix.toml --to /var/cache/neffcache
      neffcache warm matrix.toml --cache /var/cache/neffcache --strict
      neffcache warm matrix.toml --cache /var/cache/neffcache --python /opt/venv/bin/python
      neffcache warm matrix.toml --cache /var/cache/neffcache --cells 'flux2-klein/*' --json
    """
    from neffcache.precompile import WarmRequest, check_warm

    result = check_warm(WarmRequest(**params, notice=progress,
                                    progress=lambda e: progress(f"{e[0]:>8}  {e[1]}  {e[2]}")))
    finish(result, as_json, lambda: render_warm(result.to_json()))


def render_warm(doc: dict[str, Any]) -> str:
    rows = [[c["cell_id"], c["status"].upper() if c["status"] != "hit" else "hit",
             "-" if c["seconds"] is None else f"{c['seconds']:.1f}",
             c["error"] or "; ".join((c["compiled"] or {}).get("reasons") or []) or "-"]
            for c in doc["cells"]]
    counts = doc["counts"]
    return (format_table(["CELL", "RESULT", "FIRST CALL S", "DETAIL"], rows) + "\n\n"
            f"{counts['hit']} hit, {counts['compiled']} compiled, {counts['failed']} failed "
            f"against {doc['cache_dir']} [fingerprint {doc['fingerprint_key'][:12]}]")
