"""Entry manifests: a warmed cell's files as versioned JSON, strictly decoded (pure, no I/O)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from neffcache.documents import Document, canonical_pieces, digest_chunked, digest_of
from neffcache.errors import ManifestError, MatrixError
from neffcache.fingerprint import Fingerprint
from neffcache.hashing import is_sha256
from neffcache.matrix import Cell
from neffcache.parts import MAX_PART_SIZE, MIN_PART_SIZE, REQUIRED_OVER, needs_parts, part_count

SCHEMA_VERSION = 1
MAX_FILE_SIZE = 1 << 40
MAX_FILES = 1_000_000
MAX_PACKS = 100_000
_ROOT_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_KEY_ID_RE = re.compile(r"^[0-9a-f]{16}$")
_ED25519_B64_RE = re.compile(r"^[A-Za-z0-9+/]{86}==$")  # 64 bytes
_FILE_FIELDS = ("root", "path", "size", "sha256", "mode")
_FILE_KEYS = frozenset(_FILE_FIELDS)
_PACK_KEYS = frozenset(("sha256", "size", "members"))


@dataclass(frozen=True, slots=True)
class FileRecord:
    """One cached file: where it goes (root + relative path) and what it must contain."""

    root: str
    path: str
    size: int
    sha256: str
    mode: int = 0o644

    @property
    def id(self) -> tuple[str, str]:
        return (self.root, self.path)

    def to_json(self) -> dict[str, Any]:  # by hand: a million of these per manifest
        return {"root": self.root, "path": self.path, "size": self.size,
                "sha256": self.sha256, "mode": self.mode}


@dataclass(frozen=True, slots=True)
class PackMember:
    """One blob inside a pack: its sha256, where it starts in the pack, its size."""

    sha256: str
    offset: int
    size: int


@dataclass(frozen=True, slots=True)
class PackRecord:
    """Small blobs back to back in one store object (``packs/<aa>/<sha256>``), by offset."""

    sha256: str
    size: int
    members: tuple[PackMember, ...]

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "size": self.size,
                "members": [[m.sha256, m.offset, m.size] for m in self.members]}


@dataclass(frozen=True, slots=True)
class PartDigests(Document):
    """The sha256 of each ``part_size`` slice of one file's bytes (the last may be shorter)."""

    sha256: str  # the file's own sha256: which blob these parts are of
    part_size: int
    digests: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Signature(Document):
    """An Ed25519 signature (base64) over an entry's digest by the key ``key_id`` names."""

    key_id: str
    ed25519: str


@dataclass(frozen=True, slots=True)
class Manifest:
    """An entry: a cell warmed under a fingerprint, and the files it left."""

    cell: Cell
    fingerprint: Fingerprint
    files: tuple[FileRecord, ...]
    producer: tuple[tuple[str, str], ...] = ()
    compile_seconds: float | None = None
    created_at: str = ""
    packs: tuple[PackRecord, ...] = ()
    parts: tuple[PartDigests, ...] = ()
    signature: Signature | None = None  # outside to_json(): it signs that body's digest

    @property
    def entry_key(self) -> str:
        return entry_key(self.cell, self.fingerprint)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def roots(self) -> tuple[str, ...]:
        return tuple(sorted({f.root for f in self.files}))

    def to_json(self, *, lazy: bool = False) -> dict[str, Any]:
        """``lazy``: records kept as objects (a million as dicts: ~250 MiB), for ``record_json``."""
        doc = {
            "schema_version": SCHEMA_VERSION,
            "entry_key": self.entry_key,
            "cell_id": self.cell.id,
            "cell": self.cell.to_json(),
            "fingerprint_key": self.fingerprint.key,
            "fingerprint": self.fingerprint.to_json(),
            "files": self.files if lazy else [f.to_json() for f in self.files],
            "producer": dict(self.producer),
            "compile_seconds": self.compile_seconds,
            "created_at": self.created_at,
        }
        # optional fields, still schema 1: absent when empty, so older manifests stay byte-identical
        for name, records in (("packs", self.packs), ("parts", self.parts)):
            if records:
                doc[name] = records if lazy else [r.to_json() for r in records]
        return doc


def record_json(value: Any) -> Any:
    if isinstance(value, (FileRecord, PackRecord, PartDigests)):
        return value.to_json()
    raise TypeError(f"{type(value).__name__} is not a manifest record")


def entry_key(cell: Cell, fingerprint: Fingerprint) -> str:
    return entry_key_for(cell.key, fingerprint.key)


def entry_key_for(cell_key: str, fingerprint_key: str) -> str:
    """The entry key of a cell key and a fingerprint key (as a cell pointer's key names them)."""
    return digest_of({"cell": cell_key, "fingerprint": fingerprint_key})


