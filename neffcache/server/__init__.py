"""``neffcache serve``: the read-only HTTP API, metrics and dashboard (FastAPI loaded lazily)."""

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
    """The read-only FastAPI app over ``index``, not running (the caller keeps the index open
    while it is in use). ConfigError without the ``serve`` extra."""
    require_serve_extra()
    from neffcache.server.app import create_app as _create_app

    return _create_app(index)
