"""The store protocol every backend implements, and the key layout (one prefix per kind)."""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol, runtime_checkable

from neffcache.errors import (
    ConfigError,
    IntegrityError,
    NotFoundError,
    UnavailableError,
    UsageError,
)

BLOBS = "blobs/sha256/"  # <aa>/<sha256>: file contents, identical files stored once
MANIFESTS = "manifests/"  # <entry-key>.json: one manifest per entry, never overwritten
# <cell-key>/<fingerprint-key>.json: a pointer to an entry, written after its manifest
CELLS = "cells/"
# <entry-key>.<id>.json: a publish in progress, the blobs it relies on (gc spares them a while)
PENDING = "pending/"
PACKS = "packs/"  # <aa>/<sha256>: small blobs back to back (each member is also a blob)
# <YYYY-MM-DD>/<host>-<YYYYMMDDTHHMMSSZ>-<8 hex>.json: one per restore run (create-only)
REPORTS = "reports/"
RETIRED = "retired/"  # <time>-<id>.json: a retire, its entries and what they referenced
DAMAGED = "damaged/"  # <key>: quarantine; writers treat the object as absent (holds_good)
STORE_MARKER = "neffcache-store.json"  # "a neffcache store is here" (recognise_store)
_MARKER_BODY = b'{"neffcache_store":1}\n'


def check_key(key: str) -> str:
    """``key``, or UsageError unless it is relative with no empty, ``.`` or ``..`` part."""
    if any(p in ("", ".", "..") for p in key.split("/")):  # "" and "/..." have an empty part
        raise UsageError(f"invalid store key {key!r}: expected a relative path without '..'")
    return key


def blob_key(sha256: str) -> str:
    return f"{BLOBS}{sha256[:2]}/{sha256}"


def pack_key(sha256: str) -> str:
    return f"{PACKS}{sha256[:2]}/{sha256}"


def manifest_key(entry_key: str) -> str:
    return f"{MANIFESTS}{entry_key}.json"


def cell_pointer_key(cell_key: str, fingerprint_key: str) -> str:
    return f"{CELLS}{cell_key}/{fingerprint_key}.json"


def report_key(day: str, report_id: str) -> str:
    """``day`` is the report's UTC date, YYYY-MM-DD."""
    return f"{REPORTS}{day}/{report_id}.json"


def holds_good(store: Store, key: str, size: int) -> bool:
    """Whether a writer may skip ``key``: it is ``size`` bytes and not under ``damaged/``; a
    known-bad one is deleted, so a put rewrites it."""
    try:
        tail = store.read(key, max(0, size - 1), 2)
    except NotFoundError:
        return False
    if len(tail) == min(size, 1) and not store.has(DAMAGED + key):
        return True
    store.delete(key)
    store.delete(DAMAGED + key)
    return False


def recognise_store(store: Store, *, create: bool) -> None:
    """That ``store`` holds the marker, or (older stores) a manifest or a blob; with ``create``
    it gets a marker, read back. UnavailableError when the marker holds something else (an
    endpoint that answers anything), ConfigError when nothing is there (a mistyped prefix)."""
    with contextlib.suppress(NotFoundError):
        _marker_ok(store, store.read(STORE_MARKER))
        return
    if create:
        store.put(STORE_MARKER, io.BytesIO(_MARKER_BODY), if_absent=True)
        try:
            _marker_ok(store, store.read(STORE_MARKER))
        except NotFoundError:
            raise UnavailableError(f"store {store.url}: not a neffcache store: the marker it was "
                                   f"just given ({STORE_MARKER}) cannot be read back") from None
        return
    if all(next(iter(store.list(prefix)), None) is None for prefix in (MANIFESTS, BLOBS)):
        raise ConfigError(f"store {store.url}: not a neffcache store: nothing under it (no "
                          f"{STORE_MARKER}, no manifest, no blob)",
                          hint="check --store / NEFFCACHE_STORE (a mistyped bucket or prefix?); "
                               "a store is made by push, precompile, copy or bundle import")


def _marker_ok(store: Store, body: bytes) -> None:
    try:
        doc = json.loads(body)
    except ValueError:  # UnicodeDecodeError too
        doc = None
    if not (isinstance(doc, dict) and "neffcache_store" in doc):
        shown = body[:40].decode("utf-8", "replace").replace("\n", " ")
        raise UnavailableError(f"store {store.url}: not a neffcache store: {STORE_MARKER} holds "
                               f"{shown!r}... (an endpoint that answers every request with a web "
                               f"page or a redirect?)",
                               hint="check the endpoint (AWS_ENDPOINT_URL_S3 / "
                                    "NEFFCACHE_*_S3_ENDPOINT) and --store")


