"""How an S3 failure reads: error codes to one-line reasons, shared by both S3 clients.

No SDK here: the botocore-free read client and the botocore client both build their
``NotFoundError`` / ``UnavailableError`` messages from this table, so a failure reads the same
whichever client met it. Messages name the store URL, the code, the HTTP status and the
operation, never credentials.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from neffcache.errors import NotFoundError, UnavailableError

NOT_FOUND = frozenset({"404", "NoSuchKey", "NotFound"})
PRECONDITION = frozenset({"412", "PreconditionFailed"})
CONFLICT = frozenset({"409", "ConditionalRequestConflict"})
RANGE_NOT_SATISFIABLE = frozenset({"416", "InvalidRange"})
REASONS = {
    "NoSuchBucket": "bucket does not exist",
    "AccessDenied": "access denied",
    "403": "access denied",
    "AllAccessDisabled": "access denied",
    "InvalidAccessKeyId": "access key id not recognised",
    "SignatureDoesNotMatch": "secret key does not match the access key id",
    "ExpiredToken": "credentials have expired",
    "InvalidToken": "session token is invalid",
    "RequestTimeTooSkewed": "this host's clock is too far from the server's",
    "SlowDown": "throttled by the server after retries",
    "Throttling": "throttled by the server after retries",
    "ThrottlingException": "throttled by the server after retries",
    "RequestLimitExceeded": "throttled by the server after retries",
    "ServiceUnavailable": "service unavailable after retries",
    "503": "service unavailable after retries",
    "InternalError": "server error after retries",
    "500": "server error after retries",
}
NO_CREDENTIALS = "no usable AWS credentials found (environment, ~/.aws, instance role)"


def client_failure(where: str, code: str, status: int | str, op: str,
                   key: str | None) -> NotFoundError | UnavailableError:
    """The error for a request the server answered with ``code`` (an S3 error code, or the
    HTTP status when the body had none)."""
    if key is not None and code in NOT_FOUND:
        return NotFoundError(f"{where}: not found")
    reason = REASONS.get(code, "request failed")
    return UnavailableError(f"{where}: {reason} ({code}, HTTP {status}, {op})")


def unreachable(where: str, endpoint: str, what: str, op: str) -> UnavailableError:
    return UnavailableError(f"{where}: cannot reach S3 endpoint {endpoint} ({what}, {op})")


def no_credentials(where: str, op: str) -> UnavailableError:
    return UnavailableError(f"{where}: {NO_CREDENTIALS} ({op})")


def redact(endpoint: str) -> str:
    """An endpoint URL without any user:password part."""
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return f"{parts.scheme}://{host}{parts.path}" if parts.scheme else endpoint
