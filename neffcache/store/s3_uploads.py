"""Incomplete multipart uploads under an S3 store's prefix, listed and aborted through botocore
(obstore has no ListMultipartUploads, nor an abort by upload id). The bucket is reached as the
store reaches it: same endpoint, region and addressing style (``s3_config.S3Location``);
credentials from botocore's chain, which looks where ``s3_config.credential_source`` does and in
that order. botocore is imported only here, only when gc asks; failures are translated by
``s3_errors.botocore_failure``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from neffcache.store.base import Upload
from neffcache.store.s3_config import NONE, CredentialSource, S3Location
from neffcache.store.s3_errors import botocore_failure, no_credentials

DENIED_HINT = ("gc needs s3:ListBucketMultipartUploads and s3:AbortMultipartUpload on the "
               "bucket (or leave stale uploads to an AbortIncompleteMultipartUpload lifecycle "
               "rule)")


class UploadClient:
    """List and abort the multipart uploads under ``location.prefix``; keys are given and taken
    relative to the prefix, as the store's keys are. The botocore client is made on first use."""

    def __init__(self, location: S3Location, *, where: str, endpoint: str,
                 source: CredentialSource, connect_timeout: float = 5.0,
                 read_timeout: float = 60.0, max_attempts: int = 5) -> None:
        self.location = location
        self.where, self.endpoint, self.source = where, endpoint, source
        self._options = (connect_timeout, read_timeout, max_attempts)
        self._client: Any = None
        self._lock = threading.Lock()

    def list(self) -> Iterator[Upload]:
        client = self._connect("ListMultipartUploads")
        base = f"{self.location.prefix}/" if self.location.prefix else ""
        args = {"Bucket": self.location.bucket, **({"Prefix": base} if base else {})}
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
        base = f"{self.location.prefix}/" if self.location.prefix else ""
        try:
            client.abort_multipart_upload(Bucket=self.location.bucket, Key=base + upload.key,
                                          UploadId=upload.upload_id)
        except Exception as exc:  # noqa: BLE001 - every botocore failure is translated
            code = getattr(exc, "response", {}).get("Error", {}).get("Code") \
                if isinstance(getattr(exc, "response", None), dict) else None
            if code in ("NoSuchUpload", "404"):
                return  # completed or aborted since it was listed
            raise self._error(exc, "AbortMultipartUpload") from None

    def _connect(self, op: str) -> Any:
        if self.source.name == NONE:
            raise no_credentials(self.where, op)
        with self._lock:
            if self._client is None:
                self._client = self._make(op)
            return self._client

    def _make(self, op: str) -> Any:
        import botocore.session  # type: ignore[import-untyped]
        from botocore.config import Config  # type: ignore[import-untyped]

        connect, read, attempts = self._options
        loc = self.location
        config = Config(connect_timeout=connect, read_timeout=read,
                        retries={"mode": "standard", "total_max_attempts": attempts},
                        s3={"addressing_style": "virtual" if loc.virtual_hosted else "path"})
        # A virtual-hosted FIPS/dual-stack endpoint already holds the bucket name: botocore
        # builds the same one from AWS_USE_FIPS_ENDPOINT / AWS_USE_DUALSTACK_ENDPOINT itself.
        endpoint = None if loc.virtual_hosted else loc.endpoint
        try:
            return botocore.session.Session().create_client(
                "s3", region_name=loc.region or "us-east-1", endpoint_url=endpoint,
                config=config)
        except Exception as exc:  # noqa: BLE001 - every botocore failure is translated
            raise self._error(exc, op) from None

    def _error(self, exc: BaseException, op: str) -> Exception:
        return botocore_failure(exc, where=self.where, endpoint=self.endpoint, op=op,
                                source=self.source, denied_hint=DENIED_HINT)
