"""What botocore (~0.1-0.2 s to import) does for an S3 store where obstore cannot."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from neffcache.store.base import Upload
from neffcache.store.s3_config import NONE, CredentialSource, S3Settings
from neffcache.store.s3_errors import (
    botocore_code,
    botocore_failure,
    credential_error,
    no_credentials,
)

TTL = timedelta(minutes=5)  # botocore refreshes before expiry: asking again is cheap


def profile_credentials(source: CredentialSource, where: str,
                        env: Mapping[str, str]) -> Callable[[], dict[str, Any]]:
    """A credential provider for obstore (profiles, SSO, web identity), resolved once now so
    that a broken source fails here rather than inside the first request."""
    import botocore.session  # type: ignore[import-untyped]

    try:
        # An explicit profile makes botocore skip the process's environment keys.
        session = botocore.session.Session(profile=source.profile)
        for name, var in (("config_file", "AWS_CONFIG_FILE"),
                          ("credentials_file", "AWS_SHARED_CREDENTIALS_FILE")):
            if env.get(var):
                session.set_config_variable(name, env[var])
        found = session.get_credentials()
        if found is not None:
            found.get_frozen_credentials()
    except Exception as exc:  # noqa: BLE001 - every botocore failure is translated below
        raise credential_error(exc, source, where) from None
    if found is None:
        raise no_credentials(where)

    def provide() -> dict[str, Any]:
        frozen = found.get_frozen_credentials()
        return {"access_key_id": frozen.access_key, "secret_access_key": frozen.secret_key,
                "token": frozen.token, "expires_at": datetime.now(timezone.utc) + TTL}

    return provide


DENIED_HINT = ("gc needs s3:ListBucketMultipartUploads and s3:AbortMultipartUpload on the "
               "bucket (or leave stale uploads to an AbortIncompleteMultipartUpload lifecycle "
               "rule)")


class UploadClient:
    """The multipart uploads under the store's prefix, for gc (``timeouts``: connect, read)."""

    def __init__(self, settings: S3Settings, timeouts: tuple[float, float]) -> None:
        self.settings, self._timeouts = settings, timeouts
        loc = settings.location
        self._base = f"{loc.prefix}/" if loc.prefix else ""
        self._client: Any = None
        self._lock = threading.Lock()

    def list(self) -> Iterator[Upload]:
        client = self._connect("ListMultipartUploads")
        base = self._base
        args = {"Bucket": self.settings.location.bucket, **({"Prefix": base} if base else {})}
        try:
            for page in client.get_paginator("list_multipart_uploads").paginate(**args):
                for item in page.get("Uploads", ()):
                    key = str(item["Key"])
                    if key.startswith(base):
                        yield Upload(key[len(base):], str(item["UploadId"]),
                                     item["Initiated"].timestamp())
        except Exception as exc:  # noqa: BLE001 - every botocore failure is translated
            raise self._error(exc, "ListMultipartUploads") from None

    def abort(self, upload: Upload) -> None:
        client = self._connect("AbortMultipartUpload")
        try:
            client.abort_multipart_upload(Bucket=self.settings.location.bucket,
                                          Key=self._base + upload.key, UploadId=upload.upload_id)
        except Exception as exc:  # noqa: BLE001 - every botocore failure is translated
            if botocore_code(exc) in ("NoSuchUpload", "404"):
                return  # completed or aborted since it was listed
            raise self._error(exc, "AbortMultipartUpload") from None

    def _connect(self, op: str) -> Any:
        if self.settings.credentials.name == NONE:
            raise no_credentials(self.settings.url, op)
        with self._lock:
            if self._client is not None:
                return self._client
            import botocore.session  # type: ignore[import-untyped]
            from botocore.config import Config  # type: ignore[import-untyped]

            loc = self.settings.location
            connect, read = self._timeouts
            config = Config(connect_timeout=connect, read_timeout=read,
                            retries={"mode": "standard",
                                     "total_max_attempts": self.settings.max_attempts},
                            s3={"addressing_style": "virtual" if loc.virtual_hosted else "path"})
            # A virtual-hosted FIPS/dual-stack endpoint already holds the bucket name: botocore
            # builds the same one from AWS_USE_FIPS_ENDPOINT / AWS_USE_DUALSTACK_ENDPOINT itself.
            endpoint = None if loc.virtual_hosted else loc.endpoint
            try:
                self._client = botocore.session.Session().create_client(
                    "s3", region_name=loc.region or "us-east-1", endpoint_url=endpoint,
                    config=config)
            except Exception as exc:  # noqa: BLE001 - every botocore failure is translated
                raise self._error(exc, op) from None
            return self._client

    def _error(self, exc: BaseException, op: str) -> Exception:
        return botocore_failure(exc, where=self.settings.url, endpoint=self.settings.endpoint,
                                op=op, source=self.settings.credentials, denied_hint=DENIED_HINT)
