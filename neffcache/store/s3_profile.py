"""Credentials that botocore resolves for obstore: profiles (shared files, SSO, assume-role,
credential_process) and web identity. botocore is imported only here, only for those sources
(~0.1-0.2 s); its failures are translated by ``s3_errors.credential_error``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from neffcache.errors import NeffcacheError, UnavailableError
from neffcache.store.s3_config import CredentialSource
from neffcache.store.s3_errors import NO_CREDENTIALS, NO_CREDENTIALS_HINT, credential_error

# obstore asks again after this long; botocore refreshes temporary credentials itself before
# they expire, so a short lifetime here only costs a cheap call.
TTL = timedelta(minutes=5)


def profile_credentials(source: CredentialSource, where: str,
                        env: Mapping[str, str]) -> Callable[[], dict[str, Any]]:
    """A credential provider for obstore, resolved once now so that a broken source fails here,
    as a domain error, rather than inside the first request. The profile and the AWS files are
    the store's own (``env``, e.g. one side of a copy), not the process's."""
    try:
        found = botocore_session(source, env).get_credentials()
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


def botocore_session(source: CredentialSource, env: Mapping[str, str]) -> Any:
    """A botocore session that reads ``source``'s profile from the AWS files ``env`` names.
    A profile given this way is explicit: botocore then skips the process's environment keys,
    which belong to another store (web identity still reads the process environment)."""
    import botocore.session  # type: ignore[import-untyped]

    session = botocore.session.Session(profile=source.profile)
    for name, var in (("config_file", "AWS_CONFIG_FILE"),
                      ("credentials_file", "AWS_SHARED_CREDENTIALS_FILE")):
        if env.get(var):
            session.set_config_variable(name, env[var])
    return session