DIGEST_FIELD = "manifest_sha256"
SIGNATURE_FIELD = "signature"


def manifest_digest(manifest: Manifest) -> str:
    """The sha256 of the canonical body: what ``manifest_sha256`` records and a signature signs."""
    return digest_chunked(manifest.to_json(lazy=True), default=record_json)


def encode_manifest(manifest: Manifest) -> bytes:
    """Canonical JSON with its own digest (a bit flip that still decodes is caught on read)."""
    return b"".join(encode_manifest_pieces(manifest))


def encode_manifest_pieces(manifest: Manifest) -> Iterator[bytes]:
    """``encode_manifest`` in pieces: a writer never holds a million-file document (234 MiB)."""
    doc = {**manifest.to_json(lazy=True), DIGEST_FIELD: manifest_digest(manifest)}
    if manifest.signature is not None:
        doc[SIGNATURE_FIELD] = manifest.signature.to_json()
    for piece in canonical_pieces(doc, default=record_json):
        yield piece.encode("utf-8")


def check_digest(doc: dict[str, Any], source: str) -> dict[str, Any]:
    """``doc`` without its digest and signature; the digest must match."""
    body = {k: v for k, v in doc.items() if k not in (DIGEST_FIELD, SIGNATURE_FIELD)}
    if DIGEST_FIELD not in doc:  # written before digests existed (its blobs are still verified)
        if SIGNATURE_FIELD in doc:
            raise ManifestError(f"{source}: signed but without {DIGEST_FIELD}")
        return body
    if doc[DIGEST_FIELD] != digest_chunked(body, default=_RawFile.as_dict):
        raise ManifestError(f"{source}: the manifest does not match its own sha256 "
                            "(damaged in the store or on the way)")
    return body


def signature_from_json(raw: Any, source: str) -> Signature | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) != {"key_id", "ed25519"}:
        raise ManifestError(f"{source}: signature: expected {{key_id, ed25519}}")
    key_id, value = raw["key_id"], raw["ed25519"]
    if not isinstance(key_id, str) or not _KEY_ID_RE.match(key_id):
        raise ManifestError(f"{source}: signature key_id {key_id!r}: expected 16 hex digits")
    if not isinstance(value, str) or not _ED25519_B64_RE.match(value):
        raise ManifestError(f"{source}: signature: expected a base64 Ed25519 signature")
    return Signature(key_id, value)


def decode_manifest(data: bytes | str, *, allowed_roots: Sequence[str] | None = None,
                    source: str = "manifest") -> Manifest:
    """Any problem is a one-line ManifestError. Bytes passed as a temporary are freed once
    they are text, and each parsed file record once it is a model."""
    try:
        if not isinstance(data, str):  # as json.loads would, but not holding the bytes
            data = data.decode(json.detect_encoding(data), "surrogatepass")
        doc = json.loads(data, object_hook=_file_hook(True))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{source}: not valid JSON: {exc}") from None
    del data
    if isinstance(doc, _RawFile):
        doc = doc.as_dict()
    if not isinstance(doc, dict):
        raise ManifestError(f"{source}: expected a JSON object")
    signature = signature_from_json(doc.get(SIGNATURE_FIELD), source)
    body = check_digest(doc, source)
    del doc
    return _from_json(body, allowed_roots, source, signature)


def _from_json(doc: Mapping[str, Any], allowed_roots: Sequence[str] | None, source: str,
               signature: Signature | None) -> Manifest:
    version = doc.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ManifestError(f"{source}: schema_version {version!r} is not supported "
                            f"(expected {SCHEMA_VERSION})")
    try:
        cell = Cell.from_json(_plain(doc["cell"]))
        fingerprint = Fingerprint.from_json(_plain(doc["fingerprint"]))
    except (KeyError, TypeError, ValueError, MatrixError) as exc:
        raise ManifestError(f"{source}: bad cell or fingerprint: {exc}") from None
    files = validate_files(doc.get("files"), allowed_roots=allowed_roots, source=source)
    producer = _plain(doc.get("producer", {}))
    if not isinstance(producer, dict):
        raise ManifestError(f"{source}: producer: expected an object")
    seconds = doc.get("compile_seconds")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))):
        raise ManifestError(f"{source}: compile_seconds: expected a number or null")
    packs = validate_packs(doc.get("packs", []), files, source=source)
    parts = validate_parts(doc.get("parts", []), files, source=source)
    manifest = Manifest(
        cell=cell, fingerprint=fingerprint, files=files,
        producer=tuple(sorted((str(k), str(v)) for k, v in producer.items())),
        compile_seconds=float(seconds) if seconds is not None else None,
        created_at=str(doc.get("created_at", "")),
        packs=packs, parts=parts, signature=signature,
    )
    claimed = doc.get("entry_key")
    if claimed is not None and claimed != manifest.entry_key:
        raise ManifestError(f"{source}: entry_key {claimed!r} does not match its cell and "
                            f"fingerprint ({manifest.entry_key})")
    return manifest


