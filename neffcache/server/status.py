"""HTTP statuses for neffcache errors: the sibling of ``neffcache.errors.EXIT_CODES``, resolved
the same way (by walking the class hierarchy, so table order does not matter). Pure."""

from __future__ import annotations

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
    """The HTTP status for an exception (500 for anything not in the table)."""
    for cls in type(exc).__mro__:
        if cls in HTTP_STATUSES:
            return HTTP_STATUSES[cls]
    return 500


def error_document(exc: BaseException) -> dict[str, str | None]:
    """The JSON body of an error response: one-line message, error class, optional hint."""
    return {"error": " ".join(str(exc).split()), "type": type(exc).__name__,
            "hint": getattr(exc, "hint", None)}
