"""The FastAPI application: /api (one index query each), /healthz, /metrics, the dashboard."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST

from neffcache import index as idx
from neffcache.config import redact_url
from neffcache.errors import NeffcacheError
from neffcache.server import schemas as m
from neffcache.server.metrics import metrics_registry, render_metrics
from neffcache.server.shared import SharedAnswers, shared
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


def create_app(index: idx.Index) -> FastAPI:
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
                "ErrorDoc", m.ErrorDoc.model_json_schema())
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
    @app.get("/healthz", response_model=m.Health, summary="Liveness and index schema",
             responses={503: {"model": m.ErrorDoc}})
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
        return JSONResponse(m.error_document(exc), status_code=m.http_status_for(exc))

    @app.exception_handler(RequestValidationError)
    def on_bad_parameter(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(m.validation_document(exc.errors()), status_code=400)


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


def known_parameters_only(request: Request) -> None:
    """A query parameter the endpoint does not declare is a 400 (a misspelt ``limt`` or an
    ``offset`` it does not take would otherwise be ignored silently)."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    known = {p.alias for p in route.dependant.query_params}
    unknown = sorted(k for k in request.query_params if k not in known)
    if unknown:
        raise RequestValidationError([
            {"loc": ("query", k), "msg": "unknown parameter", "type": "extra_forbidden"}
            for k in unknown])


router = APIRouter(prefix="/api", dependencies=[Depends(known_parameters_only)])

Limit = Annotated[int, Query(ge=1, le=1000, description="At most this many items.")]
Glob = Annotated[str | None, Query(max_length=255, description="Cell id glob, e.g. "
                                                                "'flux2-klein/compile/*'.")]
MatrixName = Annotated[str, Query(min_length=1, max_length=255, description="Matrix name.")]
Version = Annotated[int | None, Query(ge=1, le=1_000_000,
                                      description="Matrix version [default: current].")]


NEXT = "Next-Cursor"  # response header: pass it as ``after`` for the next page
_NEXT_DOC: dict[int | str, dict[str, Any]] = {200: {"headers": {NEXT: {
    "schema": {"type": "string"},
    "description": "Present when more items may follow: the `after` of the next page."}}}}
After = Annotated[str | None, Query(pattern=idx.CURSOR_PATTERN, description=(
    "Continue after this cursor (a page's Next-Cursor header)."))]
AfterId = Annotated[str | None, Query(pattern=idx.ID_CURSOR_PATTERN, description=(
    "Continue after this cursor (a page's Next-Cursor header)."))]
AfterName = Annotated[str | None, Query(pattern=idx.NAME_CURSOR_PATTERN, description=(
    "Continue after this cursor (a page's Next-Cursor header)."))]


def _paged(response: Response, found: list[Any], limit: int,
           cursor: Any) -> list[Any]:
    """``found`` as the page's JSON; a full page names the next one (Next-Cursor)."""
    if found and len(found) >= limit:
        response.headers[NEXT] = cursor(found[-1])
    return [x.to_json() for x in found]


def _index(request: Request) -> idx.Index:
    index: idx.Index = request.app.state.index
    return index


@router.get("/summary", response_model=m.model_of(m.Summary), summary="Totals, coverage per "
            "matrix x fingerprint, bytes per SDK version, restore outcomes")
@shared("summary", m.model_of(m.Summary))
def summary(request: Request) -> dict[str, Any]:
    ix = _index(request)
    return {
        "index": request.app.state.index_label,
        "totals": idx.index_totals(ix).to_json(),
        "coverage": [g.counts_json() for g in ix.coverage_summaries()],
        "sdk_versions": [s.to_json() for s in idx.group_by_sdk(idx.fingerprint_stats(ix))],
        "restore_outcomes": [o.to_json() for o in idx.restore_outcomes(ix)],
    }


@router.get("/attention", response_model=m.model_of(idx.AttentionDoc),
            summary="What is wrong across every registered matrix: failed and stale cells, "
                    "fingerprints the fleet restores with nothing built")
def attention_now(request: Request,
                  limit: Annotated[int, Query(ge=1, le=200, description=(
                      "At most this many items in each list."))] = 20) -> dict[str, Any]:
    return idx.attention(_index(request), limit).to_json()


FingerprintKey = Annotated[str, Query(min_length=6, max_length=64, pattern="^[0-9a-fA-F]+$",
                                      description="A fingerprint key or a unique prefix.")]


@router.get("/fingerprint-diff", response_model=m.model_of(idx.FingerprintDiffDoc),
            summary="What tells two fingerprints apart: each differing field, both values, "
                    "and why the field matters",
            responses={404: {"model": m.ErrorDoc}})
def fingerprint_difference(request: Request, key: FingerprintKey,
                           against: FingerprintKey) -> idx.FingerprintDiffDoc:
    return idx.fingerprint_diff(_index(request), key, against).to_json()


@router.get("/matrices", response_model=m.many(idx.MatrixVersion),
            summary="The current version of every registered matrix")
def matrices(request: Request) -> list[dict[str, Any]]:
    return [v.to_json() for v in idx.list_matrices(_index(request))]


@router.get("/matrix", response_model=m.model_of(idx.MatrixDetail),
            summary="One matrix: the chosen version with its TOML, and its history",
            responses={404: {"model": m.ErrorDoc}})
def matrix(request: Request, name: MatrixName, version: Version = None) -> dict[str, Any]:
    ix = _index(request)
    chosen = idx.get_matrix(ix, name, version, with_toml=True)
    return idx.MatrixDetail(chosen, tuple(idx.matrix_versions(ix, name))).to_json()


@router.get("/coverage", response_model=m.model_of(idx.CoverageGrid),
            summary="A page of a matrix's cells x fingerprints, with status counts",
            responses={404: {"model": m.ErrorDoc}})
