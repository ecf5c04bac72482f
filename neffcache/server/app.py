"""The FastAPI application: /api, /healthz, /metrics and the dashboard; GET and HEAD only."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST

from neffcache.config import redact_url
from neffcache.errors import NeffcacheError
from neffcache.index import Index
from neffcache.server import schemas
from neffcache.server.metrics import metrics_registry, render_metrics
from neffcache.server.routes import router
from neffcache.server.shared import SharedAnswers, shared
from neffcache.server.status import error_document, http_status_for, validation_document
from neffcache.version import __version__

# The dashboard loads nothing from elsewhere: scripts, styles and data come from this server.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                               "style-src 'self' 'unsafe-inline'; "  # bar widths
                               "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
ALLOWED_METHODS = ("GET", "HEAD")


def web_dir() -> Path:
    return Path(str(resources.files("neffcache") / "web"))


def create_app(index: Index) -> FastAPI:
    app = FastAPI(title="neffcache", version=__version__,
                  description="Read-only view of a neffcache index: coverage of registered "
                              "matrices per fingerprint, entries, precompile runs and "
                              "failures, restore reports. GET only.",
                  docs_url=None, redoc_url=None)  # Swagger/ReDoc pages load from a CDN
    app.state.index = index
    app.state.index_label = redact_url(index.url)
    app.state.registry = metrics_registry(index)
    app.state.answers = SharedAnswers(index)
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=web_dir()), name="static")
    _add_system_routes(app)
    _add_middleware(app)
    _document_400(app)
    return app


def _document_400(app: FastAPI) -> None:
    """OpenAPI: a bad parameter is a 400 with the error document (FastAPI says 422)."""
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = plain()
            spec.get("components", {}).get("schemas", {}).setdefault(
                "ErrorDoc", schemas.ErrorDoc.model_json_schema())
            for path, ops in spec.get("paths", {}).items():
                for op in ops.values():
                    responses = op.get("responses", {})  # /api/*: unknown parameters too
                    if (responses.pop("422", None) is not None
                            or path.startswith("/api/")):
                        responses["400"] = {"description": "Bad parameter", "content": {
                            "application/json": {
                                "schema": {"$ref": "#/components/schemas/ErrorDoc"}}}}
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _add_system_routes(app: FastAPI) -> None:
    @app.get("/healthz", response_model=schemas.Health, summary="Liveness and index schema",
             responses={503: {"model": schemas.ErrorDoc}})
    def healthz(request: Request) -> dict[str, Any]:
        state = request.app.state.index.schema_state()
        return {"status": "ok", "index": request.app.state.index_label,
                "schema_revision": state.current, "schema_head": state.head}

    @app.get("/metrics", response_class=Response, summary="Prometheus metrics",
             responses={200: {"content": {"text/plain": {}},
                              "description": "Prometheus text format 0.0.4"}})
    @shared("metrics", media_type=CONTENT_TYPE_LATEST)
    def metrics(request: Request) -> bytes:
        return render_metrics(request.app.state.index, request.app.state.registry)

    @app.get("/", include_in_schema=False)
    def dashboard() -> FileResponse:
        return FileResponse(web_dir() / "index.html", media_type="text/html")

    @app.exception_handler(NeffcacheError)
    def on_error(_request: Request, exc: NeffcacheError) -> JSONResponse:
        return JSONResponse(error_document(exc), status_code=http_status_for(exc))

    @app.exception_handler(RequestValidationError)
    def on_bad_parameter(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(validation_document(exc.errors()), status_code=400)


def _add_middleware(app: FastAPI) -> None:
    @app.middleware("http")
    async def read_only(request: Request,
                        call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        head = request.method == "HEAD"
        if head:  # answered as GET without the body (headers, status and length kept)
            request.scope["method"] = "GET"
        if request.method not in ALLOWED_METHODS:
            response: Response = JSONResponse(
                {"error": f"method {request.method} not allowed: this API is read-only",
                 "type": "MethodNotAllowed", "hint": None},
                status_code=405, headers={"Allow": ", ".join(ALLOWED_METHODS)})
        else:
            response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        if head:
            response = Response(status_code=response.status_code,
                                headers=dict(response.headers))
        return response
