"""A botocore-free S3 read client: GET (ranged), HEAD and ListObjectsV2 over HTTP/1.1, SigV4.

Why: a boot-time restore only reads, and importing botocore and building a client costs about
0.2 s before the first byte moves; this module imports the standard library only, and not
http.client either (its header parser costs another ~25 ms; see ``neffcache.store.http1``).
Writes and the rarer setups (proxies, FIPS or dual-stack endpoints, SSO and assume-role
credentials) stay with botocore: ``neffcache.store.s3`` decides which client serves a store.

Behaviour, as botocore's standard mode: connections are pooled and kept alive (one per
concurrent request, up to ``max_pool_connections`` kept idle); connection failures, 429, 5xx,
SlowDown and RequestTimeout are retried up to ``max_attempts`` with full-jitter exponential
back-off (a request on a reused connection the server had closed is retried at once, not
counted); a bucket in another region is followed once using the ``x-amz-bucket-region`` header;
clock skew is corrected from the server's Date header. A response body is streamed; its
connection returns to the pool only after the body was read to its end.
"""

from __future__ import annotations

import io
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_plus, urlsplit

from neffcache.errors import ConfigError, UnavailableError
from neffcache.store.base import ObjectStream
from neffcache.store.http1 import Connection, IncompleteBody, ProtocolError, Response
from neffcache.store.s3_errors import (
    RANGE_NOT_SATISFIABLE,
    client_failure,
    no_credentials,
    redact,
    unreachable,
)
from neffcache.store.s3_sigv4 import (
    SigningKey,
    canonical_path,
    canonical_query,
    derive_key,
    sign_headers,
)

if TYPE_CHECKING:
    import ssl

    from neffcache.store.aws_credentials import Credentials

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
RETRY_CODES = frozenset({"SlowDown", "RequestTimeout", "RequestTimeoutException", "Throttling",
                         "ThrottlingException", "InternalError", "ServiceUnavailable"})