def entry_key_of(manifest_object_key: str) -> str | None:
    """None for anything under manifests/ that is not a manifest."""
    return _json_name(manifest_object_key.removeprefix(MANIFESTS))


def pointer_parts(object_key: str) -> tuple[str, str] | None:
    """(cell key, fingerprint key), or None for anything under cells/ that is not a pointer."""
    cell_key, _, name = object_key.removeprefix(CELLS).partition("/")
    fingerprint_key = _json_name(name)
    return None if fingerprint_key is None else (cell_key, fingerprint_key)


def _json_name(name: str) -> str | None:
    return name[: -len(".json")] if name.endswith(".json") and "/" not in name else None


@runtime_checkable
class Store(Protocol):
    """What restore, publish, verify and gc need from a place that holds blobs and manifests.
    Every backend raises NotFoundError (and only that) for a missing key, and its SDK's other
    failures as UnavailableError. A backend that subclasses it explicitly inherits ``read``."""

    url: str

    def check(self) -> None:
        """That the store is reachable (else UnavailableError) and is a neffcache store."""

    def has(self, key: str) -> bool: ...

    def open(self, key: str, start: int = 0, length: int | None = None) -> BinaryIO:
        """A stream of ``length`` bytes from ``start`` (fewer if the object ends first); the
        caller closes it. NotFoundError if absent."""

    def read(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        with self.open(key, start, length) as body:
            return body.read()

    def put(self, key: str, source: BinaryIO, *, if_absent: bool = True) -> bool:
        """True when this call wrote it; with if_absent an existing key is left (False)."""

    def list(self, prefix: str) -> Iterator[str]:
        """Keys under a prefix, unordered."""

    def delete(self, key: str) -> None:
        """A missing object is not an error."""


@dataclass(frozen=True, slots=True)
class Upload:
    """An incomplete multipart upload (its key relative, as in the store)."""

    key: str
    upload_id: str
    initiated: float  # seconds since the epoch, by the server's clock


@runtime_checkable
class MultipartUploads(Protocol):
    """The incomplete multipart uploads of a store (S3), for gc to abort (gone: no error)."""

    def list_uploads(self) -> Iterator[Upload]: ...

    def abort_upload(self, upload: Upload) -> None: ...


@dataclass(frozen=True, slots=True)
class TempFile:
    """A temp file a killed writer left in a store (its key relative)."""

    key: str
    size: int
    mtime: float  # seconds since the epoch


@runtime_checkable
class TempFiles(Protocol):
    """The temp files no live writer owns in a store (local), for verify and gc to remove."""

    def stale_temps(self) -> Iterator[TempFile]: ...

    def remove_temp(self, temp: TempFile) -> None: ...


def read_full(src: BinaryIO, size: int) -> bytes:
    """``size`` bytes of ``src`` (fewer only where it ends), however little each read gives."""
    parts, left = [], size
    while left > 0 and (chunk := src.read(left)):
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


class ObjectStream(io.RawIOBase):
    """A read-only stream: a backend implements ``read`` and ``_close_source``."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def _close_source(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        if not self.closed:
            self._close_source()
        super().close()


class FileRange(ObjectStream):
    """``left`` bytes of a file from ``offset``, by ``os.pread`` (thread-safe on a shared file);
    closed with the stream when ``owned``. IntegrityError if the file ends first."""

    def __init__(self, fh: BinaryIO, offset: int, left: int, where: str, *,
                 owned: bool = False) -> None:
        super().__init__()
        self._fh, self._offset, self._left, self._owned = fh, offset, left, owned
        self._where = where

    def read(self, size: int | None = -1) -> bytes:
        want = self._left if size is None or size < 0 else min(size, self._left)
        parts = []
        while want > 0:
            data = os.pread(self._fh.fileno(), min(want, 16 << 20), self._offset)
            if not data:
                raise IntegrityError(f"{self._where}: file ended inside a member (truncated)")
            parts.append(data)
            self._offset += len(data)
            self._left -= len(data)
            want -= len(data)
        return b"".join(parts)

    def _close_source(self) -> None:
        if self._owned:
            self._fh.close()
