"""A store in an S3 bucket under a prefix (AWS or S3-compatible), through obstore."""

from __future__ import annotations

import contextlib
import io
import math
import os
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, BinaryIO

import obstore
from obstore.exceptions import AlreadyExistsError, BaseError, PreconditionError
from obstore.store import S3Store as _Client

from neffcache.errors import IntegrityError, NotFoundError, UsageError
from neffcache.store.base import (
    BLOBS,
    PACKS,
    ObjectStream,
    Store,
    check_key,
    read_full,
    recognise_store,
)
from neffcache.store.s3_botocore import UploadClient, profile_credentials
from neffcache.store.s3_config import (
    ENVIRONMENT,
    NONE,
    MiB,
    S3Tuning,
    load_s3_settings,
    parse_s3_url,
)
from neffcache.store.s3_errors import (
    RANGE_NOT_SATISFIABLE,
    no_credentials,
    response_code,
    translate,
)

if TYPE_CHECKING:
    from typing import Unpack

    from obstore.store import S3Config  # a TypedDict of the type stubs only

REQUEST_TIMEOUT = 15 * 60.0  # a whole request; a stalled body trips READ_TIMEOUT sooner
RETRY_TIMEOUT = 3 * 60.0  # no retry starts later than this after a call's first attempt
MAX_BACKOFF = 15.0  # obstore's default cap on one backoff sleep
PROBE_TIMEOUT = 5.0  # check() fails within about this on an unreachable endpoint
CONNECT_TIMEOUT, READ_TIMEOUT = 5.0, 60.0  # one connection attempt; one stalled read
POOL_CONNECTIONS = 64  # connections kept open per client
# Memory: an upload holds MULTIPART_CONCURRENCY + 2 parts, and at most MULTIPART_UPLOADS run
# at once per store, whatever the callers' threads (issue 22: 568 MiB peak RSS unbounded, ~135).
MULTIPART_CONCURRENCY = 2
MULTIPART_UPLOADS = 2
_CLIENT_ERRORS = (BaseError, FileNotFoundError)  # obstore's "missing object" is the latter
_PROBE_PREFIX = "neffcache-check"
_CONTENT_ADDRESSED = (BLOBS, PACKS)  # rewriting one of these rewrites the same bytes