def validate_relative_path(path: Any, source: str = "manifest") -> str:
    """A safe relative POSIX path: no absolute, no `..`, no empty or `.` parts, no NUL/backslash."""
    if not isinstance(path, str) or not path or len(path) > 4096:
        raise ManifestError(f"{source}: path {path!r}: expected a non-empty relative path")
    if path.startswith("/") or "\\" in path or "\x00" in path or re.match(r"^[A-Za-z]:", path):
        raise ManifestError(f"{source}: path {path!r}: absolute or non-POSIX paths are refused")
    if any(p in ("", ".", "..") for p in path.split("/")):
        raise ManifestError(f"{source}: path {path!r}: empty, '.' or '..' components are refused")
    return path


def validate_files(raw: Any, *, allowed_roots: Sequence[str] | None,
                   source: str = "manifest") -> tuple[FileRecord, ...]:
    """Validated and sorted by (root, path); ``raw`` is emptied as it is read (see _objects)."""
    seen: set[tuple[str, str]] = set()
    out = []
    shared: dict[Any, Any] = {}  # one object per distinct root name and mode, not per file
    for where, item in _objects(raw, "files", MAX_FILES, "records", source):
        root = item.get("root")
        if not isinstance(root, str) or not _ROOT_RE.match(root):
            raise ManifestError(f"{where}: root {root!r}: expected a short lowercase name")
        if allowed_roots is not None and root not in allowed_roots:
            raise ManifestError(f"{where}: unknown root {root!r} (expected one of "
                                f"{sorted(allowed_roots)})")
        path = validate_relative_path(item.get("path"), where)
        size, sha, mode = item.get("size"), item.get("sha256"), item.get("mode", 0o644)
        if not _is_size(size):
            raise ManifestError(f"{where}: size {size!r}: expected an integer >= 0")
        if not is_sha256(sha):
            raise ManifestError(f"{where}: sha256 {sha!r}: expected 64 lowercase hex digits")
        if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o777:
            shown = f"{mode:#o}" if isinstance(mode, int) and not isinstance(mode, bool) \
                else repr(mode)  # a mode reads in octal, as chmod takes it
            raise ManifestError(f"{where}: mode {shown}: expected permission bits 0o0..0o777")
        if (root, path) in seen:
            raise ManifestError(f"{where}: duplicate path {root}/{path}")
        seen.add((root, path))
        out.append(FileRecord(root=shared.setdefault(root, root), path=path, size=size,
                              sha256=sha, mode=shared.setdefault(mode, mode)))
    for f in out:  # a file and a directory at one place would make the tree unrestorable
        parts = f.path.split("/")
        for n in range(1, len(parts)):
            if (f.root, "/".join(parts[:n])) in seen:
                raise ManifestError(f"{source}: {f.root}/{'/'.join(parts[:n])} is both a file "
                                    f"and a directory")
    del seen
    if any((a.root, a.path) > (b.root, b.path) for a, b in zip(out, out[1:], strict=False)):
        out.sort(key=lambda f: (f.root, f.path))  # publish writes them sorted already
    return tuple(out)


def validate_packs(raw: Any, files: Sequence[FileRecord], *,
                   source: str = "manifest") -> tuple[PackRecord, ...]:
    by_sha = {f.sha256: f for f in files}
    out = []
    for where, item in _objects(raw, "packs", MAX_PACKS, "packs", source):
        sha, size, members = item.get("sha256"), item.get("size"), item.get("members")
        if not is_sha256(sha):
            raise ManifestError(f"{where}: sha256 {sha!r}: expected 64 lowercase hex digits")
        if not _is_size(size):
            raise ManifestError(f"{where}: size {size!r}: expected an integer >= 0")
        if not isinstance(members, list) or not members:
            raise ManifestError(f"{where}: members: expected a non-empty list")
        out.append(PackRecord(sha, size, _pack_members(members, size, by_sha, where)))
    return tuple(out)


def _pack_members(raw: list[Any], pack_size: int, files: Mapping[str, FileRecord],
                  where: str) -> tuple[PackMember, ...]:
    members = []
    end = 0
    for j, m in enumerate(raw):
        if not isinstance(m, list) or len(m) != 3:
            raise ManifestError(f"{where}: members[{j}]: expected [sha256, offset, size]")
        sha, offset, size = m
        f = files.get(sha) if isinstance(sha, str) else None
        if f is None or f.size != size or not _is_size(size):
            raise ManifestError(f"{where}: members[{j}]: {str(sha)[:16]!r} of size {size!r} "
                                f"is not a file of this entry")
        if not _is_size(offset) or offset < end or offset + size > pack_size:
            raise ManifestError(f"{where}: members[{j}]: offset {offset!r} overlaps the "
                                f"previous member or runs past the pack's {pack_size} bytes")
        end = offset + size
        members.append(PackMember(f.sha256, offset, f.size))  # the file's objects, not copies
    return tuple(members)