MAX_BACKOFF = 20.0
_ERROR_BODY_LIMIT = 64 * 1024
_CODE = re.compile(rb"<Code>([^<]{1,128})</Code>")
_REGION = re.compile(rb"<Region>([a-z0-9-]{1,32})</Region>")
_DNS_BUCKET = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
_NETWORK_ERRORS = (OSError, ProtocolError)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where requests for one bucket go: scheme, host (with a non-default port) and the path
    prefix of the bucket (``/bucket`` for path-style addressing, empty for virtual-hosted)."""

    scheme: str
    host: str
    port: int | None
    bucket_path: str

    @property
    def host_header(self) -> str:
        return f"{self.host}:{self.port}" if self.port else self.host

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host_header}"


def resolve_endpoint(bucket: str, region: str, endpoint_url: str | None) -> Endpoint:
    """Path-style on a custom endpoint (moto, SeaweedFS, MinIO, IP addresses); on AWS,
    virtual-hosted when the bucket name is DNS-safe without dots (TLS wildcard), else
    path-style on the regional endpoint."""
    if endpoint_url:
        parts = urlsplit(endpoint_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"S3 endpoint {redact(endpoint_url)!r}: expected http(s)://HOST")
        base = parts.path.rstrip("/")
        return Endpoint(parts.scheme, parts.hostname, parts.port, f"{base}/{bucket}")
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    if _DNS_BUCKET.match(bucket) and "--" not in bucket:
        return Endpoint("https", f"{bucket}.s3.{region}.{suffix}", None, "")
    return Endpoint("https", f"s3.{region}.{suffix}", None, f"/{bucket}")


class HttpS3Reader:
    """Reads one bucket; thread-safe. Keys passed in are full object keys (prefix included);
    ``where`` strings name the object in messages."""

    def __init__(self, bucket: str, *, region: str | None, endpoint_url: str | None,
                 credentials: Callable[[], Credentials | None], max_attempts: int = 5,
                 connect_timeout: float = 5.0, read_timeout: float = 60.0,
                 max_pool_connections: int = 64, ca_bundle: str | None = None) -> None:
        self.bucket = bucket
        self.region = region or "us-east-1"
        self._endpoint_url = endpoint_url
        self._fixed_region = region is not None or endpoint_url is not None
        self.endpoint = resolve_endpoint(bucket, self.region, endpoint_url)
        self._credentials = credentials
        self.max_attempts = max(1, max_attempts)
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self._ca_bundle = ca_bundle
        self._pool_size = max_pool_connections
        self._idle: list[Connection] = []
        self._lock = threading.Lock()
        self._key: SigningKey | None = None
        self._skew = 0.0  # seconds to add to this host's clock
        self._tls: ssl.SSLContext | None = None  # built once, at the first https connection

    # -- operations ---------------------------------------------------------------------------

    def get(self, key: str, where: str, start: int = 0, length: int | None = None,
            op: str = "GetObject") -> io.RawIOBase:
        """A stream of the object (or of a range); NotFoundError / UnavailableError. A range
        starting past the end is an empty stream."""
        headers = {}
        if start or length is not None:
            end = "" if length is None else str(start + length - 1)
            headers["Range"] = f"bytes={start}-{end}"
        reply = self._request("GET", self.endpoint.bucket_path + "/" + key, (), headers, op,
                              where, key, empty_on=RANGE_NOT_SATISFIABLE)
        if reply is None:
            return io.BytesIO()
        conn, resp = reply
        return HttpBody(self, conn, resp, where, op)

    def head(self, key: str, where: str) -> None:
        reply = self._request("HEAD", self.endpoint.bucket_path + "/" + key, (), {},
                              "HeadObject", where, key)
        assert reply is not None
        self._finish(*reply)

    def list(self, prefix: str, where: str, *, max_keys: int | None = None,
             attempts: int | None = None, timeouts: tuple[float, float] | None = None
             ) -> Iterator[str]:
        """Full keys under ``prefix``, page by page (ListObjectsV2, keys URL-encoded on the
        wire so any key survives XML)."""
        token: str | None = None
        while True:
            params = [("list-type", "2"), ("prefix", prefix), ("encoding-type", "url")]
            if max_keys is not None:
                params.append(("max-keys", str(max_keys)))
            if token:
                params.append(("continuation-token", token))
            reply = self._request("GET", self.endpoint.bucket_path + "/", params, {},
                                  "ListObjectsV2", where, None, attempts=attempts,
                                  timeouts=timeouts)
            assert reply is not None
            conn, resp = reply
            body = self._read_all(conn, resp, where, "ListObjectsV2")
            keys, token = parse_list_page(body)
            yield from keys
            if not token or max_keys is not None:
                return

    # -- requests -----------------------------------------------------------------------------

    def _request(self, method: str, path: str, params: Sequence[tuple[str, str]],
                 headers: dict[str, str], op: str, where: str, key: str | None, *,
                 empty_on: frozenset[str] = frozenset(), attempts: int | None = None,
                 timeouts: tuple[float, float] | None = None
                 ) -> tuple[Connection, Response] | None:
        """Send, retrying as botocore's standard mode does; the connection and the response
        (status 200/206, body unread), or None for a status in ``empty_on``."""
        limit = attempts or self.max_attempts
        attempt = 0
        redirected = stale_retried = False
        last = ""
        while attempt < limit:
            creds = self._credentials()
            if creds is None:
                raise no_credentials(where, op)
            conn, reused = self._take(self.endpoint, timeouts)
            try:
                resp = self._send(conn, method, path, params, headers, creds, timeouts)
            except _NETWORK_ERRORS as exc:
                conn.close()
                if reused and not stale_retried:  # the server closed an idle connection
                    stale_retried = True
                    continue
                last = type(exc).__name__
                attempt += 1
                self._backoff(attempt, limit)
                continue
            if resp.status in (200, 206):
                return conn, resp
            try:
                body = b"" if method == "HEAD" else resp.read(_ERROR_BODY_LIMIT)
            except _NETWORK_ERRORS:
                body = b""
            self._finish(conn, resp)
            match = _CODE.search(body)
            code = match.group(1).decode(errors="replace") if match else str(resp.status)
            if code in empty_on or str(resp.status) in empty_on:
                return None
            region = _bucket_region(resp, body)
            if region and region != self.region and not redirected:
                redirected = True
                self._move_to(region)
                continue
            if code == "RequestTimeTooSkewed" and self._correct_skew(resp):
                attempt += 1
                continue
            attempt += 1
            if attempt < limit and (resp.status in RETRY_STATUS or code in RETRY_CODES):
                self._backoff(attempt, limit)
                continue
            raise client_failure(where, code, resp.status, op, key)
        raise unreachable(where, redact(self.endpoint.url), last, op)

    def _send(self, conn: Connection, method: str, path: str,
              params: Sequence[tuple[str, str]], headers: dict[str, str], creds: Credentials,
              timeouts: tuple[float, float] | None) -> Response:
        if conn.sock is None:
            conn.connect(timeouts[0] if timeouts else self.connect_timeout,
                         timeouts[1] if timeouts else self.read_timeout)
        query = canonical_query(params)
        target = canonical_path(path) + (f"?{query}" if query else "")
        return conn.send(method, target,
                         self._sign(method, self.endpoint, path, params, headers, creds))

    def _sign(self, method: str, endpoint: Endpoint, path: str,
              params: Sequence[tuple[str, str]], headers: dict[str, str],
              creds: Credentials) -> dict[str, str]:
        now = time.gmtime(time.time() + self._skew)
        day = time.strftime("%Y%m%d", now)
        key = self._key
        if key is None or (key.access_key, key.day, key.region) != \
                (creds.access_key, day, self.region):
            key = self._key = derive_key(creds.access_key, creds.secret_key, day, self.region)
        return sign_headers(method, endpoint.host_header, path, params, headers, key,
                            time.strftime("%Y%m%dT%H%M%SZ", now), creds.token)

    def _backoff(self, attempt: int, limit: int) -> None:
        if attempt < limit:
            time.sleep(random.random() * min(MAX_BACKOFF, 2.0 ** (attempt - 1)))

    def _move_to(self, region: str) -> None:
        self.region = region
        self._key = None
        if self._endpoint_url is None:
            self.endpoint = resolve_endpoint(self.bucket, region, None)

    def _correct_skew(self, resp: Response) -> bool:
        date = resp.header("Date")
        if not date:
            return False
        from email.utils import parsedate_to_datetime  # only here: rare, and ~10 ms to import

        try:
            server = parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError):
            return False
        self._skew = server - time.time()
        return True

    # -- connections --------------------------------------------------------------------------

    def _take(self, endpoint: Endpoint, timeouts: tuple[float, float] | None
              ) -> tuple[Connection, bool]:
        """An idle connection to ``endpoint`` (reused) or a new, unopened one."""
        if timeouts is None:
            with self._lock:
                while self._idle:
                    conn = self._idle.pop()
                    if conn.host == endpoint.host and conn.reusable:
                        conn.set_timeout(self.read_timeout)
                        return conn, True
                    conn.close()
        if endpoint.scheme == "https":
            return Connection(endpoint.host, endpoint.port, tls=self._tls_context()), False
        return Connection(endpoint.host, endpoint.port), False

    def _tls_context(self) -> ssl.SSLContext:
        with self._lock:
            if self._tls is None:
                import ssl

                self._tls = ssl.create_default_context(cafile=self._ca_bundle)
            return self._tls

    def _give(self, conn: Connection) -> None:
        with self._lock:
            if conn.reusable and len(self._idle) < self._pool_size:
                self._idle.append(conn)
                return
        conn.close()

    def _finish(self, conn: Connection, resp: Response) -> None:
        """Return the connection if its response was read to the end, else drop it."""
        if resp.complete:
            self._give(conn)
        else:
            conn.close()

    def _read_all(self, conn: Connection, resp: Response, where: str, op: str) -> bytes:
        try:
            body = resp.read()
        except _NETWORK_ERRORS as exc:
            conn.close()
            raise unreachable(where, redact(self.endpoint.url), type(exc).__name__, op) from exc
        self._finish(conn, resp)
        return body


class HttpBody(ObjectStream):
    """An object's body as it arrives; a dropped connection mid-body is ``UnavailableError``."""

    def __init__(self, reader: HttpS3Reader, conn: Connection, resp: Response, where: str,
                 op: str) -> None:
        super().__init__()
        self._reader, self._conn, self._resp = reader, conn, resp
        self._where, self._op = where, op

    def read(self, size: int | None = -1) -> bytes:
        try:
            return self._resp.read(None if size is None or size < 0 else size)
        except _NETWORK_ERRORS as exc:
            raise self._dropped(exc) from exc

    def readinto(self, buffer: Any) -> int:
        try:
            return self._resp.readinto(buffer)
        except _NETWORK_ERRORS as exc:
            raise self._dropped(exc) from exc

    def _dropped(self, exc: BaseException) -> UnavailableError:
        self._conn.close()
        what = type(exc).__name__
        if isinstance(exc, IncompleteBody):
            what = str(exc)
        return unreachable(self._where, redact(self._reader.endpoint.url), what, self._op)

    def _close_source(self) -> None:
        self._reader._finish(self._conn, self._resp)


def _bucket_region(resp: Response, body: bytes) -> str | None:
    """The bucket's region when a reply names it (header, else the error body)."""
    region = resp.header("x-amz-bucket-region")
    if not region and (found := _REGION.search(body)):
        region = found.group(1).decode()
    return region


def parse_list_page(body: bytes) -> tuple[list[str], str | None]:
    """(keys, continuation token or None) of a ListObjectsV2 page with ``encoding-type=url``."""
    from xml.etree import ElementTree

    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError as exc:
        raise UnavailableError(f"S3 list response is not XML ({exc})") from None
    keys: list[str] = []
    token: str | None = None
    truncated = False
    for el in root:
        tag = el.tag.rpartition("}")[2]
        if tag == "Contents":
            for sub in el:
                if sub.tag.rpartition("}")[2] == "Key":
                    keys.append(unquote_plus(sub.text or ""))
        elif tag == "NextContinuationToken":
            token = el.text
        elif tag == "IsTruncated":
            truncated = (el.text or "").strip().lower() == "true"
    return keys, token if truncated else None
