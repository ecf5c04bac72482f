"""Stores (where blobs, packs and manifests live) and ``open_store``, a store from its URL."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from neffcache.config import redact_url
from neffcache.errors import ConfigError, UsageError
from neffcache.faces import lazy_face

_FACE = {
    "base": ("BLOBS", "CELLS", "DAMAGED", "MANIFESTS", "PACKS", "PENDING", "REPORTS", "RETIRED",
             "STORE_MARKER", "MultipartUploads", "Store", "TempFile", "TempFiles", "Upload",
             "blob_key", "cell_pointer_key", "entry_key_of", "holds_good", "manifest_key",
             "pack_key", "pointer_parts", "report_key"),
    "bundle": ("BundleStore",),
    "bundle_format": ("TOC_NAME", "BundleEntry", "Member", "Toc", "bundle_entry", "decode_toc",
                      "encode_toc", "plan_members"),
    "mirrored": ("MirroredStore",),
    "s3_config": ("s3_settings", "side_environ"),
    "neffcache.errors": ("NotFoundError",),
}
_LAZY_ALL, __getattr__ = lazy_face(globals(), _FACE)
__all__ = sorted([*_LAZY_ALL, "describe_store", "open_store"])

if TYPE_CHECKING:  # written by tools/faces.py from _FACE: edit the table, not this
    # ruff: noqa: F401 - re-exported: the face's __all__ is derived from _FACE
    # isort: off
    from neffcache.errors import NotFoundError
    from neffcache.store.base import (BLOBS, CELLS, DAMAGED, MANIFESTS, PACKS, PENDING, REPORTS,
        RETIRED, STORE_MARKER, MultipartUploads, Store, TempFile, TempFiles, Upload, blob_key,
        cell_pointer_key, entry_key_of, holds_good, manifest_key, pack_key, pointer_parts,
        report_key)
    from neffcache.store.bundle import BundleStore
    from neffcache.store.bundle_format import (TOC_NAME, BundleEntry, Member, Toc, bundle_entry,
        decode_toc, encode_toc, plan_members)
    from neffcache.store.mirrored import MirroredStore
    from neffcache.store.s3_config import s3_settings, side_environ
    # isort: on

BUNDLE = "bundle:"


def open_store(url: str, *, create: bool = False, deadline: float | None = None,
               expect_sha256: str | None = None,
               environ: Mapping[str, str] | None = None) -> Store:
    """``s3://bucket/prefix`` (waits clipped to ``deadline``, a ``time.monotonic()`` value), a path
    or ``file://PATH`` (created only with ``create``), or ``bundle:FILE`` (read-only, checked
    against ``expect_sha256`` when given; close it). ConfigError for any other URL."""
    if url.startswith(BUNDLE):
        from neffcache.store.bundle import BundleStore
        from neffcache.store.s3_config import byte_count

        if create:
            raise UsageError(f"{url}: a bundle is read-only")
        env = os.environ if environ is None else environ
        cap = env.get("NEFFCACHE_BUNDLE_MAX_BYTES")
        return BundleStore(url[len(BUNDLE):], expect_sha256=expect_sha256,
                           max_bytes=byte_count("NEFFCACHE_BUNDLE_MAX_BYTES", cap) if cap else None)
    if expect_sha256 is not None:
        raise UsageError(f"store {url}: expect_sha256 checks a bundle (bundle:FILE)")
    if url.startswith("s3://"):
        from neffcache.store.s3 import S3Store  # no AWS SDK import until the first write

        return S3Store.from_url(url, environ, deadline=deadline, create=create)
    path = url.removeprefix("file://")
    if path == url and "://" in url:
        raise ConfigError(f"store {redact_url(url)!r}: expected a path, file://PATH, "
                          "s3://BUCKET/PREFIX or bundle:FILE")
    if not path:
        raise ConfigError("store: empty path")
    from neffcache.store.local import LocalStore

    return LocalStore(Path(path), create=create)


def describe_store(url: str) -> str:
    """``open_store(url).url`` without opening anything (no SDK import)."""
    if url.startswith("s3://"):
        bucket, _, prefix = redact_url(url)[len("s3://"):].partition("/")
        return f"s3://{bucket}/{prefix.strip('/')}".removesuffix("/")  # no prefix: no slash
    if url.startswith(BUNDLE):
        return f"{BUNDLE}{Path(url[len(BUNDLE):]).expanduser().absolute()}"
    return open_store(url).url  # a local store: constructing it touches nothing

