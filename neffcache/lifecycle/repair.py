"""Repair a store: which objects are missing or damaged (from verify's problems, pure), and the
sources of good bytes a repair rewrites them from (another store, a bundle, a restored dir).

``plan_repair`` is pure. ``rewrite_object`` writes one blob or pack, and ``rewrite_manifest``
one manifest whose replacement passed the trust gate, each only when the target's copy is
still bad right before the write and the new bytes are what was checked.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from neffcache.backends import BACKENDS, root_dirs
from neffcache.documents import Document
from neffcache.errors import IntegrityError, ManifestError, NotFoundError, UsageError
from neffcache.hashing import CHUNK, VerifyingReader
from neffcache.lifecycle.verify import Problem
from neffcache.lifecycle.verify_local import read_local_manifests
from neffcache.manifest import Manifest, PackRecord, decode_manifest, encode_manifest
from neffcache.store import (
    BLOBS,
    DAMAGED,
    MANIFESTS,
    PACKS,
    Store,
    blob_key,
    entry_key_of,
    pack_key,
)


@dataclass(frozen=True, slots=True)
class RepairItem(Document):
    """One object to rewrite: its key, kind (blob | pack | manifest), why, and (blobs and
    packs) the size and sha256 its new bytes must have."""

    key: str
    kind: str
    reason: str
    size: int | None = None
    sha256: str | None = None


def plan_repair(problems: Sequence[Problem], blobs: Mapping[str, int],
                packs: Mapping[str, PackRecord]) -> tuple[RepairItem, ...]:
    """The objects to rewrite for verify's ``problems``, each once, in key order (pure).
    ``blobs``: sha256 -> size and ``packs``: sha256 -> record, as the manifests record them.
    An unreadable object ("unavailable") is not planned: it may be good."""
    items: dict[str, RepairItem] = {}
    for p in problems:
        if p.kind == "unavailable" or p.key in items:
            continue
        name = p.key.rsplit("/", 1)[-1]
        if p.key.startswith(BLOBS) and name in blobs:
            items[p.key] = RepairItem(p.key, "blob", p.kind, blobs[name], name)
        elif p.key.startswith(PACKS) and name in packs:
            items[p.key] = RepairItem(p.key, "pack", p.kind, packs[name].size, name)
        elif p.key.startswith(MANIFESTS) and entry_key_of(p.key) is not None:
            items[p.key] = RepairItem(p.key, "manifest", p.kind)
    return tuple(items[k] for k in sorted(items))


class Source(Protocol):
    """Where a repair reads good bytes: a store, a bundle or a restored directory."""

    url: str

    def open(self, key: str, start: int = 0, length: int | None = None) -> BinaryIO: ...

    def read(self, key: str, start: int = 0, length: int | None = None) -> bytes: ...


def good_manifest(data: bytes, key: str) -> Manifest | None:
    """The manifest in ``data`` when it decodes and describes the entry its key names."""
    try:
        doc = decode_manifest(data, source=key)
        backend = BACKENDS.get(doc.fingerprint.backend)
        decode_manifest(data, allowed_roots=backend.root_names if backend else None, source=key)
    except ManifestError:
        return None
    return doc if doc.entry_key == entry_key_of(key) else None


def object_is_good(store: Store, item: RepairItem) -> bool:
    """Whether the target's blob or pack is good after all (re-checked right before a
    write)."""
    try:
        h, n = hashlib.sha256(), 0
        with store.open(item.key) as src:
            while chunk := src.read(CHUNK):
                n += len(chunk)
                h.update(chunk)
    except NotFoundError:
        return False
    return n == item.size and h.hexdigest() == item.sha256


def rewrite_object(target: Store, source: Source, item: RepairItem) -> str:
    """Rewrite one blob or pack of ``target`` from ``source``: "repaired", "good" (the
    target's copy is good: untouched), or "unavailable" (the source lacks good bytes)."""
    if object_is_good(target, item):
        return "good"
    try:
        _stream(target, source, item)
    except (NotFoundError, IntegrityError):
        return "unavailable"
    if not object_is_good(target, item):
        return "unavailable"
    target.delete(DAMAGED + item.key)  # no longer quarantined
    return "repaired"


def rewrite_manifest(target: Store, key: str, data: bytes,
                     admitted: Callable[[bytes], bool]) -> str:
    """Replace manifest ``key`` of ``target`` with ``data`` (already through the trust gate)
    unless the target's copy is ``admitted`` right before the write: "repaired", "good" or
    "unavailable" (what is there afterwards is not ``data``)."""
    if _admitted_at(target, key, admitted):
        return "good"
    target.delete(key)
    target.put(key, io.BytesIO(data), if_absent=True)
    try:
        if target.read(key) != data:  # another writer's bytes since the delete
            return "good" if _admitted_at(target, key, admitted) else "unavailable"
    except NotFoundError:
        return "unavailable"
    return "repaired"


def _admitted_at(target: Store, key: str, admitted: Callable[[bytes], bool]) -> bool:
    try:
        return admitted(target.read(key))
    except NotFoundError:
        return False


def _stream(target: Store, source: Source, item: RepairItem) -> None:
    """Replace a bad blob or pack with ``source``'s bytes, checked while they stream: a
    mismatch leaves nothing of them (IntegrityError)."""
    assert item.size is not None and item.sha256 is not None
    with source.open(item.key) as raw:
        reader = VerifyingReader(raw, size=item.size, sha256=item.sha256,
                                 name=f"{source.url}/{item.key}")
        target.delete(item.key)
        wrote = target.put(item.key, reader, if_absent=True)  # type: ignore[arg-type]
        if wrote:
            try:
                reader.read(1)
                reader.finish()
            except IntegrityError:
                target.delete(item.key)
                raise


class DirSource:
    """A restored directory as a read-only source of objects: blobs by the files its manifest
    copies name (each re-hashed), packs rebuilt from their members, manifests from the copies
    (a ``Source``; bytes are checked by the caller, manifests by the trust gate)."""

    def __init__(self, target: str | Path) -> None:
        self.url = f"dir:{target}"
        root = Path(target)
        if not root.is_dir():
            raise UsageError(f"--from-dir {target}: not a directory")
        manifests, _ = read_local_manifests(root)
        self.manifests = {m.entry_key: m for m in manifests}
        self.files: dict[str, str] = {}
        self.packs: dict[str, PackRecord] = {}
        for m in manifests:
            dirs = root_dirs(BACKENDS[m.fingerprint.backend], str(root))
            for f in m.files:
                self.files.setdefault(f.sha256, os.path.join(dirs[f.root], f.path))
            for p in m.packs:
                self.packs.setdefault(p.sha256, p)

    def read(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        with self.open(key) as src:
            data = src.read()
        return data[start:] if length is None else data[start:start + length]

    def has(self, key: str) -> bool:
        try:
            self.open(key).close()
        except NotFoundError:
            return False
        return True

    def open(self, key: str, start: int = 0, length: int | None = None) -> BinaryIO:
        name = key.rsplit("/", 1)[-1]
        entry = entry_key_of(key) if key.startswith(MANIFESTS) else None
        if entry is not None and entry in self.manifests:
            return io.BytesIO(encode_manifest(self.manifests[entry]))
        if key == blob_key(name) and name in self.files:
            try:
                return open(self.files[name], "rb")
            except OSError as exc:
                raise NotFoundError(f"{self.url}: {key}: {exc}") from exc
        if key == pack_key(name) and name in self.packs:
            return io.BytesIO(b"".join(self._pack(self.packs[name])))
        raise NotFoundError(f"{self.url}: {key}: not in the directory's manifests")

    def _pack(self, pack: PackRecord) -> Iterator[bytes]:
        at = 0
        for m in pack.members:
            yield b"\0" * (m.offset - at)
            yield self.read(blob_key(m.sha256))
            at = m.offset + m.size
        yield b"\0" * (pack.size - at)