def validate_parts(raw: Any, files: Sequence[FileRecord], *,
                   source: str = "manifest") -> tuple[PartDigests, ...]:
    sizes = {f.sha256: f.size for f in files}
    seen: set[str] = set()
    out = []
    for where, item in _objects(raw, "parts", MAX_FILES, "records", source):
        sha, part_size, digests = item.get("sha256"), item.get("part_size"), item.get("digests")
        if not isinstance(sha, str) or sha not in sizes:
            raise ManifestError(f"{where}: sha256 {str(sha)[:16]!r} is not a file of this entry")
        if sha in seen:
            raise ManifestError(f"{where}: a second record for {sha[:12]}")
        seen.add(sha)
        if isinstance(part_size, bool) or not isinstance(part_size, int) \
                or not MIN_PART_SIZE <= part_size <= MAX_PART_SIZE \
                or part_size & (part_size - 1) or sizes[sha] <= part_size:
            raise ManifestError(f"{where}: part_size {part_size!r}: expected a power of two "
                                f"from {MIN_PART_SIZE} to {MAX_PART_SIZE}, smaller than the "
                                f"file's {sizes[sha]} bytes")
        count = part_count(sizes[sha], part_size)
        if not isinstance(digests, list) or len(digests) != count \
                or not all(is_sha256(d) for d in digests):
            raise ManifestError(f"{where}: digests: expected {count} sha256 hex digests, one "
                                f"per part")
        out.append(PartDigests(sha, part_size, tuple(digests)))
    for f in needs_parts(files):  # every large file has them
        if f.sha256 not in seen:
            raise ManifestError(f"{source}: file {f.root}/{f.path} ({f.size} bytes) has no part "
                                f"digests: files over {REQUIRED_OVER} bytes need a 'parts' "
                                f"record (sha256 {f.sha256[:12]}, a digest per part)")
    return tuple(out)


def _objects(raw: Any, field: str, limit: int, noun: str,
             source: str) -> Iterator[tuple[str, Any]]:
    """(where, object) of a JSON list field, each set to None in ``raw`` as it is handed on."""
    if not isinstance(raw, list) or len(raw) > limit:
        raise ManifestError(f"{source}: {field}: expected a list of at most {limit} {noun}")
    for i in range(len(raw)):
        item, raw[i] = raw[i], None
        where = f"{source}: {field}[{i}]"
        if not isinstance(item, (dict, _RawFile)):
            raise ManifestError(f"{where}: expected an object")
        yield where, item
        del item


class _RawFile:
    """A file record's JSON object, read like the dict (72 bytes, not 232: 160 MiB a million)."""

    __slots__ = _FILE_FIELDS

    def __init__(self, root: Any, path: Any, size: Any, sha256: Any, mode: Any) -> None:
        self.root, self.path, self.size, self.sha256, self.mode = root, path, size, sha256, mode

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in _FILE_KEYS else default

    def __getitem__(self, key: str) -> Any:
        if key not in _FILE_KEYS:
            raise KeyError(key)
        return getattr(self, key)

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in _FILE_FIELDS}

    def __repr__(self) -> str:
        return repr(self.as_dict())


def loads_light(data: bytes | str, *, members: bool = True) -> Any:
    """``json.loads`` with each file record a ``_RawFile``, for readers that only look;
    without ``members`` each pack's members are dropped as it is parsed."""
    if not isinstance(data, str):
        data = data.decode(json.detect_encoding(data), "surrogatepass")
    return json.loads(data, object_hook=_file_hook(members))


def _file_hook(members: bool) -> Callable[[dict[str, Any]], Any]:
    shared: dict[Any, Any] = {}  # one object per distinct root name and mode

    def hook(d: dict[str, Any]) -> Any:
        if len(d) != 5 or d.keys() != _FILE_KEYS:
            if not members and len(d) == 3 and d.keys() == _PACK_KEYS:
                d["members"] = []
            return d
        root, mode = d["root"], d["mode"]
        if isinstance(root, str) and type(mode) is int:  # noqa: E721 - never a bool
            root, mode = shared.setdefault(root, root), shared.setdefault(mode, mode)
        return _RawFile(root, d["path"], d["size"], d["sha256"], mode)

    return hook


def _plain(value: Any) -> Any:
    """``value`` with every ``_RawFile`` in it turned back into its dict (small values only)."""
    if isinstance(value, _RawFile):
        return _plain(value.as_dict())
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _is_size(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and 0 <= value <= MAX_FILE_SIZE