class S3Store(Store):
    """Objects at ``s3://<bucket>/<prefix>/<key>``. A reader needs s3:GetObject and
    s3:ListBucket (without it a missing key is a 403: "unavailable"). ``environ`` is what
    neffcache's own decisions read; obstore reads the process environment for the rest."""

    def __init__(self, bucket: str, prefix: str = "", *, environ: Mapping[str, str] | None = None,
                 deadline: float | None = None, create: bool = False,
                 **tuning: Unpack[S3Tuning]) -> None:
        env = os.environ if environ is None else environ
        self.settings = load_s3_settings(bucket, prefix, env, tuning)
        self.bucket, self.prefix = bucket, self.settings.location.prefix
        self.url, self.endpoint = self.settings.url, self.settings.endpoint
        self.create = create
        storage_class = self.settings.puts.storage_class
        self._attributes: Any = {"Storage-Class": storage_class} if storage_class else None
        self._provider = profile_credentials(self.settings.credentials, self.url, env) \
            if self.settings.credentials.needs_botocore else None
        left = math.inf if deadline is None else max(0.05, deadline - time.monotonic())
        self._client = self._connect(tuple(min(t, left) for t in (
            CONNECT_TIMEOUT, READ_TIMEOUT, REQUEST_TIMEOUT, RETRY_TIMEOUT)))
        # check() fails within seconds on an unreachable endpoint (as many attempts as others).
        self._probe_timeouts = tuple(min(t, left) for t in (2.0, 5.0, PROBE_TIMEOUT, PROBE_TIMEOUT))
        self._probe: _Client | None = None
        self._lock = threading.Lock()
        self._multipart = threading.BoundedSemaphore(MULTIPART_UPLOADS)
        uploads = UploadClient(self.settings, (CONNECT_TIMEOUT, READ_TIMEOUT))
        self.list_uploads, self.abort_upload = uploads.list, uploads.abort  # MultipartUploads

    @classmethod
    def from_url(cls, url: str, environ: Mapping[str, str] | None = None, *,
                 deadline: float | None = None, create: bool = False,
                 **tuning: Unpack[S3Tuning]) -> S3Store:
        return cls(*parse_s3_url(url), environ=environ, deadline=deadline, create=create,
                   **tuning)

    def check(self) -> None:
        with self._lock:
            if self._probe is None:
                self._probe = self._connect(self._probe_timeouts)
        with self._translated("ListObjectsV2"):  # one small LIST: bucket, keys, access
            obstore.list_with_delimiter(self._probe, _PROBE_PREFIX)
        recognise_store(self, create=self.create)

    def has(self, key: str) -> bool:
        try:
            self._head(key)
        except NotFoundError:
            return False
        return True

    def open(self, key: str, start: int = 0, length: int | None = None) -> BinaryIO:
        if start < 0 or (length is not None and length < 0):
            raise UsageError(f"{self.url}/{key}: negative range start={start} length={length}")
        check_key(key)
        if length == 0:
            self._head(key)
            return io.BytesIO()
        ranged = (start, start + length) if length is not None else {"offset": start}
        options: dict[str, Any] = {"range": ranged} if length is not None or start else {}
        with self._translated("GetObject", key):
            try:
                result = obstore.get(self._client, key, options=options)  # type: ignore[arg-type]
            except _CLIENT_ERRORS as exc:
                if response_code(exc)[0] not in RANGE_NOT_SATISFIABLE:
                    raise
                return io.BytesIO()  # the object exists; the range starts past its end
        body = _Body(iter(result.stream(min_chunk_size=256 * 1024)), self, key)
        return body  # type: ignore[return-value]

    def put(self, key: str, source: BinaryIO, *, if_absent: bool = True) -> bool:
        check_key(key)
        self._no_source("PutObject")
        threshold = self.settings.multipart_threshold
        # One conditional PutObject (If-None-Match: *) unless the key is content-addressed:
        # obstore cannot make a multipart upload conditional.
        one_put = if_absent and not key.startswith(_CONTENT_ADDRESSED)
        sized = _size_of(source)
        head = b""
        if one_put or sized is None or sized < threshold:
            head = read_full(source, threshold)
            if one_put or len(head) < threshold:
                return self._put_once(key, head if len(head) < threshold
                                      else _whole(head, source), if_absent)
        if if_absent and self.has(key):
            return False  # skip uploading a large body the store already holds
        with self._multipart:
            if not head and _is_local_file(source):
                return self._put_multipart(key, source)
            # ``source`` may be an obstore stream (S3 -> S3), and reading one inside obstore.put
            # panics ("Cannot start a runtime from within a runtime"): spooled to a temp file.
            with tempfile.TemporaryFile(prefix=".neffcache-put-") as spool:
                spool.write(head or read_full(source, threshold))
                shutil.copyfileobj(source, spool, MiB)
                spool.seek(0)
                return self._put_multipart(key, spool)

    def _put_multipart(self, key: str, source: BinaryIO) -> bool:
        """Unconditional (obstore cannot make one conditional; a racing writer of a
        content-addressed key writes the same bytes). A source failing its sha256 aborts it."""
        with self._translated("UploadPart", key):
            try:
                obstore.put(self._client, key, source, use_multipart=True,
                            chunk_size=self.settings.part_size,
                            max_concurrency=MULTIPART_CONCURRENCY, attributes=self._attributes)
            except (*_CLIENT_ERRORS, OSError):
                # obstore aborts, raising the source's error as an OSError's text.
                failure = getattr(source, "failure", None)
                if isinstance(failure, IntegrityError):
                    raise failure from None
                raise
        return True

    def _put_once(self, key: str, body: bytes | memoryview, if_absent: bool) -> bool:
        with self._translated("PutObject", key):
            try:
                obstore.put(self._client, key, body, mode="create" if if_absent else "overwrite",
                            use_multipart=False, attributes=self._attributes)
            except (AlreadyExistsError, PreconditionError):
                if if_absent:
                    return False
                raise
        return True

    def list(self, prefix: str) -> Iterator[str]:
        # object_store lists whole path segments: a prefix ending inside a name is filtered
        parent = prefix.rpartition("/")[0]
        with self._translated("ListObjectsV2"):
            for batch in obstore.list(self._client, parent or None, chunk_size=1000):
                yield from (meta["path"] for meta in batch if meta["path"].startswith(prefix))

    def delete(self, key: str) -> None:
        check_key(key)
        with contextlib.suppress(NotFoundError), self._translated("DeleteObject", key):
            obstore.delete(self._client, key)

    def _connect(self, timeouts: tuple[float, ...]) -> _Client:
        """A client with ``timeouts``: connect, read, whole request, retry window (seconds).
        obstore retries a failed request (5xx, a dropped connection, a read timeout) with
        jittered backoff, and resumes a response cut short with a ranged GET."""
        connect, read, request, retrying = (timedelta(seconds=t) for t in timeouts)
        s = self.settings
        config: S3Config = {"virtual_hosted_style_request": s.location.virtual_hosted}
        if s.location.endpoint:
            config["endpoint"] = s.location.endpoint
        if s.location.region:
            config["region"] = s.location.region
        if s.unsigned:
            config["unsigned_payload"] = True
        if s.puts.sse:  # on every PutObject and CreateMultipartUpload
            config["server_side_encryption"] = s.puts.sse
        if s.puts.kms_key_id:
            config["sse_kms_key_id"] = s.puts.kms_key_id
        if s.credentials.name == ENVIRONMENT:  # this store's keys, not the process's
            config.update(dict(s.keys))  # type: ignore[typeddict-item]
        options = dict(connect_timeout=connect, read_timeout=read, timeout=request,
                       pool_max_idle_per_host=str(POOL_CONNECTIONS),
                       allow_http=s.location.allow_http)
        retry = {"max_retries": max(0, s.max_attempts - 1), "retry_timeout": retrying,
                 "backoff": {"max_backoff": min(retrying, timedelta(seconds=MAX_BACKOFF))}}
        try:
            return _Client(self.bucket, prefix=self.prefix or None, config=config,
                           client_options=options, retry_config=retry,  # type: ignore[arg-type]
                           credential_provider=self._provider)  # type: ignore[arg-type]
        except _CLIENT_ERRORS as exc:
            raise self._error(exc, "configure", None) from None

    def _head(self, key: str) -> None:
        check_key(key)
        with self._translated("HeadObject", key):
            obstore.head(self._client, key)

    @contextlib.contextmanager
    def _translated(self, op: str, key: str | None = None) -> Iterator[None]:
        self._no_source(op)
        try:
            yield
        except _CLIENT_ERRORS as exc:
            raise self._error(exc, op, key) from None

    def _no_source(self, op: str) -> None:
        if self.settings.credentials.name == NONE:
            raise no_credentials(self.url, op)

    def _error(self, exc: BaseException, op: str, key: str | None) -> Exception:
        where = f"{self.url}/{key}" if key else self.url
        return translate(exc, where=where, endpoint=self.endpoint, op=op, key=key,
                         source=self.settings.credentials.name)


