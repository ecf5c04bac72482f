"""The one place an obstore or botocore failure becomes a domain error (botocore's by name)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from neffcache.errors import ConfigError, NeffcacheError, NotFoundError, UnavailableError

if TYPE_CHECKING:
    from neffcache.store.s3_config import CredentialSource

NOT_FOUND = frozenset({"404", "NoSuchKey", "NotFound"})
RANGE_NOT_SATISFIABLE = frozenset({"416", "InvalidRange"})
REDIRECT = frozenset({"301", "PermanentRedirect", "AuthorizationHeaderMalformed"})
# S3 error code (or HTTP status) -> what a message says, and the hint that goes with it.
REASONS = {code: reason for codes, reason in (
    (("NoSuchBucket",), "bucket does not exist"),
    (("AccessDenied", "403", "AllAccessDisabled"), "access denied"),
    (("InvalidAccessKeyId",), "access key id not recognised"),
    (("SignatureDoesNotMatch",), "secret key does not match the access key id"),
    (("ExpiredToken",), "credentials have expired"),
    (("InvalidToken",), "session token is invalid"),
    (("RequestTimeTooSkewed",), "this host's clock is too far from the server's"),
    (("SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded"),
     "throttled by the server after retries"),
    (("ServiceUnavailable", "503"), "service unavailable after retries"),
    (("InternalError", "500"), "server error after retries"),
) for code in codes}
HINTS = {
    "InvalidAccessKeyId": "check AWS_ACCESS_KEY_ID / AWS_PROFILE (aws sts get-caller-identity)",
    "SignatureDoesNotMatch": "check AWS_SECRET_ACCESS_KEY / AWS_PROFILE",
    "ExpiredToken": "refresh the credentials (aws sso login, or a new session token)",
    **dict.fromkeys(("AccessDenied", "403"),
                    "the role needs s3:GetObject and s3:ListBucket on the prefix"),
    "RequestTimeTooSkewed": "synchronise this host's clock (chrony, systemd-timesyncd)",
}
WRITE_OPS = frozenset({"PutObject", "UploadPart", "CreateMultipartUpload", "CopyObject"})
WRITE_DENIED_HINT = ("the role needs s3:PutObject on the prefix; if the bucket policy requires "
                     "encryption, set NEFFCACHE_S3_SSE=aws:kms (with NEFFCACHE_S3_SSE_KMS_KEY_ID) "
                     "or NEFFCACHE_S3_SSE=AES256 (see neffcache config)")
NO_CREDENTIALS = "no usable AWS credentials found (environment, ~/.aws, container, instance role)"
NO_CREDENTIALS_HINT = ("set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE, or attach an "
                       "instance role")
_CODE = re.compile(r"<Code>([A-Za-z0-9.]{1,64})</Code>")
_STATUS = re.compile(r"status(?: code)?:? (\d{3})\b")
_URI = re.compile(r"Error performing \w+ (\S+)")
_RETRY_SETTING = re.compile(r"retry_timeout:\s*\S+")
_NO_SSO_LOGIN = frozenset({"SSOTokenLoadError", "UnauthorizedSSOTokenError", "SSOError",
                           "TokenRetrievalError", "PendingAuthorizationExpiredError"})
_PROFILE_BROKEN = frozenset({"InvalidConfigError", "PartialCredentialsError",
                             "InfiniteLoopConfigError", "InvalidProfileConfigError"})
_BOTOCORE_CREDENTIALS = _NO_SSO_LOGIN | _PROFILE_BROKEN | {
    "NoCredentialsError", "ProfileNotFound", "CredentialRetrievalError"}
_STS_UNREACHABLE = frozenset({"EndpointConnectionError", "ConnectTimeoutError",
                              "ReadTimeoutError", "ConnectionClosedError"})
_BOTOCORE_UNREACHABLE = _STS_UNREACHABLE | {"ProxyConnectionError", "SSLError", "HTTPClientError"}
_CREDENTIAL_PATHS = ("/latest/api/token", "/latest/meta-data/", "/v2/credentials",
                     "/credentials", "sts.")


def response_code(exc: BaseException) -> tuple[str, str]:
    """(S3 error code, else the HTTP status; HTTP status or "?") from a client exception's text,
    ("", "?") without a response: only these are read, so a message never holds credentials."""
    text = str(exc)
    status = _STATUS.search(text)
    code = _CODE.search(text)
    got = status.group(1) if status else "?"
    return (code.group(1) if code else (got if status else "")), got


def translate(exc: BaseException, *, where: str, endpoint: str, op: str, key: str | None,
              source: str) -> NeffcacheError:
    from obstore.exceptions import NotFoundError as ObjectNotFound
    from obstore.exceptions import UnauthenticatedError

    text = str(exc)
    if isinstance(exc, UnauthenticatedError) or "credential provider" in text:
        return UnavailableError(f"{where}: the {source} credential source failed ({op})",
                                hint=NO_CREDENTIALS_HINT)
    uri = _URI.search(text)
    if uri and _is_credential_request(uri.group(1), endpoint):
        return UnavailableError(f"{where}: cannot get credentials from the {source} source "
                                f"({_short_reason(text)}, {op})", hint=NO_CREDENTIALS_HINT)
    code, status = response_code(exc)
    if isinstance(exc, (ObjectNotFound, FileNotFoundError)) and code != "NoSuchBucket":
        return NotFoundError(f"{where}: not found") if key is not None else \
            UnavailableError(f"{where}: not found (HTTP 404, {op})")
    if code:
        return client_failure(where, code, status, op, key)
    return unreachable(where, endpoint, _short_reason(text), op)


def credential_error(exc: BaseException, source: CredentialSource,
                     where: str) -> NeffcacheError:
    """A configuration to fix is exit 2, a source that refused or could not be reached exit 6."""
    name = type(exc).__name__
    profile = source.profile or "default"
    detail = " ".join(str(exc).split())[:200]
    if name == "ProfileNotFound":
        return ConfigError(f"{where}: AWS profile {profile!r} is not in ~/.aws/config or "
                           "~/.aws/credentials", hint=f"aws configure --profile {profile}")
    if name in _NO_SSO_LOGIN:
        return ConfigError(f"{where}: AWS SSO profile {profile!r} has no valid login ({name})",
                           hint=f"aws sso login --profile {profile}")
    if name in _PROFILE_BROKEN:
        return ConfigError(f"{where}: AWS profile {profile!r} is misconfigured: {detail}",
                           hint=f"aws configure list --profile {profile}")
    if name == "CredentialRetrievalError":
        return UnavailableError(f"{where}: the credential_process of AWS profile {profile!r} "
                                f"failed: {detail}",
                                hint="run the profile's credential_process by hand")
    if name == "NoCredentialsError":
        return no_credentials(where)
    if name in _STS_UNREACHABLE:
        return UnavailableError(f"{where}: cannot reach AWS STS for the {source.name} "
                                f"credentials ({name})", hint="check AWS_ENDPOINT_URL_STS and "
                                "the network path to STS")
    what = "web identity token" if source.name == "web-identity" else f"profile {profile!r}"
    return UnavailableError(f"{where}: AWS STS refused the {what} ({botocore_code(exc) or name})",
                            hint="check AWS_ROLE_ARN and that the role trusts this identity "
                                 "(aws sts get-caller-identity)")


def botocore_code(exc: BaseException) -> str | None:
    response = getattr(exc, "response", None)
    error = response.get("Error") if isinstance(response, dict) else None
    return str(error.get("Code")) if isinstance(error, dict) and error.get("Code") else None


def botocore_failure(exc: BaseException, *, where: str, endpoint: str, op: str,
                     source: CredentialSource, denied_hint: str | None = None
                     ) -> NeffcacheError:
    """``denied_hint`` names the permissions ``op`` needs."""
    name = type(exc).__name__
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and isinstance(response.get("Error"), dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?")
        code = str(response["Error"].get("Code") or status)
        if code in ("AccessDenied", "403") and denied_hint:
            return UnavailableError(f"{where}: access denied ({code}, HTTP {status}, {op})",
                                    hint=denied_hint)
        return client_failure(where, code, status, op, None)
    if name in _BOTOCORE_UNREACHABLE:
        refused = "refused" in str(exc).lower()
        return unreachable(where, endpoint, "timed out" if "Timeout" in name else
                           "connection refused" if refused else "connection failed", op)
    if name in _BOTOCORE_CREDENTIALS:
        return credential_error(exc, source, where)
    return UnavailableError(f"{where}: {op} failed ({name})")


def client_failure(where: str, code: str, status: int | str, op: str,
                   key: str | None) -> NotFoundError | UnavailableError | ConfigError:
    if key is not None and code in NOT_FOUND:
        return NotFoundError(f"{where}: not found")
    if code in REDIRECT:
        return ConfigError(f"{where}: the bucket is in another region than the one configured "
                           f"({code}, HTTP {status}, {op})",
                           hint="set AWS_REGION to the bucket's region")
    reason = REASONS.get(code, "request failed")
    hint = WRITE_DENIED_HINT if op in WRITE_OPS and REASONS.get(code) == "access denied" \
        else HINTS.get(code)
    return UnavailableError(f"{where}: {reason} ({code}, HTTP {status}, {op})", hint=hint)


def unreachable(where: str, endpoint: str, what: str, op: str) -> UnavailableError:
    hint = (f"nothing listens at {endpoint}: check AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3 "
            "(neffcache config shows the endpoint used)") if what == "connection refused" \
        else None
    return UnavailableError(f"{where}: cannot reach S3 endpoint {endpoint} ({what}, {op})",
                            hint=hint)


def no_credentials(where: str, op: str | None = None) -> UnavailableError:
    return UnavailableError(f"{where}: {NO_CREDENTIALS}" + (f" ({op})" if op else ""),
                            hint=NO_CREDENTIALS_HINT)


def _is_credential_request(uri: str, endpoint: str) -> bool:
    host = urlsplit(uri).netloc
    if endpoint and host == urlsplit(endpoint).netloc:
        return False
    return any(p in uri for p in _CREDENTIAL_PATHS)


def _short_reason(text: str) -> str:
    lowered = _RETRY_SETTING.sub("", text.lower())  # "retry_timeout: 180s" is not a timeout
    if "connection refused" in lowered or "connectionrefused" in lowered:
        return "connection refused"
    if "timed out" in lowered or "timeout" in lowered:
        return "timed out"
    if "connect" in lowered:
        return "connection failed"
    if "error decoding response body" in lowered or "incomplete" in lowered:
        return "response cut short"
    status = _STATUS.search(text)
    return f"HTTP {status.group(1)}" if status else "request failed"
