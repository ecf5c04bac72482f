"""A store in an S3 bucket under a prefix (AWS or any S3-compatible server such as SeaweedFS),
through one client for reads and writes: obstore (Rust's object_store, behind a thin Python
binding; ~10 ms to import, requests, SigV4 signing, retries and connection pooling run outside
the GIL). ``s3_config`` decides endpoint, region and credential source; ``s3_errors`` turns
the client's exceptions into ``NotFoundError`` / ``UnavailableError`` / ``ConfigError``.

Retries are obstore's (one policy for every call): a failed request (5xx such as SlowDown,
a refused or dropped connection, a timeout of a read-only request) is sent again up to
``max_attempts`` times in all, after exponential backoff with jitter (100 ms, then each sleep
drawn between 100 ms and twice the last; capped),
and a response cut short is resumed with a ranged GET from the last byte received. With a
``deadline`` every wait — connect, read, a whole request, the backoff and the retrying — is
clipped to what is left of it when the store is opened.

Permissions: a reader needs ``s3:GetObject`` and ``s3:ListBucket`` on the prefix. Without
ListBucket S3 answers 403 instead of 404 for a missing key, which reads as "unavailable".
"""

from __future__ import annotations

import io
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
from neffcache.store.base import BLOBS, PACKS, ObjectStream, Upload, check_key, recognise_store
from neffcache.store.s3_config import (
    ENVIRONMENT,
    NONE,
    CredentialSource,
    PutSettings,
    S3Location,
    byte_count,
    configured_endpoint,
    credential_source,
    locate,
    parse_s3_url,
    put_settings,
    read_profile,
    unsigned_payload,
)

if TYPE_CHECKING:
    from obstore.store import S3Config  # a TypedDict of the type stubs only
from neffcache.store.s3_errors import (
    RANGE_NOT_SATISFIABLE,
    no_credentials,
    redact,
    response_code,
    translate,
)

MiB = 1 << 20
# Whole requests get this long; a stalled body is caught sooner by the read timeout.
REQUEST_TIMEOUT = 15 * 60.0
RETRY_TIMEOUT = 3 * 60.0  # no retry starts later than this after a call's first attempt
MAX_BACKOFF = 15.0  # obstore's default cap on one backoff sleep
PROBE_TIMEOUT = 5.0  # check() fails within about this on an unreachable endpoint
CONNECT_TIMEOUT, READ_TIMEOUT = 5.0, 60.0  # one connection attempt; one stalled read
POOL_CONNECTIONS = 64  # connections kept open per client
# Memory: a multipart upload holds up to MULTIPART_CONCURRENCY parts (part_size each) in
# flight, plus the part being read and the one being filled, and at most MULTIPART_UPLOADS run
# at once per store, whatever the callers' threads (6 x 64 MiB pushed on 8 threads: 568 MiB
# peak RSS with 16 MiB parts, 4 each and no bound; 297-345 MiB with 2 x 2 through a spool;
# 232 MiB read straight from the files; 129-142 MiB so with 8 MiB parts; issue 22).
MULTIPART_CONCURRENCY = 2
PART_SIZE = 8 * MiB  # also the default multipart threshold
MULTIPART_UPLOADS = 2
# obstore raises FileNotFoundError (not one of its own classes) for a missing object.
_CLIENT_ERRORS = (BaseError, FileNotFoundError)
_PROBE_PREFIX = "neffcache-check"
# Keys whose name is the sha256 of their bytes: rewriting one rewrites the same bytes.
_CONTENT_ADDRESSED = (BLOBS, PACKS)
_KEY_VARIABLES = (("access_key_id", "AWS_ACCESS_KEY_ID"),
                  ("secret_access_key", "AWS_SECRET_ACCESS_KEY"),
                  ("session_token", "AWS_SESSION_TOKEN"))


