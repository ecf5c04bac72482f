"""Stores: where blobs and manifests live. ``open_store`` turns a URL into one."""

from __future__ import annotations

from pathlib import Path

from neffcache.errors import ConfigError
from neffcache.store.base import MANIFESTS, REPORTS, Store, blob_key, entry_key_of, manifest_key

__all__ = ["MANIFESTS", "REPORTS", "Store", "blob_key", "describe_store", "entry_key_of",
           "manifest_key", "open_store"]


def open_store(url: str, *, create: bool = False, deadline: float | None = None) -> Store:
    """``s3://bucket/prefix`` → S3 store; ``file:///path`` or a plain path → local store
    (whose directory is created only with ``create``, by the commands that publish). With a
    ``deadline`` (``time.monotonic()``) a network store clips every wait to what is left."""
    if url.startswith("s3://"):
        from neffcache.store.s3 import S3Store  # no AWS SDK import until the first write

        return S3Store.from_url(url, deadline=deadline)
    if url.startswith("file://"):
        return _local(url[len("file://"):], create)
    if "://" in url:
        raise ConfigError(f"store {url!r}: expected a path, file://PATH or s3://BUCKET/PREFIX")
    return _local(url, create)


def describe_store(url: str) -> str:
    """The URL ``open_store(url).url`` would report, without opening anything (no SDK import)."""
    if url.startswith("s3://"):
        bucket, _, prefix = url[len("s3://"):].partition("/")
        prefix = prefix.strip("/")
        return f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
    return open_store(url).url  # a local store: constructing it touches nothing


def _local(path: str, create: bool) -> Store:
    from neffcache.store.local import LocalStore

    if not path:
        raise ConfigError("store: empty path")
    return LocalStore(Path(path), create=create)
