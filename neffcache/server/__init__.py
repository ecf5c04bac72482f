"""``neffcache serve``: the read-only HTTP API, metrics and dashboard (FastAPI loaded lazily)."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from neffcache.config import Settings, read_settings, redact_url
from neffcache.errors import ConfigError, UsageError
from neffcache.request_rules import checked_request

if TYPE_CHECKING:
    import uvicorn
    from fastapi import FastAPI

    from neffcache.index import Index

__all__ = ["ServeRequest", "bind_socket", "create_app", "is_loopback", "serve",
           "server_config"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8077
DEFAULT_INGEST_EVERY = 60.0
# At h11's default (16 KiB) a long query string arriving in several reads is refused with a
# plain-text 400 and a reset connection, before the app can answer it in the documented shape.
MAX_REQUEST_HEAD = 1 << 20


@checked_request
class ServeRequest:
    """What ``neffcache serve`` is asked to do: ``host``/``port`` to listen on (port 0 picks a
    free one; anything but loopback gets a warning), uvicorn's ``log_level`` (access lines at
    info and debug), ``ingest_every`` seconds between ingests of restore reports (0: never),
    ``store``/``index`` URLs (None: NEFFCACHE_* > config file > default) and ``notice`` for the
    warnings and the "serving at" line (default: dropped)."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    log_level: str = "warning"
    ingest_every: float = DEFAULT_INGEST_EVERY
    store: str | None = None
    index: str | None = None
    notice: Callable[[str], None] | None = None


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and 'localhost' (pure)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def require_serve_extra() -> None:
    """ConfigError naming the ``serve`` extra when one of its packages is missing."""
    try:
        import fastapi  # noqa: F401
        import prometheus_client  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"neffcache serve needs the serve extra ({exc.name} is missing): "
                          f"pip install 'neffcache[serve]'") from None


def create_app(index: Index) -> FastAPI:
    """The read-only FastAPI app over ``index``, not running (the caller keeps the index open
    while it is in use). ConfigError without the ``serve`` extra."""
    require_serve_extra()
    from neffcache.server.app import create_app as _create_app

    return _create_app(index)


def serve(request: ServeRequest) -> None:
    """Serve the index read-only over HTTP until the process is stopped (Ctrl-C or SIGTERM),
    ingesting the store's restore reports every ``ingest_every`` seconds (failures are
    warnings). ConfigError without the ``serve`` extra, UsageError when the address cannot be
    listened on (both exit 2), the index's errors when it cannot be opened."""
    require_serve_extra()
    import uvicorn

    from neffcache.index import open_index

    say = request.notice or (lambda _message: None)
    settings = read_settings(os.environ, store=request.store, index=request.index)
    if not is_loopback(request.host):
        say(f"warning: binding {request.host}: the index's contents (matrices, hosts, log "
            f"tails) are readable by anyone who can reach this port")
    with open_index(settings.index_url, auto_upgrade=settings.index_is_embedded) as ix:
        sock = bind_socket(request.host, request.port)
        config = server_config(create_app(ix), log_level=request.log_level)
        bound = sock.getsockname()[1]
        say(f"neffcache serve: http://{_url_host(request.host)}:{bound}/ "
            f"(index {redact_url(settings.index_url)}; Ctrl-C stops)")
        with sock, ingesting_reports(ix, settings, request.ingest_every, say):
            uvicorn.Server(config).run(sockets=[sock])


def server_config(app: FastAPI, *, log_level: str = "warning") -> uvicorn.Config:
    """uvicorn's configuration for ``neffcache serve`` and the tests."""
    import uvicorn

    return uvicorn.Config(app, log_level=log_level, server_header=False,
                          access_log=log_level in ("info", "debug"),
                          h11_max_incomplete_event_size=MAX_REQUEST_HEAD)


@contextlib.contextmanager
def ingesting_reports(index: Index, settings: Settings, every: float,
                      warn: Callable[[str], None]) -> Iterator[None]:
    """Run a ReportPoller tick every ``every`` seconds in a daemon thread until the block
    ends (0: not at all). Failures are warnings; the thread never stops the server."""
    if every <= 0:
        yield
        return
    from neffcache.index import ReportPoller
    from neffcache.store import open_store

    stop = threading.Event()

    def loop() -> None:
        try:
            poller = ReportPoller(index, open_store(settings.store_url), warn=warn)
        except Exception as exc:  # noqa: BLE001 - a bad store setting must not stop serving
            warn(f"warning: restore reports will not be ingested: {exc}")
            return
        while not stop.is_set():
            try:
                poller.safe_tick(datetime.now(timezone.utc))
            except Exception as exc:  # noqa: BLE001 - keep serving whatever one tick does
                warn(f"warning: restore report ingestion failed: {type(exc).__name__}: {exc}")
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
