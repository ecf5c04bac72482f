"""A store in an S3 bucket under a prefix (AWS or any S3-compatible server such as SeaweedFS).

botocore is imported here only, and this module only when an ``s3://`` store is opened (botocore
directly, not boto3: boto3 adds ~60 ms of imports a boot-time restore does not need). One client
per store, shared by every thread; its pool holds ``max_pool_connections`` connections, so keep
that at or above the number of threads that fetch at once. botocore errors are translated once,
in ``_errors``: a missing key is ``NotFoundError``; anything else that stops a call after retries
is ``UnavailableError`` with a one-line message that never carries credentials.

``put(if_absent=True)`` is a conditional write (``If-None-Match: *`` on PutObject, and on
CompleteMultipartUpload for large bodies), so a concurrent writer's object is never overwritten.
If a retried attempt finds the object its own lost-response attempt wrote, put returns False:
"already present" is the answer either way, which is what content-addressed callers need.

Permissions: a reader needs ``s3:GetObject`` and ``s3:ListBucket`` on the prefix. Without
ListBucket S3 answers 403 instead of 404 for a missing key, which reads as "unavailable".
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, BinaryIO, NoReturn
from urllib.parse import urlsplit

import botocore.session  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.exceptions import (  # type: ignore[import-untyped]
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
)

from neffcache.errors import ConfigError, NotFoundError, UnavailableError, UsageError
from neffcache.store.base import ObjectStream, check_key

MiB = 1 << 20
_NOT_FOUND = frozenset({"404", "NoSuchKey", "NotFound"})
_PRECONDITION = frozenset({"412", "PreconditionFailed"})
_CONFLICT = frozenset({"409", "ConditionalRequestConflict"})
_REASONS = {
    "NoSuchBucket": "bucket does not exist",
    "AccessDenied": "access denied",
    "403": "access denied",
    "AllAccessDisabled": "access denied",
    "InvalidAccessKeyId": "access key id not recognised",
    "SignatureDoesNotMatch": "secret key does not match the access key id",
    "ExpiredToken": "credentials have expired",
    "InvalidToken": "session token is invalid",
    "SlowDown": "throttled by the server after retries",
    "Throttling": "throttled by the server after retries",
    "ThrottlingException": "throttled by the server after retries",
    "RequestLimitExceeded": "throttled by the server after retries",
    "ServiceUnavailable": "service unavailable after retries",
    "503": "service unavailable after retries",
    "InternalError": "server error after retries",
    "500": "server error after retries",
}
_CONFLICT_ATTEMPTS = 5
_Parts = list[dict[str, Any]]


class S3Store:
    """Objects at ``s3://<bucket>/<prefix>/<key>``; see the module docstring for the contract."""

    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None,
                 max_attempts: int = 5, connect_timeout: float = 5.0, read_timeout: float = 60.0,
                 max_pool_connections: int = 64, multipart_threshold: int = 16 * MiB,
                 part_size: int = 16 * MiB) -> None:
        if part_size < 5 * MiB or multipart_threshold < part_size:
            raise ConfigError("S3 store: part_size must be >= 5 MiB and <= multipart_threshold")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.multipart_threshold = multipart_threshold
        self.part_size = part_size
        session = botocore.session.get_session()  # sessions are not thread-safe; clients are
        common: dict[str, Any] = {"tcp_keepalive": True}
        if endpoint_url:
            common["s3"] = {"addressing_style": "path"}  # moto, SeaweedFS, MinIO, IP endpoints
        self._client = session.create_client("s3", endpoint_url=endpoint_url, config=Config(
            max_pool_connections=max_pool_connections, connect_timeout=connect_timeout,
            read_timeout=read_timeout, retries={"mode": "standard", "max_attempts": max_attempts},
            **common))
        # check() must fail within seconds on an unreachable endpoint: few attempts, short waits.
        self._probe = session.create_client("s3", endpoint_url=endpoint_url, config=Config(
            max_pool_connections=1, connect_timeout=min(connect_timeout, 2.0),
            read_timeout=min(read_timeout, 5.0), retries={"mode": "standard", "max_attempts": 2},
            **common))
        self.endpoint = _redact(self._client.meta.endpoint_url)

    @classmethod
    def from_url(cls, url: str, environ: Mapping[str, str] | None = None,
                 **options: Any) -> S3Store:
        """``s3://bucket/prefix``; the endpoint comes from AWS_ENDPOINT_URL_S3 or
        AWS_ENDPOINT_URL (else botocore's own resolution), credentials from the standard chain."""
        env = os.environ if environ is None else environ
        parts = urlsplit(url)
        bucket = parts.netloc
        if parts.scheme != "s3" or not bucket or parts.query or parts.fragment \
                or any(c in bucket for c in "@:"):
            raise ConfigError(f"store {url!r}: expected s3://BUCKET/PREFIX")
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None
        if env.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").lower() == "true":
            endpoint = None
        options.setdefault("endpoint_url", endpoint)
        return cls(bucket, parts.path, **options)

    # -- the protocol -------------------------------------------------------------------------

    def check(self) -> None:
        with self._errors("ListObjectsV2"):
            self._probe.list_objects_v2(Bucket=self.bucket, Prefix=self._base(), MaxKeys=1)

    def has(self, key: str) -> bool:
        try:
            self._head(key)
        except NotFoundError:
            return False
        return True

    def open(self, key: str, start: int = 0, length: int | None = None) -> BinaryIO:
        if start < 0 or (length is not None and length < 0):
            raise UsageError(f"{self.url}/{key}: negative range start={start} length={length}")
        if length == 0:
            self._head(key)
            return io.BytesIO()
        extra = {}
        if start or length is not None:
            end = "" if length is None else str(start + length - 1)
            extra["Range"] = f"bytes={start}-{end}"
        try:
            resp = self._client.get_object(Bucket=self.bucket, Key=self._full(key), **extra)
        except ClientError as exc:
            if _code(exc) in ("InvalidRange", "416"):
                return io.BytesIO()  # the object exists; the range starts past its end
            self._raise(exc, "GetObject", key)
        except BotoCoreError as exc:
            self._raise(exc, "GetObject", key)
        return _Body(resp["Body"], self, key)  # type: ignore[return-value]

    def read(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        with self.open(key, start, length) as body:
            return body.read()

    def put(self, key: str, source: BinaryIO, *, if_absent: bool = True) -> bool:
        full = self._full(key)
        first = _read_up_to(source, self.multipart_threshold)
        if len(first) < self.multipart_threshold:
            return self._put_small(key, full, first, if_absent)
        if if_absent and self.has(key):
            return False  # skip uploading a large body the store already holds
        return self._put_multipart(key, full, first, source, if_absent)

    def list(self, prefix: str) -> Iterator[str]:
        base = self._base()
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=base + prefix)
        with self._errors("ListObjectsV2"):
            for page in pages:
                for obj in page.get("Contents", ()):
                    yield obj["Key"][len(base):]

    def delete(self, key: str) -> None:
        with self._errors("DeleteObject", key):
            self._client.delete_object(Bucket=self.bucket, Key=self._full(key))

    # -- helpers ------------------------------------------------------------------------------

    def _full(self, key: str) -> str:
        return self._base() + check_key(key)

    def _base(self) -> str:
        return f"{self.prefix}/" if self.prefix else ""

    def _head(self, key: str) -> None:
        with self._errors("HeadObject", key):
            self._client.head_object(Bucket=self.bucket, Key=self._full(key))

    def _put_small(self, key: str, full: str, body: bytes, if_absent: bool) -> bool:
        cond = {"IfNoneMatch": "*"} if if_absent else {}
        for _ in range(_CONFLICT_ATTEMPTS):
            try:
                self._client.put_object(Bucket=self.bucket, Key=full, Body=body, **cond)
                return True
            except ClientError as exc:
                if _code(exc) in _PRECONDITION and if_absent:
                    return False
                if _code(exc) not in _CONFLICT:
                    self._raise(exc, "PutObject", key)
            except BotoCoreError as exc:
                self._raise(exc, "PutObject", key)
        raise UnavailableError(f"{self.url}/{key}: conflicting concurrent writes (PutObject)")

    def _put_multipart(self, key: str, full: str, first: bytes, source: BinaryIO,
                       if_absent: bool) -> bool:
        with self._errors("CreateMultipartUpload", key):
            upload_id = self._client.create_multipart_upload(
                Bucket=self.bucket, Key=full, ChecksumAlgorithm="CRC32")["UploadId"]
        done = False
        try:
            parts = self._upload_parts(key, full, upload_id, first, source)
            done = self._complete(key, full, upload_id, parts, if_absent)
            return done
        finally:
            if not done:
                try:
                    self._client.abort_multipart_upload(
                        Bucket=self.bucket, Key=full, UploadId=upload_id)
                except (ClientError, BotoCoreError):
                    pass  # an orphaned upload is reclaimed by the bucket's lifecycle rule

    def _upload_parts(self, key: str, full: str, upload_id: str, first: bytes,
                      source: BinaryIO) -> _Parts:
        parts: _Parts = []
        chunk, number = first, 1
        while chunk:
            with self._errors("UploadPart", key):
                resp = self._client.upload_part(Bucket=self.bucket, Key=full, UploadId=upload_id,
                                                PartNumber=number, Body=chunk,
                                                ChecksumAlgorithm="CRC32")
            part = {"ETag": resp["ETag"], "PartNumber": number}
            if resp.get("ChecksumCRC32"):
                part["ChecksumCRC32"] = resp["ChecksumCRC32"]
            parts.append(part)
            number += 1
            # S3 allows 10,000 parts: grow the part size every 1,000 parts (~440 GB at 16 MiB).
            chunk = _read_up_to(source, self.part_size * (1 + (number - 1) // 1000))
        return parts

    def _complete(self, key: str, full: str, upload_id: str, parts: _Parts,
                  if_absent: bool) -> bool:
        cond = {"IfNoneMatch": "*"} if if_absent else {}
        for _ in range(_CONFLICT_ATTEMPTS):
            try:
                self._client.complete_multipart_upload(
                    Bucket=self.bucket, Key=full, UploadId=upload_id,
                    MultipartUpload={"Parts": parts}, **cond)
                return True
            except ClientError as exc:
                if _code(exc) in _PRECONDITION and if_absent:
                    return False
                if _code(exc) not in _CONFLICT:
                    self._raise(exc, "CompleteMultipartUpload", key)
            except BotoCoreError as exc:
                self._raise(exc, "CompleteMultipartUpload", key)
        raise UnavailableError(
            f"{self.url}/{key}: conflicting concurrent writes (CompleteMultipartUpload)")

    @contextmanager
    def _errors(self, op: str, key: str | None = None) -> Iterator[None]:
        """Translate botocore errors raised inside the block (the one translation point)."""
        try:
            yield
        except (ClientError, BotoCoreError) as exc:
            self._raise(exc, op, key)

    def _raise(self, exc: Exception, op: str, key: str | None) -> NoReturn:
        where = f"{self.url}/{key}" if key else self.url
        if isinstance(exc, ParamValidationError):
            raise exc  # a bug in this module, not an unavailable store
        if isinstance(exc, ClientError):
            code = _code(exc)
            if key is not None and code in _NOT_FOUND:
                raise NotFoundError(f"{where}: not found") from exc
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?")
            reason = _REASONS.get(code, "request failed")
            raise UnavailableError(f"{where}: {reason} ({code}, HTTP {status}, {op})") from exc
        if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
            raise UnavailableError(f"{where}: no usable AWS credentials found "
                                   f"(environment, ~/.aws, instance role) ({op})") from exc
        raise UnavailableError(f"{where}: cannot reach S3 endpoint {self.endpoint} "
                               f"({type(exc).__name__}, {op})") from exc


class _Body(ObjectStream):
    """An object's streaming body that translates botocore errors raised while reading."""

    def __init__(self, body: Any, store: S3Store, key: str) -> None:
        super().__init__()
        self._body, self._store, self._key = body, store, key

    def read(self, size: int | None = -1) -> bytes:
        with self._store._errors("GetObject", self._key):
            return bytes(self._body.read(None if size is None or size < 0 else size))

    def _close_source(self) -> None:
        self._body.close()


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _read_up_to(source: BinaryIO, size: int) -> bytes:
    """Read exactly ``size`` bytes unless the stream ends first (streams may return less)."""
    chunks: list[bytes] = []
    left = size
    while left > 0:
        chunk = source.read(left)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _redact(endpoint: str) -> str:
    """An endpoint URL without any user:password part."""
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return f"{parts.scheme}://{host}{parts.path}" if parts.scheme else endpoint
