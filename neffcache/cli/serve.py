"""``neffcache serve``: the read-only HTTP API, Prometheus metrics and coverage dashboard."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import click

from neffcache.cli._common import index_option, progress, settings_from, store_option
from neffcache.config import Settings, redact_url
from neffcache.errors import EXIT_CODE_HELP, ConfigError, UsageError

LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and 'localhost' (pure)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@click.command("serve", epilog=EXIT_CODE_HELP)
@click.option("--host", default="127.0.0.1", show_default=True, metavar="ADDRESS",
              help="Address to bind. Anything but loopback exposes the index read-only to "
                   "the network (a warning is printed); put a proxy with auth in front.")
@click.option("--port", type=click.IntRange(0, 65535), default=8077, show_default=True,
              help="TCP port (0 picks a free one).")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info",
                                                 "debug"]), default="warning",
              show_default=True, help="uvicorn's log level (access lines at info).")
@click.option("--ingest-every", "ingest_every", type=click.FloatRange(min=0), default=60.0,
              show_default=True, metavar="SECONDS",
              help="Ingest new restore reports from the store's reports/ prefix this often; "
                   "0 turns it off.")
@store_option
@index_option
def serve(host: str, port: int, log_level: str, ingest_every: float, store: str | None,
          index: str | None) -> None:
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
    try:
        import uvicorn

        from neffcache.server.app import create_app
    except ImportError as exc:
        raise ConfigError(f"neffcache serve needs the serve extra ({exc.name} is missing): "
                          f"pip install 'neffcache[serve]'") from None
    from neffcache.index import open_index

    settings = settings_from(store=store, index=index)
    if not is_loopback(host):
        progress(f"warning: binding {host}: the index's contents (matrices, hosts, log tails) "
                 f"are readable by anyone who can reach this port")
    with open_index(settings.index_url, auto_upgrade=settings.index_is_embedded) as ix:
        sock = bind_socket(host, port)
        config = server_config(create_app(ix), log_level=log_level)
        bound = sock.getsockname()[1]
        progress(f"neffcache serve: http://{_url_host(host)}:{bound}/ "
                 f"(index {redact_url(settings.index_url)}; Ctrl-C stops)")
        with sock, ingesting_reports(ix, settings, ingest_every):
            uvicorn.Server(config).run(sockets=[sock])


# The longest request head uvicorn's HTTP/1.1 parser (h11) buffers before it answers. At h11's
# default (16 KiB) a long query string that arrives in more than one read is refused with a
# plain-text 400 and a reset connection, before the app can answer it in the documented shape.
MAX_REQUEST_HEAD = 1 << 20


def server_config(app: Any, *, log_level: str = "warning") -> Any:
    """uvicorn's configuration for the ops server (``neffcache serve`` and the tests)."""
    import uvicorn

    return uvicorn.Config(app, log_level=log_level, server_header=False,
                          access_log=log_level in ("info", "debug"),
                          h11_max_incomplete_event_size=MAX_REQUEST_HEAD)


@contextlib.contextmanager
def ingesting_reports(index: Any, settings: Settings, every: float) -> Iterator[None]:
    """Run a ReportPoller tick every ``every`` seconds in a daemon thread until the block
    ends (0: not at all). Failures are warnings; the thread never stops the server."""
    if every <= 0:
        yield
        return
    from neffcache.index.ingest import ReportPoller
    from neffcache.store import open_store

    stop = threading.Event()

    def loop() -> None:
        try:
            poller = ReportPoller(index, open_store(settings.store_url), warn=progress)
        except Exception as exc:  # noqa: BLE001 - a bad store setting must not stop serving
            progress(f"warning: restore reports will not be ingested: {exc}")
            return
        while not stop.is_set():
            try:
                poller.safe_tick(datetime.now(timezone.utc))
            except Exception as exc:  # noqa: BLE001 - keep serving whatever one tick does
                progress(f"warning: restore report ingestion failed: {type(exc).__name__}: "
                         f"{exc}")
            stop.wait(every)

    worker = threading.Thread(target=loop, name="neffcache-report-ingest", daemon=True)
    worker.start()
    try:
        yield
    finally:
        stop.set()
        worker.join(5)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port; a one-line UsageError if that is impossible."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise UsageError(f"--host {host} --port {port}: cannot listen: "
                         f"{exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
