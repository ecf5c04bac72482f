"""A store in an S3 bucket under a prefix (AWS or any S3-compatible server such as SeaweedFS).

Two clients serve it. Reads (has, open, read, list, check) go through ``s3_http``: SigV4 over
http.client, standard library only, so a boot-time restore starts moving bytes ~0.2 s sooner
than with botocore. Writes (put, delete) go through ``s3_botocore``, created on first use.
botocore also takes the reads when the environment asks for what the small client does not do:
``NEFFCACHE_S3_CLIENT=botocore``, an HTTP(S) proxy for the endpoint, FIPS or dual-stack
endpoints; and it resolves the credentials when they come from SSO, assume-role, web identity
or a credential process (``aws_credentials.NeedsBotocore``). Either way a missing key is
``NotFoundError`` and anything else that stops a call after retries is ``UnavailableError``
with a one-line message that never carries credentials.

Permissions: a reader needs ``s3:GetObject`` and ``s3:ListBucket`` on the prefix. Without
ListBucket S3 answers 403 instead of 404 for a missing key, which reads as "unavailable".
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import urlsplit

from neffcache.errors import ConfigError, NotFoundError, UsageError
from neffcache.store.aws_credentials import (
    CredentialProvider,
    Credentials,
    NeedsBotocore,
    resolve_region,
)
from neffcache.store.base import check_key
from neffcache.store.s3_errors import redact
from neffcache.store.s3_http import HttpS3Reader

if TYPE_CHECKING:
    from neffcache.store.s3_botocore import BotocoreS3

MiB = 1 << 20
CLIENT_VARIABLE = "NEFFCACHE_S3_CLIENT"
_PROXY_VARIABLES = ("https_proxy", "http_proxy", "all_proxy")


class S3Store:
    """Objects at ``s3://<bucket>/<prefix>/<key>``; see the module docstring for the contract."""

    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None,
                 max_attempts: int = 5, connect_timeout: float = 5.0, read_timeout: float = 60.0,
                 max_pool_connections: int = 64, multipart_threshold: int = 16 * MiB,
                 part_size: int = 16 * MiB, environ: Mapping[str, str] | None = None) -> None:
        if part_size < 5 * MiB or multipart_threshold < part_size:
            raise ConfigError("S3 store: part_size must be >= 5 MiB and <= multipart_threshold")
        env = os.environ if environ is None else environ
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self._options: dict[str, Any] = dict(
            endpoint_url=endpoint_url, max_attempts=max_attempts, connect_timeout=connect_timeout,
            read_timeout=read_timeout, max_pool_connections=max_pool_connections,
            multipart_threshold=multipart_threshold, part_size=part_size)
        self._lock = threading.Lock()
        self._boto_client: BotocoreS3 | None = None
        self._reader: HttpS3Reader | None = None
        self.client = "botocore" if reads_need_botocore(env, bucket, endpoint_url) else "http"
        if self.client == "http":
            self._reader = HttpS3Reader(
                bucket, region=resolve_region(env), endpoint_url=endpoint_url,
                credentials=CredentialSource(env), max_attempts=max_attempts,
                connect_timeout=connect_timeout, read_timeout=read_timeout,
                max_pool_connections=max_pool_connections,
                ca_bundle=env.get("AWS_CA_BUNDLE") or None)
            self.endpoint = redact(self._reader.endpoint.url)
        else:
            self.endpoint = self._boto.endpoint

    @classmethod
    def from_url(cls, url: str, environ: Mapping[str, str] | None = None,
                 **options: Any) -> S3Store:
        """``s3://bucket/prefix``; the endpoint comes from AWS_ENDPOINT_URL_S3 or
        AWS_ENDPOINT_URL (else AWS's regional endpoint), credentials from the standard chain."""
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
        return cls(bucket, parts.path, environ=environ, **options)

    # -- the protocol -------------------------------------------------------------------------

    def check(self) -> None:
        if self._reader is None:
            self._boto.check(self._base(), self.url)
            return
        probe = (min(self._options["connect_timeout"], 2.0),
                 min(self._options["read_timeout"], 5.0))
        for _ in self._reader.list(self._base(), self.url, max_keys=1, attempts=2,
                                   timeouts=probe):
            pass

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
        full, where = self._full(key), f"{self.url}/{key}"
        if self._reader is None:
            return self._boto.get(full, where, start, length)
        return self._reader.get(full, where, start, length)  # type: ignore[return-value]

    def read(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        with self.open(key, start, length) as body:
            return body.read()

    def put(self, key: str, source: BinaryIO, *, if_absent: bool = True) -> bool:
        return self._boto.put(self._full(key), f"{self.url}/{key}", source, if_absent,
                              lambda: self.has(key))

    def list(self, prefix: str) -> Iterator[str]:
        base = self._base()
        keys = self._boto.list(base + prefix, self.url) if self._reader is None \
            else self._reader.list(base + prefix, self.url)
        for key in keys:
            yield key[len(base):]

    def delete(self, key: str) -> None:
        self._boto.delete(self._full(key), f"{self.url}/{key}")

    # -- helpers ------------------------------------------------------------------------------

    @property
    def _boto(self) -> BotocoreS3:
        """The botocore client, created on first use (its import alone takes ~0.1 s)."""
        with self._lock:
            if self._boto_client is None:
                from neffcache.store.s3_botocore import BotocoreS3

                self._boto_client = BotocoreS3(self.bucket, **self._options)
            return self._boto_client

    def _full(self, key: str) -> str:
        return self._base() + check_key(key)

    def _base(self) -> str:
        return f"{self.prefix}/" if self.prefix else ""

    def _head(self, key: str) -> None:
        full, where = self._full(key), f"{self.url}/{key}"
        if self._reader is None:
            self._boto.head(full, where)
        else:
            self._reader.head(full, where)


class CredentialSource:
    """Credentials for the small client: resolved by ``aws_credentials`` where it can, by
    botocore's own chain where the environment asks for more (imported only then)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._provider = CredentialProvider(env)
        self._lock = threading.Lock()
        self._botocore: Callable[[], Credentials | None] | None = None

    def __call__(self) -> Credentials | None:
        if self._botocore is None:
            try:
                return self._provider.get()
            except NeedsBotocore:
                with self._lock:
                    if self._botocore is None:
                        self._botocore = _botocore_credentials()
        return self._botocore()


def _botocore_credentials() -> Callable[[], Credentials | None]:
    import botocore.session  # type: ignore[import-untyped]

    found = botocore.session.get_session().get_credentials()

    def frozen() -> Credentials | None:
        if found is None:
            return None
        c = found.get_frozen_credentials()
        return Credentials(c.access_key, c.secret_key, c.token, None, "botocore")

    return frozen


def reads_need_botocore(env: Mapping[str, str], bucket: str, endpoint_url: str | None) -> bool:
    """Whether reads must go through botocore: asked for, or a proxy, FIPS or dual-stack
    endpoint the small client does not implement."""
    choice = env.get(CLIENT_VARIABLE, "auto").lower()
    if choice not in ("auto", "botocore", "http"):
        raise ConfigError(f"{CLIENT_VARIABLE}={choice!r}: expected auto, botocore or http")
    if choice != "auto":
        return choice == "botocore"
    if any(env.get(v, "").lower() == "true"
           for v in ("AWS_USE_FIPS_ENDPOINT", "AWS_USE_DUALSTACK_ENDPOINT")):
        return True
    host = urlsplit(endpoint_url).hostname if endpoint_url else f"{bucket}.s3.amazonaws.com"
    return uses_proxy(env, host or "")


def uses_proxy(env: Mapping[str, str], host: str) -> bool:
    """Whether a proxy variable applies to ``host`` (``no_proxy`` honoured as curl does:
    ``*``, exact hosts and domain suffixes)."""
    lowered = {k.lower(): v for k, v in env.items()}
    if not any(lowered.get(v) for v in _PROXY_VARIABLES):
        return False
    for entry in lowered.get("no_proxy", "").split(","):
        entry = entry.strip().lstrip(".").lower()
        if entry == "*" or (entry and (host == entry or host.endswith("." + entry))):
            return False
    return True
