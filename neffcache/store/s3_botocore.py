"""The botocore S3 client: every write (conditional put, multipart upload, delete), and reads
when the environment needs what only botocore does (proxies, FIPS or dual-stack endpoints,
``NEFFCACHE_S3_CLIENT=botocore``).

botocore directly, not boto3 (boto3 adds ~60 ms of imports). One client per store, shared by
every thread; its pool holds ``max_pool_connections`` connections. botocore errors are
translated once, in ``errors``/``fail``, with the messages of ``neffcache.store.s3_errors``.

``put(if_absent=True)`` is a conditional write (``If-None-Match: *`` on PutObject, and on
CompleteMultipartUpload for large bodies), so a concurrent writer's object is never overwritten.
If a retried attempt finds the object its own lost-response attempt wrote, put returns False:
"already present" is the answer either way, which is what content-addressed callers need.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO, NoReturn

import botocore.session  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.exceptions import (  # type: ignore[import-untyped]
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
)

from neffcache.errors import UnavailableError
from neffcache.store.base import ObjectStream
from neffcache.store.s3_errors import (
    CONFLICT,
    PRECONDITION,
    RANGE_NOT_SATISFIABLE,
    client_failure,
    no_credentials,
    redact,
    unreachable,
)

_CONFLICT_ATTEMPTS = 5
_Parts = list[dict[str, Any]]


class BotocoreS3:
    """One bucket through botocore. Keys are full object keys; ``where`` names the object in
    messages."""

    def __init__(self, bucket: str, *, endpoint_url: str | None, max_attempts: int,
                 connect_timeout: float, read_timeout: float, max_pool_connections: int,
                 multipart_threshold: int, part_size: int) -> None:
        self.bucket = bucket
        self.multipart_threshold, self.part_size = multipart_threshold, part_size
        session = botocore.session.get_session()  # sessions are not thread-safe; clients are
        common: dict[str, Any] = {"tcp_keepalive": True}
        if endpoint_url:
            common["s3"] = {"addressing_style": "path"}  # moto, SeaweedFS, MinIO, IP endpoints
        self.client = session.create_client("s3", endpoint_url=endpoint_url, config=Config(
            max_pool_connections=max_pool_connections, connect_timeout=connect_timeout,
            read_timeout=read_timeout, retries={"mode": "standard", "max_attempts": max_attempts},
            **common))
        # check() must fail within seconds on an unreachable endpoint: few attempts, short waits.
        self._probe = session.create_client("s3", endpoint_url=endpoint_url, config=Config(
            max_pool_connections=1, connect_timeout=min(connect_timeout, 2.0),
            read_timeout=min(read_timeout, 5.0), retries={"mode": "standard", "max_attempts": 2},
            **common))
        self.endpoint = redact(self.client.meta.endpoint_url)

    # -- reads --------------------------------------------------------------------------------

    def check(self, prefix: str, where: str) -> None:
        with self.errors(where, "ListObjectsV2"):
            self._probe.list_objects_v2(Bucket=self.bucket, Prefix=prefix, MaxKeys=1)

    def head(self, key: str, where: str) -> None:
        with self.errors(where, "HeadObject", key):
            self.client.head_object(Bucket=self.bucket, Key=key)

    def get(self, key: str, where: str, start: int = 0, length: int | None = None) -> BinaryIO:
        extra = {}
        if start or length is not None:
            end = "" if length is None else str(start + length - 1)
            extra["Range"] = f"bytes={start}-{end}"
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=key, **extra)
        except ClientError as exc:
            if _code(exc) in RANGE_NOT_SATISFIABLE:
                return io.BytesIO()  # the object exists; the range starts past its end
            self.fail(exc, where, "GetObject", key)
        except BotoCoreError as exc:
            self.fail(exc, where, "GetObject", key)
        return _Body(resp["Body"], self, where, key)  # type: ignore[return-value]

    def list(self, prefix: str, where: str) -> Iterator[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix)
        with self.errors(where, "ListObjectsV2"):
            for page in pages:
                for obj in page.get("Contents", ()):
                    yield obj["Key"]

    # -- writes -------------------------------------------------------------------------------

    def put(self, key: str, where: str, source: BinaryIO, if_absent: bool,
            exists: Any) -> bool:
        """Write ``source`` at ``key``; ``exists()`` is asked before a large upload."""
        first = _read_up_to(source, self.multipart_threshold)
        if len(first) < self.multipart_threshold:
            return self._put_small(key, where, first, if_absent)
        if if_absent and exists():
            return False  # skip uploading a large body the store already holds
        return self._put_multipart(key, where, first, source, if_absent)

    def delete(self, key: str, where: str) -> None:
        with self.errors(where, "DeleteObject", key):
            self.client.delete_object(Bucket=self.bucket, Key=key)

    def _put_small(self, key: str, where: str, body: bytes, if_absent: bool) -> bool:
        return self._conditional("PutObject", where, key, if_absent, lambda cond: (
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body, **cond)))

    def _conditional(self, op: str, where: str, key: str, if_absent: bool,
                     call: Callable[[dict[str, str]], object]) -> bool:
        """Run a write with ``If-None-Match: *`` when ``if_absent``: True when it wrote, False
        when the object already existed; a conflicting concurrent write is retried."""
        cond = {"IfNoneMatch": "*"} if if_absent else {}
        for _ in range(_CONFLICT_ATTEMPTS):
            try:
                call(cond)
                return True
            except ClientError as exc:
                if _code(exc) in PRECONDITION and if_absent:
                    return False
                if _code(exc) not in CONFLICT:
                    self.fail(exc, where, op, key)
            except BotoCoreError as exc:
                self.fail(exc, where, op, key)
        raise UnavailableError(f"{where}: conflicting concurrent writes ({op})")

    def _put_multipart(self, key: str, where: str, first: bytes, source: BinaryIO,
                       if_absent: bool) -> bool:
        with self.errors(where, "CreateMultipartUpload", key):
            upload_id = self.client.create_multipart_upload(
                Bucket=self.bucket, Key=key, ChecksumAlgorithm="CRC32")["UploadId"]
        done = False
        try:
            parts = self._upload_parts(key, where, upload_id, first, source)
            done = self._complete(key, where, upload_id, parts, if_absent)
            return done
        finally:
            if not done:
                try:
                    self.client.abort_multipart_upload(
                        Bucket=self.bucket, Key=key, UploadId=upload_id)
                except (ClientError, BotoCoreError):
                    pass  # an orphaned upload is reclaimed by the bucket's lifecycle rule

    def _upload_parts(self, key: str, where: str, upload_id: str, first: bytes,
                      source: BinaryIO) -> _Parts:
        parts: _Parts = []
        chunk, number = first, 1
        while chunk:
            with self.errors(where, "UploadPart", key):
                resp = self.client.upload_part(Bucket=self.bucket, Key=key, UploadId=upload_id,
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

    def _complete(self, key: str, where: str, upload_id: str, parts: _Parts,
                  if_absent: bool) -> bool:
        return self._conditional("CompleteMultipartUpload", where, key, if_absent, lambda cond: (
            self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload_id,
                MultipartUpload={"Parts": parts}, **cond)))

    # -- errors -------------------------------------------------------------------------------

    @contextmanager
    def errors(self, where: str, op: str, key: str | None = None) -> Iterator[None]:
        """Translate botocore errors raised inside the block (the one translation point)."""
        try:
            yield
        except (ClientError, BotoCoreError) as exc:
            self.fail(exc, where, op, key)

    def fail(self, exc: Exception, where: str, op: str, key: str | None) -> NoReturn:
        if isinstance(exc, ParamValidationError):
            raise exc  # a bug in neffcache, not an unavailable store
        if isinstance(exc, ClientError):
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?")
            raise client_failure(where, _code(exc), status, op, key) from exc
        if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
            raise no_credentials(where, op) from exc
        raise unreachable(where, self.endpoint, type(exc).__name__, op) from exc


class _Body(ObjectStream):
    """An object's streaming body that translates botocore errors raised while reading."""

    def __init__(self, body: Any, s3: BotocoreS3, where: str, key: str) -> None:
        super().__init__()
        self._body, self._s3, self._where, self._key = body, s3, where, key

    def read(self, size: int | None = -1) -> bytes:
        with self._s3.errors(self._where, "GetObject", self._key):
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