class S3Store:
    """Objects at ``s3://<bucket>/<prefix>/<key>``; see the module docstring for the contract.

    ``environ`` is what neffcache's own decisions read (endpoint, region, credential source;
    tests pass their own); obstore itself reads the process environment for the rest."""

    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None,
                 max_attempts: int = 5, multipart_threshold: int = PART_SIZE,
                 part_size: int = PART_SIZE, environ: Mapping[str, str] | None = None,
                 deadline: float | None = None, create: bool = False) -> None:
        if part_size < 5 * MiB or multipart_threshold < part_size:
            raise UsageError("S3 store: part_size must be >= 5 MiB and <= multipart_threshold")
        env = os.environ if environ is None else environ
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.multipart_threshold, self.part_size = multipart_threshold, part_size
        self.create = create  # check() gives a store without its marker one (recognise_store)
        self._keys = {name: env[var] for name, var in _KEY_VARIABLES if env.get(var)}
        profile = read_profile(env)
        self.location = locate(bucket, self.prefix, endpoint_url, env, profile or {})
        self._unsigned = unsigned_payload(self.location, env)
        self.put_settings: PutSettings = put_settings(env)
        self._attributes: Any = {"Storage-Class": self.put_settings.storage_class} \
            if self.put_settings.storage_class else None
        self.credentials: CredentialSource = credential_source(env, profile)
        self.endpoint = redact(self.location.endpoint or "https://s3.amazonaws.com")
        self._provider = None
        if self.credentials.needs_botocore:
            from neffcache.store.s3_profile import profile_credentials

            self._provider = profile_credentials(self.credentials, self.url, env)
        # With a deadline (a time.monotonic() value) no wait may outlast it.
        left = None if deadline is None else max(0.05, deadline - time.monotonic())

        def clip(seconds: float) -> float:
            return seconds if left is None else min(seconds, left)

        self._retries = max(0, max_attempts - 1)
        self._client = self._connect((clip(CONNECT_TIMEOUT), clip(READ_TIMEOUT),
                                      clip(REQUEST_TIMEOUT), clip(RETRY_TIMEOUT)),
                                     POOL_CONNECTIONS)
        # check() must fail within seconds on an unreachable endpoint: short waits, and no
        # retry starts after PROBE_TIMEOUT (the same number of attempts as every other call).
        self._probe_timeouts = (clip(min(CONNECT_TIMEOUT, 2.0)), clip(min(READ_TIMEOUT, 5.0)),
                                clip(PROBE_TIMEOUT), clip(PROBE_TIMEOUT))
        self._pool = POOL_CONNECTIONS
        self._probe: _Client | None = None
        self._lock = threading.Lock()
        self._multipart = threading.BoundedSemaphore(MULTIPART_UPLOADS)
        self._upload_settings = (CONNECT_TIMEOUT, READ_TIMEOUT, max_attempts)  # for gc
        self._uploads: Any = None  # s3_uploads.UploadClient, made when gc first asks

    @classmethod
    def from_url(cls, url: str, environ: Mapping[str, str] | None = None,
                 **options: Any) -> S3Store:
        """``s3://bucket/prefix``; the endpoint comes from AWS_ENDPOINT_URL_S3 or
        AWS_ENDPOINT_URL (else AWS's regional endpoint), credentials from the standard chain;
        NEFFCACHE_S3_MULTIPART_THRESHOLD and NEFFCACHE_S3_PART_SIZE (bytes) tune uploads;
        NEFFCACHE_S3_SSE, NEFFCACHE_S3_SSE_KMS_KEY_ID and NEFFCACHE_S3_STORAGE_CLASS go on every
        PUT (``s3_config.put_settings``)."""
        env = os.environ if environ is None else environ
        bucket, prefix = parse_s3_url(url)
        options.setdefault("endpoint_url", configured_endpoint(env))
        for name, var in (("multipart_threshold", "NEFFCACHE_S3_MULTIPART_THRESHOLD"),
                          ("part_size", "NEFFCACHE_S3_PART_SIZE")):
            if env.get(var):
                options.setdefault(name, byte_count(var, env[var]))
        return cls(bucket, prefix, environ=environ, **options)

    # -- the protocol -------------------------------------------------------------------------

    def check(self) -> None:
        with self._lock:
            if self._probe is None:
                self._probe = self._connect(self._probe_timeouts, self._pool)
        self._no_source("ListObjectsV2")
        try:  # one small LIST under a name nothing uses: proves bucket, credentials and access
            obstore.list_with_delimiter(self._probe, _PROBE_PREFIX)
        except _CLIENT_ERRORS as exc:
            raise self._error(exc, "ListObjectsV2", None) from None
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
        options: dict[str, Any] = {}
        if length is not None:
            options["range"] = (start, start + length)
        elif start:
            options["range"] = {"offset": start}
        self._no_source("GetObject")
        try:
            result = obstore.get(self._client, key, options=options)  # type: ignore[arg-type]
        except _CLIENT_ERRORS as exc:
            if response_code(exc)[0] in RANGE_NOT_SATISFIABLE:
                return io.BytesIO()  # the object exists; the range starts past its end
            raise self._error(exc, "GetObject", key) from None
        return _Body(iter(result.stream(min_chunk_size=256 * 1024)), self, key)  # type: ignore[return-value]

    def read(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        with self.open(key, start, length) as body:
            return body.read()

    def put(self, key: str, source: BinaryIO, *, if_absent: bool = True) -> bool:
        check_key(key)
        self._no_source("PutObject")
        sized = _size_of(source)  # a VerifyingReader says how large it is; a local file too
        if sized is not None and sized >= self.multipart_threshold and (
                not if_absent or key.startswith(_CONTENT_ADDRESSED)):
            if if_absent and self.has(key):
                return False
            with self._multipart:  # before reading: only the uploads running hold bytes
                if _is_local_file(source):
                    return self._put_multipart(key, source)
                return self._put_spooled(
                    key, source, [_read_up_to(source, self.multipart_threshold)])
        first = _read_up_to(source, self.multipart_threshold)
        if len(first) < self.multipart_threshold or (
                if_absent and not key.startswith(_CONTENT_ADDRESSED)):
            # One conditional PutObject (If-None-Match: *): the server refuses to overwrite.
            return self._put_once(key, first if len(first) < self.multipart_threshold
                                  else _whole(first, source), if_absent)
        if if_absent and self.has(key):
            return False  # skip uploading a large body the store already holds
        head = [first]  # handed on, not held here: the spool takes it (16 MiB)
        del first
        with self._multipart:  # bounded: each holds MULTIPART_CONCURRENCY parts in memory
            return self._put_spooled(key, source, head)

    def _put_spooled(self, key: str, source: BinaryIO, head: list[bytes]) -> bool:
        # The body is spooled first to an unnamed temp file (bounded memory, no name to leave
        # behind): ``source`` may itself be an obstore stream (an S3 -> S3 copy), and reading one
        # inside obstore.put panics ("Cannot start a runtime from within a runtime"). A
        # source that fails its sha256 (VerifyingReader) fails here, before any upload starts.
        with tempfile.TemporaryFile(prefix=".neffcache-put-") as spool:
            spool.write(head.pop())
            shutil.copyfileobj(source, spool, MiB)
            spool.seek(0)
            return self._put_multipart(key, spool)

    def _put_multipart(self, key: str, source: BinaryIO) -> bool:
        """A multipart upload read from ``source`` (a local file, or one read through a
        VerifyingReader: obstore reads to end of file before it completes the upload, so a
        reader that fails its sha256 there aborts the upload, and nothing is committed)."""
        # A multipart upload cannot be made conditional through obstore; a racing writer of a
        # content-addressed key writes the same bytes, so the last complete upload is harmless.
        try:
            obstore.put(self._client, key, source, use_multipart=True,
                        chunk_size=self.part_size, max_concurrency=MULTIPART_CONCURRENCY,
                        attributes=self._attributes)
        except (*_CLIENT_ERRORS, OSError) as exc:
            # obstore aborts the upload when reading the source fails, and raises an OSError
            # carrying the source's error as text: raise the source's own IntegrityError.
            failure = getattr(source, "failure", None)
            if isinstance(failure, IntegrityError):
                raise failure from None
            if isinstance(exc, _CLIENT_ERRORS):
                raise self._error(exc, "UploadPart", key) from None
            raise
        return True

    def list(self, prefix: str) -> Iterator[str]:
        """Keys under ``prefix``; object_store lists whole path segments, so a prefix that ends
        inside a name is listed from its parent and filtered."""
        parent = prefix.rpartition("/")[0]
        self._no_source("ListObjectsV2")
        try:
            for batch in obstore.list(self._client, parent or None, chunk_size=1000):
                for meta in batch:
                    if meta["path"].startswith(prefix):
                        yield meta["path"]
        except _CLIENT_ERRORS as exc:
            raise self._error(exc, "ListObjectsV2", None) from None

    def delete(self, key: str) -> None:
        check_key(key)
        self._no_source("DeleteObject")
        try:
            obstore.delete(self._client, key)
        except _CLIENT_ERRORS as exc:
            error = self._error(exc, "DeleteObject", key)
            if not isinstance(error, NotFoundError):
                raise error from None

    # -- multipart uploads (store.base.MultipartUploads; gc only) ---------------------------

    def list_uploads(self) -> Iterator[Upload]:
        """Incomplete multipart uploads under the prefix (through botocore: see s3_uploads)."""
        return self._upload_client().list()

    def abort_upload(self, upload: Upload) -> None:
        self._upload_client().abort(upload)

    def _upload_client(self) -> Any:
        from neffcache.store.s3_uploads import UploadClient

        with self._lock:
            if self._uploads is None:
                connect, read, attempts = self._upload_settings
                self._uploads = UploadClient(self.location, where=self.url,
                                             endpoint=self.endpoint, source=self.credentials,
                                             connect_timeout=connect, read_timeout=read,
                                             max_attempts=attempts)
            return self._uploads

    # -- helpers ------------------------------------------------------------------------------

    def _connect(self, timeouts: tuple[float, float, float, float], pool: int) -> _Client:
        """A client whose connect, read and whole-request timeouts and retry window are
        ``timeouts`` (seconds); one backoff sleep never outlasts the retry window."""
        connect, read, request, retrying = (timedelta(seconds=t) for t in timeouts)
        loc: S3Location = self.location
        config: S3Config = {"virtual_hosted_style_request": loc.virtual_hosted}
        if loc.endpoint:
            config["endpoint"] = loc.endpoint
        if loc.region:
            config["region"] = loc.region
        if self._unsigned:
            config["unsigned_payload"] = True
        if self.put_settings.sse:  # on every PutObject and CreateMultipartUpload
            config["server_side_encryption"] = self.put_settings.sse
        if self.put_settings.kms_key_id:
            config["sse_kms_key_id"] = self.put_settings.kms_key_id
        if self.credentials.name == ENVIRONMENT:  # this store's keys, not the process's
            config.update(self._keys)  # type: ignore[typeddict-item]
        options = dict(connect_timeout=connect, read_timeout=read, timeout=request,
                       pool_max_idle_per_host=str(pool), allow_http=loc.allow_http)
        retry = {"max_retries": self._retries, "retry_timeout": retrying,
                 "backoff": {"max_backoff": min(retrying, timedelta(seconds=MAX_BACKOFF))}}
        try:
            return _Client(self.bucket, prefix=self.prefix or None, config=config,
                           client_options=options, retry_config=retry,  # type: ignore[arg-type]
                           credential_provider=self._provider)  # type: ignore[arg-type]
        except _CLIENT_ERRORS as exc:
            raise self._error(exc, "configure", None) from None

    def _put_once(self, key: str, body: bytes | memoryview, if_absent: bool) -> bool:
        try:
            obstore.put(self._client, key, body, mode="create" if if_absent else "overwrite",
                        use_multipart=False, attributes=self._attributes)
        except (AlreadyExistsError, PreconditionError):
            if if_absent:
                return False
            raise
        except _CLIENT_ERRORS as exc:
            raise self._error(exc, "PutObject", key) from None
        return True

    def _head(self, key: str) -> None:
        check_key(key)
        self._no_source("HeadObject")
        try:
            obstore.head(self._client, key)
        except _CLIENT_ERRORS as exc:
            raise self._error(exc, "HeadObject", key) from None

    def _no_source(self, op: str) -> None:
        if self.credentials.name == NONE:
            raise no_credentials(self.url, op)

    def _error(self, exc: BaseException, op: str, key: str | None) -> Exception:
        where = f"{self.url}/{key}" if key else self.url
        return translate(exc, where=where, endpoint=self.endpoint, op=op, key=key,
                         source=self.credentials.name)


class _Body(ObjectStream):
    """An object's body as a stream: chunks from obstore, errors translated while reading.
    ``read(n)`` with ``n`` at least the chunk left hands on obstore's own chunk, no copy."""

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

    def readinto(self, buffer: Any) -> int:
        if not self._buf and not self._fill():
            return 0
        n = min(len(buffer), len(self._buf))
        buffer[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n

    def _close_source(self) -> None:
        self._chunks = iter(())
        self._buf = memoryview(b"")


def _whole(first: bytes, source: BinaryIO) -> bytes | memoryview:
    """``first`` (just read from ``source``) and the rest of ``source``, as one body, with no
    copy of the whole (a manifest of a million files is 234 MiB): a ``BytesIO``'s own buffer
    from where ``first`` began, else one buffer the rest is read into."""
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
    """Whether ``source`` reads a regular file on this host (a VerifyingReader over one says
    so too): obstore may read it itself, with no spool; an obstore stream must be spooled."""
    try:
        return stat.S_ISREG(os.fstat(source.fileno()).st_mode)
    except (AttributeError, OSError, ValueError):
        return False


def _size_of(source: BinaryIO) -> int | None:
    """How many bytes ``source`` has left to read, when it says (``size``, a VerifyingReader)
    or is a regular local file (its size past the current position); else None."""
    sized = getattr(source, "size", None)
    if isinstance(sized, int):
        return sized
    if not _is_local_file(source):
        return None
    return max(0, os.fstat(source.fileno()).st_size - source.tell())


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
