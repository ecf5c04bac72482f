"""``neffcache serve``: the read-only HTTP API, Prometheus metrics and coverage dashboard."""

from __future__ import annotations

from typing import Any

import click

from neffcache.cli._common import progress
from neffcache.cli._options import ranged, shared
from neffcache.errors import EXIT_CODE_HELP


@click.command("serve", epilog=EXIT_CODE_HELP)
@click.option("--host", default="127.0.0.1", show_default=True, metavar="ADDRESS",
              help="Address to bind. Anything but loopback exposes the index read-only to "
                   "the network (a warning is printed); put a proxy with auth in front.")
@click.option("--port", type=ranged("ServeRequest", "port"), default=8077, show_default=True,
              help="TCP port (0 picks a free one).")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info",
                                                 "debug"]), default="warning",
              show_default=True, help="uvicorn's log level (access lines at info).")
@click.option("--ingest-every", "ingest_every", type=ranged("ServeRequest", "ingest_every"),
              default=60.0, show_default=True, metavar="SECONDS",
              help="Ingest new restore reports from the store's reports/ prefix this often; "
                   "0 turns it off.")
@shared("store", "index")
def serve(**params: Any) -> None:
    """Serve the index over HTTP, read-only: JSON API, /metrics and a dashboard at /.

    Everything is computed from the index on each request; nothing is cached and the API
    writes nothing (GET and HEAD; any other method gets 405).

    In the background, every --ingest-every seconds, restore reports that instances wrote
    under the store's reports/ prefix are ingested into the index (each once): at start the
    last 7 days of date prefixes, then only yesterday's, today's and tomorrow's (UTC), and
    objects already seen are not read again. A store that cannot be reached, or a malformed
    report, is a warning on stderr; serving goes on. `neffcache reindex` ingests every report.

    Matrices appear once registered (`neffcache matrix register FILE`; `neffcache precompile`
    registers its matrix too). The dashboard works offline: its scripts and styles are
    served by this process.

    \b
    Endpoints:
      /                      coverage dashboard (grid, bytes per SDK, restores, failures)
      /healthz               liveness and index schema revision
      /metrics               Prometheus text format (entries, bytes, coverage ratio,
                             failed cells, restore outcomes, restore-duration histogram)
      /openapi.json          OpenAPI description of everything under /api
      /api/summary           totals, coverage per matrix x fingerprint, bytes per SDK
      /api/matrices          registered matrices;  /api/matrix?name=N  one, with history
      /api/coverage?matrix=N[&cells=GLOB&offset=0&limit=200]   a page of the grid
      /api/entries  /api/fingerprints  /api/sdk-versions
      /api/runs  /api/run?id=ID  /api/failures   precompile runs and failed cells (log tails)
      /api/restores  /api/restore-outcomes        restore reports
      /api/restore-timeline?days=14&step=day|hour  restores per period by outcome

    Errors are JSON {"error", "type", "hint"}: 400 bad parameter (value not echoed),
    404 unknown matrix, version or run, 503 index unavailable or schema out of date.

    \b
    Examples:
      neffcache serve
      neffcache serve --port 9000 --index postgresql+psycopg://neffcache@db/neffcache
      neffcache serve --store s3://my-bucket/neff --ingest-every 30
      curl -s 127.0.0.1:8077/api/summary | jq '.coverage[].fingerprints[].ratio'
      curl -s 127.0.0.1:8077/metrics | grep neffcache_coverage_ratio
    """
    from neffcache.server import ServeRequest
    from neffcache.server import serve as run_server

    run_server(ServeRequest(**params, notice=progress))
