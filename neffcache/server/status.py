"""HTTP statuses and error bodies for neffcache errors (as ``errors.EXIT_CODES``). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from neffcache.errors import (
    CacheMissError,
    DeadlineExceededError,
    FingerprintMismatchError,
    IntegrityError,
    NeffcacheError,
    NotFoundError,
    SchemaOutdatedError,
    UnavailableError,
    UsageError,
    by_class,
)

HTTP_STATUSES: dict[type[BaseException], int] = {
    NeffcacheError: 500,
    UsageError: 400,  # bad query parameter value (e.g. a malformed glob or version)
    NotFoundError: 404,  # unknown matrix, version or precompile run
    CacheMissError: 404,
    IntegrityError: 500,
    FingerprintMismatchError: 409,
    UnavailableError: 503,  # the index cannot be reached
    SchemaOutdatedError: 503,  # the index needs `neffcache db upgrade`
    DeadlineExceededError: 504,
}


def http_status_for(exc: BaseException) -> int:
    return by_class(HTTP_STATUSES, exc, 500)


def error_document(exc: BaseException) -> dict[str, str | None]:
    return {"error": " ".join(str(exc).split()), "type": type(exc).__name__,
            "hint": getattr(exc, "hint", None)}


def validation_document(errors: Sequence[Mapping[str, Any]]) -> dict[str, str | None]:
    """The 400 body: never the value sent (it may be huge)."""
    parts = []
    for e in errors[:3]:
        loc = [str(x) for x in e.get("loc", ()) if x not in ("query", "path", "body")]
        msg = str(e.get("msg", "invalid value"))[:200]
        parts.append(f"{'.'.join(loc) or 'request'}: {msg}")
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    return {"error": "bad parameter " + "; ".join(parts) + more, "type": "UsageError",
            "hint": "see /openapi.json for the parameters each endpoint takes"}
