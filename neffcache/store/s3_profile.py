"""Credentials that botocore resolves for obstore: profiles (shared files, SSO, assume-role,
credential_process) and web identity. botocore is imported only here, only for those sources
(~0.1-0.2 s); its failures become one-line errors with the command that fixes them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from neffcache.errors import ConfigError, NeffcacheError, UnavailableError
from neffcache.store.s3_config import CredentialSource
from neffcache.store.s3_errors import NO_CREDENTIALS, NO_CREDENTIALS_HINT

# obstore asks again after this long; botocore refreshes temporary credentials itself before
# they expire, so a short lifetime here only costs a cheap call.
TTL = timedelta(minutes=5)


def profile_credentials(source: CredentialSource, where: str) -> Callable[[], dict[str, Any]]:
    """A credential provider for obstore, resolved once now so that a broken source fails here,
    as a domain error, rather than inside the first request."""
    import botocore.session  # type: ignore[import-untyped]

    try:
        found = botocore.session.Session().get_credentials()
        if found is None:
            raise UnavailableError(f"{where}: {NO_CREDENTIALS}", hint=NO_CREDENTIALS_HINT)
        found.get_frozen_credentials()
    except NeffcacheError:
        raise
    except Exception as exc:  # noqa: BLE001 - every botocore failure is translated below
        raise credential_error(exc, source, where) from None

    def provide() -> dict[str, Any]:
        frozen = found.get_frozen_credentials()
        return {"access_key_id": frozen.access_key, "secret_access_key": frozen.secret_key,
                "token": frozen.token, "expires_at": datetime.now(timezone.utc) + TTL}

    return provide


def credential_error(exc: BaseException, source: CredentialSource,
                     where: str) -> NeffcacheError:
    """The domain error for a botocore credential failure: a configuration the user must fix
    is exit 2, a source that refused or could not be reached is exit 6."""
    name = type(exc).__name__
    profile = source.profile or "default"
    detail = " ".join(str(exc).split())[:200]
    if name == "ProfileNotFound":
        return ConfigError(f"{where}: AWS profile {profile!r} is not in ~/.aws/config or "
                           "~/.aws/credentials", hint=f"aws configure --profile {profile}")
    if name in ("SSOTokenLoadError", "UnauthorizedSSOTokenError", "TokenRetrievalError",
                "SSOError", "PendingAuthorizationExpiredError"):
        return ConfigError(f"{where}: AWS SSO profile {profile!r} has no valid login ({name})",
                           hint=f"aws sso login --profile {profile}")
    if name in ("InvalidConfigError", "PartialCredentialsError", "InfiniteLoopConfigError",
                "InvalidProfileConfigError"):
        return ConfigError(f"{where}: AWS profile {profile!r} is misconfigured: {detail}",
                           hint=f"aws configure list --profile {profile}")
    if name == "CredentialRetrievalError":
        return UnavailableError(f"{where}: the credential_process of AWS profile {profile!r} "
                                f"failed: {detail}",
                                hint="run the profile's credential_process by hand")
    if name == "NoCredentialsError":
        return UnavailableError(f"{where}: {NO_CREDENTIALS}", hint=NO_CREDENTIALS_HINT)
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError",
                "ConnectionClosedError"):
        return UnavailableError(f"{where}: cannot reach AWS STS for the {source.name} "
                                f"credentials ({name})", hint="check AWS_ENDPOINT_URL_STS and "
                                "the network path to STS")
    what = "web identity token" if source.name == "web-identity" else f"profile {profile!r}"
    code = getattr(exc, "response", {}).get("Error", {}).get("Code") if hasattr(
        exc, "response") else None
    return UnavailableError(f"{where}: AWS STS refused the {what} ({code or name})",
                            hint="check AWS_ROLE_ARN and that the role trusts this identity "
                                 "(aws sts get-caller-identity)")
