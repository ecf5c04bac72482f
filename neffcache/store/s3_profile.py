"""Credentials that botocore resolves for obstore: profiles (shared files, SSO, assume-role,
credential_process) and web identity. botocore is imported only here, only for those sources
(~0.1-0.2 s); its failures are translated by ``s3_errors.credential_error``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from neffcache.errors import NeffcacheError, UnavailableError
from neffcache.store.s3_config import CredentialSource
from neffcache.store.s3_errors import NO_CREDENTIALS, NO_CREDENTIALS_HINT, credential_error

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