def coverage(request: Request, matrix: MatrixName, version: Version = None,
             cells: Glob = None,
             offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
             limit: Annotated[int, Query(ge=0, le=1000)] = 200) -> dict[str, Any]:
    return _index(request).matrix_coverage(matrix, version=version, pattern=cells or None,
                                           offset=offset, limit=limit).to_json()


@router.get("/entries", response_model=m.many(idx.EntrySummary), summary="Entries, newest first; "
            "keyset paging: pass the Next-Cursor header of a page as `after`", responses=_NEXT_DOC)
def entries(request: Request, response: Response, cells: Glob = None,
            fingerprint: Annotated[str | None, Query(max_length=64, description=(
                "A fingerprint key or a prefix of one."))] = None,
            limit: Limit = 100, after: After = None) -> list[dict[str, Any]]:
    found = _index(request).entries(cells or None, fingerprint or None, limit, after or None)
    return _paged(response, found, limit, idx.entry_cursor)


@router.get("/fingerprints", response_model=m.many(idx.FingerprintDoc),
            summary="Every fingerprint with its entries and bytes")
def fingerprints(request: Request) -> list[idx.FingerprintDoc]:
    return [s.to_json() for s in idx.fingerprint_stats(_index(request))]


@router.get("/sdk-versions", response_model=m.many(idx.SdkBytes),
            summary="Entries and bytes per backend and SDK version")
def sdk_versions(request: Request) -> list[dict[str, Any]]:
    return [s.to_json() for s in idx.group_by_sdk(idx.fingerprint_stats(_index(request)))]


@router.get("/runs", response_model=m.many(idx.RunSummary), summary="Precompile runs, newest "
            "first; keyset paging: pass the Next-Cursor header of a page as `after`",
            responses=_NEXT_DOC)
def runs(request: Request, response: Response,
         matrix: Annotated[str | None, Query(max_length=255)] = None,
         limit: Limit = 50, after: AfterName = None) -> list[dict[str, Any]]:
    return _paged(response, idx.list_runs(_index(request), limit, matrix or None, after or None),
                  limit, idx.run_cursor)


@router.get("/run", response_model=m.model_of(idx.RunDetail),
            summary="One precompile run and every failure it recorded, with log tails",
            responses={404: {"model": m.ErrorDoc}})
def run(request: Request, id: Annotated[str, Query(min_length=1, max_length=64)],
        limit: Limit = 200) -> dict[str, Any]:
    ix = _index(request)
    failures = idx.list_failures(ix, run_id=id, current_only=False, limit=limit)
    return idx.RunDetail(idx.get_run(ix, id), tuple(failures)).to_json()


@router.get("/failures", response_model=m.many(idx.FailureRecord),
            summary="Failed cells with their log tails, newest first; keyset paging: pass "
                    "the Next-Cursor header of a page as `after`",
            responses={404: {"model": m.ErrorDoc}, **_NEXT_DOC})
def failures(request: Request, response: Response,
             matrix: Annotated[str | None, Query(max_length=255, description=(
                 "Only cells of this registered matrix (current version)."))] = None,
             fingerprint: Annotated[str | None, Query(max_length=64)] = None,
             cells: Glob = None,
             all: Annotated[bool, Query(description=(
                 "Every recorded failure, not only the latest of each cell x fingerprint "
                 "that still has no entry."))] = False,
             limit: Limit = 100, after: AfterId = None) -> list[dict[str, Any]]:
    ix = _index(request)
    version = idx.get_matrix(ix, matrix) if matrix else None
    return _paged(response, idx.list_failures(
        ix, matrix=version, fingerprint_key=fingerprint or None, cell_glob=cells or None,
        current_only=not all, limit=limit, after=after or None), limit, idx.failure_cursor)


@router.get("/in-progress", response_model=m.many(idx.InProgressDoc),
            summary="Cells being warmed now by precompile --claim workers (live leases): "
                    "which host holds each, since when; oldest first")
def in_progress(request: Request, limit: Limit = 200) -> list[idx.InProgressDoc]:
    return [lease.to_json() for lease in _index(request).live_leases(limit)]


@router.get("/restores", response_model=m.many(idx.RestoreRecord),
            summary="Restore reports, newest first; keyset paging: pass the Next-Cursor "
                    "header of a page as `after`", responses=_NEXT_DOC)
def restores(request: Request, response: Response,
             host: Annotated[str | None, Query(max_length=255)] = None,
             matrix: Annotated[str | None, Query(max_length=255)] = None,
             limit: Limit = 50, after: AfterId = None) -> list[dict[str, Any]]:
    return _paged(response, idx.list_restores(_index(request), limit=limit, host=host or None,
                                          matrix=matrix or None, after=after or None),
                  limit, idx.restore_cursor)


@router.get("/restore-outcomes", response_model=m.many(idx.RestoreOutcomeDoc),
            summary="Restores per outcome with duration buckets")
def restore_outcomes(request: Request) -> list[idx.RestoreOutcomeDoc]:
    return [o.to_json() for o in idx.restore_outcomes(_index(request))]


@router.get("/restore-timeline", response_model=m.many(idx.RestorePoint),
            summary="Restores per day (or hour) by outcome, misses split into no entry and "
                    "other fingerprint; empty periods included, oldest first")
def restore_timeline(request: Request,
                     days: Annotated[int, Query(ge=1, le=90, description=(
                         "How many days back, today included."))] = 14,
                     step: Annotated[Literal["day", "hour"], Query(description=(
                         "Period of each point (UTC)."))] = "day") -> list[dict[str, Any]]:
    return [p.to_json() for p in idx.restore_timeline(_index(request), days=days, step=step)]
