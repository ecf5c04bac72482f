"""``neffcache serve``: a read-only HTTP API over the index (FastAPI), Prometheus metrics and
the offline coverage dashboard.

Use cases:

    serve(ServeRequest) -> None       run the server until it is stopped (neffcache serve)
    create_app(index) -> FastAPI      the application over an open Index, not running
                                      (in-process use, FastAPI's TestClient, a custom server)

and the pieces ``serve`` is made of, for tests and embedders: ``bind_socket``,
``server_config`` (uvicorn's configuration), ``is_loopback``.

Importing this package imports nothing heavy; ``app`` and ``metrics`` import FastAPI and
prometheus_client (the ``serve`` extra), and ``serve`` and ``create_app`` import them when
called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from neffcache.server.process import (
    ServeRequest,
    bind_socket,
    is_loopback,
    require_serve_extra,
    serve,
    server_config,
)

if TYPE_CHECKING:
    from fastapi import FastAPI

    from neffcache.index import Index

__all__ = ["ServeRequest", "bind_socket", "create_app", "is_loopback", "serve",
           "server_config"]


def create_app(index: Index) -> FastAPI:
    """The read-only FastAPI application over an open ``Index``, without running it: serve
    it with uvicorn (``server_config(app)``) or call it with FastAPI's TestClient. The app
    reads ``index`` on each request and never writes; the caller keeps the index open while
    the app is in use and closes it afterwards.

    Raises ConfigError when the ``serve`` extra (FastAPI, uvicorn, prometheus_client) is not
    installed."""
    require_serve_extra()
    from neffcache.server.app import create_app as _create_app

    return _create_app(index)