class _Body(ObjectStream):
    """An object's body as obstore's chunks, handed on uncopied where whole."""

    zero_copy_reads = True  # restore.install.read_piece: read() over readinto a buffer

    def __init__(self, chunks: Iterator[bytes], store: S3Store, key: str) -> None:
        super().__init__()
        self._chunks, self._store, self._key = chunks, store, key
        self._buf = memoryview(b"")

    def _fill(self) -> bool:
        try:
            self._buf = memoryview(next(self._chunks))
        except StopIteration:
            return False
        except _CLIENT_ERRORS as exc:
            raise self._store._error(exc, "GetObject", self._key) from None
        return True

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            parts = [bytes(self._buf)]
            while self._fill():
                parts.append(bytes(self._buf))
            self._buf = memoryview(b"")
            return b"".join(parts)
        if not self._buf and not self._fill():
            return b""
        whole = self._buf.obj
        if size >= len(self._buf) and type(whole) is bytes and len(whole) == len(self._buf):
            self._buf = memoryview(b"")  # a whole chunk as obstore made it: handed on, no copy
            return whole
        out, self._buf = self._buf[:size], self._buf[size:]
        return bytes(out)

    def _close_source(self) -> None:
        self._chunks = iter(())
        self._buf = memoryview(b"")


def _whole(first: bytes, source: BinaryIO) -> bytes | memoryview:
    """``first`` and the rest of ``source``, a BytesIO uncopied (a manifest may be 234 MiB)."""
    if isinstance(source, io.BytesIO):
        start = source.tell() - len(first)
        del first
        return source.getbuffer()[start:]
    body = bytearray(first)
    del first
    while chunk := source.read(MiB):
        body += chunk
    return memoryview(body)


def _is_local_file(source: BinaryIO) -> bool:
    """Whether obstore may read ``source`` without a spool (a regular local file)."""
    try:
        return stat.S_ISREG(os.fstat(source.fileno()).st_mode)
    except (AttributeError, OSError, ValueError):
        return False


def _size_of(source: BinaryIO) -> int | None:
    sized = getattr(source, "size", None)
    if isinstance(sized, int):
        return sized
    if not _is_local_file(source):
        return None
    return max(0, os.fstat(source.fileno()).st_size - source.tell())
