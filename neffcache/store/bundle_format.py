"""The bundle format (pure): a tar (maybe gzipped) of store objects under their keys, TOC first."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from neffcache.documents import Document, canonical_json
from neffcache.errors import IntegrityError
from neffcache.hashing import SHA256_HEX, is_sha256, sha256_bytes
from neffcache.manifest import MAX_FILE_SIZE, Manifest
from neffcache.store.base import blob_key, pack_key

FORMAT = "neffcache-bundle"
SCHEMA_VERSION = 1
# The table of contents (TOC): every member's name, size and sha256, and the entries carried.
# Its sha256 is the bundle's digest: compared with a published one it authenticates the file.
TOC_NAME = "neffcache-bundle.json"
MAX_TOC_BYTES = 256 << 20
MAX_MEMBERS = 2_000_000
_HEX = SHA256_HEX.pattern
_NAME_RES = (  # each a whole name (fullmatch: a trailing newline is not a name's end)
    re.compile(rf"manifests/{_HEX}\.json"),
    re.compile(rf"cells/{_HEX}/{_HEX}\.json"),
    re.compile(rf"blobs/sha256/[0-9a-f]{{2}}/({_HEX})"),
    re.compile(rf"packs/[0-9a-f]{{2}}/({_HEX})"),
)


@dataclass(frozen=True, slots=True)
class Member:
    """One object in a bundle: its store key, size and sha256."""

    name: str
    size: int
    sha256: str

    def to_json(self) -> list[Any]:
        return [self.name, self.size, self.sha256]


@dataclass(frozen=True, slots=True)
class BundleEntry(Document):
    entry_key: str
    cell_id: str
    fingerprint_key: str
    backend: str


@dataclass(frozen=True, slots=True)
class Toc:
    entries: tuple[BundleEntry, ...]
    members: tuple[Member, ...]  # in tar order, after the TOC itself
    created_at: str = ""
    producer: tuple[tuple[str, str], ...] = ()

    @property
    def total_bytes(self) -> int:
        return sum(m.size for m in self.members)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "schema_version": SCHEMA_VERSION, "created_at": self.created_at,
                "producer": dict(self.producer), "entries": [e.to_json() for e in self.entries],
                "members": [m.to_json() for m in self.members]}


def bundle_entry(m: Manifest) -> BundleEntry:
    return BundleEntry(m.entry_key, m.cell.id, m.fingerprint.key, m.fingerprint.backend)


def encode_toc(toc: Toc) -> bytes:
    return canonical_json(toc.to_json()).encode("utf-8")


def check_member_name(name: Any, sha256: str | None = None, source: str = "bundle") -> str:
    """A store key of a kind a bundle carries; a blob's or pack's, its sha256's key."""
    for pattern in _NAME_RES if isinstance(name, str) else ():
        match = pattern.fullmatch(name)
        if match is None:
            continue
        if match.groups() and sha256 is not None and \
                name not in (blob_key(sha256), pack_key(sha256)):
            raise IntegrityError(f"{source}: member {name!r} is not named by its sha256")
        return name  # type: ignore[no-any-return]
    raise IntegrityError(f"{source}: member name {str(name)[:120]!r} is not a bundle object "
                         f"(expected manifests/, cells/, blobs/sha256/ or packs/ keys)")


def decode_toc(data: bytes, source: str = "bundle") -> Toc:
    """Anything unexpected is an IntegrityError naming it."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise IntegrityError(f"{source}: table of contents is not valid JSON") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise IntegrityError(f"{source}: not a neffcache bundle (no {FORMAT!r} table of "
                             f"contents)")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise IntegrityError(f"{source}: bundle schema_version {doc.get('schema_version')!r} "
                             f"is not supported (expected {SCHEMA_VERSION})")
    members = _members(doc.get("members"), source)
    entries = _entries(doc.get("entries"), {m.name for m in members}, source)
    producer = doc.get("producer", {})
    if not isinstance(producer, dict):
        raise IntegrityError(f"{source}: producer: expected an object")
    return Toc(entries, members, str(doc.get("created_at", "")),
               tuple(sorted((str(k), str(v)) for k, v in producer.items())))


def _members(raw: Any, source: str) -> tuple[Member, ...]:
    if not isinstance(raw, list) or len(raw) > MAX_MEMBERS:
        raise IntegrityError(f"{source}: members: expected a list of at most {MAX_MEMBERS}")
    out: dict[str, Member] = {}
    for i, item in enumerate(raw):
        if not isinstance(item, list) or len(item) != 3:
            raise IntegrityError(f"{source}: members[{i}]: expected [name, size, sha256]")
        name, size, sha = item
        if not is_sha256(sha):
            raise IntegrityError(f"{source}: members[{i}]: sha256 {str(sha)[:70]!r}: expected "
                                 f"64 lowercase hex digits")
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_FILE_SIZE:
            raise IntegrityError(f"{source}: members[{i}]: size {size!r}: expected an integer "
                                 f">= 0")
        check_member_name(name, sha, source)
        if name in out:
            raise IntegrityError(f"{source}: member {name} listed twice")
        out[name] = Member(name, size, sha)
    return tuple(out.values())


def _entries(raw: Any, names: set[str], source: str) -> tuple[BundleEntry, ...]:
    if not isinstance(raw, list) or len(raw) > MAX_MEMBERS:
        raise IntegrityError(f"{source}: entries: expected a list")
    out = []
    for i, item in enumerate(raw):
        fields = ("entry_key", "cell_id", "fingerprint_key", "backend")
        if not isinstance(item, dict) or not all(isinstance(item.get(f), str) for f in fields):
            raise IntegrityError(f"{source}: entries[{i}]: expected {', '.join(fields)}")
        e = BundleEntry(*(item[f] for f in fields))
        if not is_sha256(e.entry_key) or f"manifests/{e.entry_key}.json" not in names:
            raise IntegrityError(f"{source}: entries[{i}]: entry {e.entry_key[:70]!r} has no "
                                 f"manifest in the bundle")
        out.append(e)
    return tuple(out)


def plan_members(manifests: Sequence[Manifest], manifest_bytes: Mapping[str, bytes],
                 pointer_bytes: Mapping[str, bytes]) -> tuple[Member, ...]:
    """In write order: manifests, pointers, each blob once (largest first), then packs."""
    members = [Member(k, len(b), sha256_bytes(b)) for k, b in sorted(manifest_bytes.items())]
    members += [Member(k, len(b), sha256_bytes(b)) for k, b in sorted(pointer_bytes.items())]
    # reversed: the first size recorded for a sha256 is the one kept
    blobs = {f.sha256: f.size for m in reversed(manifests) for f in reversed(m.files)}
    packs = {p.sha256: p.size for m in reversed(manifests) for p in reversed(m.packs)}
    members += [Member(blob_key(s), n, s)
                for s, n in sorted(blobs.items(), key=lambda i: (-i[1], i[0]))]
    members += [Member(pack_key(s), n, s) for s, n in sorted(packs.items())]
    return tuple(members)
