"""Store integrity: manifests decode and pass the trust gate, their blobs and packs match."""

from __future__ import annotations

import hashlib
import io
import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Annotated, Any, BinaryIO

from neffcache.command_steps import open_checked_store
from neffcache.config import read_settings
from neffcache.documents import Doc, Document
from neffcache.errors import (
    ExitRule,
    IntegrityError,
    ManifestError,
    NeffcacheError,
    NotFoundError,
    UnavailableError,
    UntrustedEntryError,
)
from neffcache.hashing import CHUNK, PartHasher
from neffcache.lifecycle.entry_select import decode_entry
from neffcache.manifest import Manifest, PackRecord, PartDigests
from neffcache.request_rules import checked_request
from neffcache.store import (
    BLOBS,
    DAMAGED,
    MANIFESTS,
    PACKS,
    Store,
    TempFile,
    TempFiles,
    blob_key,
    entry_key_of,
    pack_key,
)
from neffcache.trust import UNCHECKED, TrustPolicy, check_pin, load_trust, read_pins

MAX_LISTED = 200


@dataclass(frozen=True, slots=True)
class Problem(Document):
    key: str
    # manifest | missing | size | sha256 | unavailable (packs: the same kinds); manifests also
    # untrusted | pin (refused by the trust gate)
    kind: str
    message: Annotated[str, Doc(key="error")]


@dataclass(frozen=True, slots=True)
class VerifyStoreResult(ExitRule):
    """What ``verify_store`` found: counts, bytes read, every problem."""

    manifests: int
    blobs: int
    bytes_checked: int
    problems: tuple[Problem, ...]
    quick: bool
    seconds: float
    packs: int = 0
    temps: tuple[TempFile, ...] = ()  # stale temp files of killed writers: reported, harmless

    def error(self) -> NeffcacheError | None:
        """IntegrityError (exit 4), UnavailableError (only unreadable objects: exit 6) or None."""
        if not self.problems:
            return None
        bad = [p for p in self.problems if p.kind != "unavailable"]
        if not bad:
            return UnavailableError(f"{len(self.problems)} object(s) could not be read: "
                                    f"{self.problems[0].message}")
        return IntegrityError(f"{len(bad)} integrity problem(s) in the store; first: "
                              f"{bad[0].message}")

    def to_json(self) -> dict[str, Any]:
        """``neffcache verify --json``; lists hold their first 200 (temp_files: ``gc`` removes)."""
        return {"ok": not self.problems, "manifests": self.manifests, "blobs": self.blobs,
                "bytes_checked": self.bytes_checked, "quick": self.quick, "packs": self.packs,
                "problems": [p.to_json() for p in self.problems[:MAX_LISTED]],
                "problem_count": len(self.problems), "seconds": round(self.seconds, 3),
                "temp_files": [{"key": t.key, "size": t.size} for t in self.temps[:MAX_LISTED]]}


@checked_request
class VerifyStoreRequest:
    """What ``verify_store`` checks. ``quick``: existence only (no download); ``progress(done,
    total)``: per blob; ``quarantine``: mark each damaged blob or pack with a ``damaged/<key>``
    object, so push, copy and bundle import rewrite it instead of skipping. ``trusted_keys``
    (``ed25519:...`` or files of them; empty: the settings'): a manifest none of them signed is
    a problem (``untrusted``), as is one whose digest its cell pointer does not pin (``pin``)."""

    store: str | None = None
    quick: bool = False
    workers: int = 8
    progress: Callable[[int, int], None] | None = None
    quarantine: bool = False
    trusted_keys: Sequence[str] = ()
    require_signatures: bool = False


def verify_store(request: VerifyStoreRequest) -> VerifyStoreResult:
    """Check every manifest of the store and what it references; problems are in the result.
    Raises UnavailableError (exit 6) for an unreachable store, ConfigError for a bad URL."""
    settings = read_settings(os.environ, store=request.store)
    trust = load_trust(settings, request)
    s = open_checked_store(settings.store_url)
    result = audit_store(s, quick=request.quick, workers=request.workers,
                         progress=request.progress, trust=trust)
    if request.quarantine:
        for p in result.problems:
            if p.kind in ("size", "sha256") and p.key.startswith((BLOBS, PACKS)):
                s.put(DAMAGED + p.key, io.BytesIO(p.message.encode("utf-8")), if_absent=True)
    return result


@dataclass(slots=True)
class Catalogue:
    """What a store's manifests reference, each object once with its first referencing key."""

    blobs: dict[str, tuple[int, str]] = field(default_factory=dict)
    packs: dict[str, tuple[PackRecord, str]] = field(default_factory=dict)
    parts: dict[str, dict[PartDigests, str]] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    decoded: set[str] = field(default_factory=set)
    listed: int = 0  # manifests listed, decoded or not
    pins: dict[str, str | None] = field(default_factory=dict)  # entry key -> pinned digest

    def add(self, key: str, doc: Manifest) -> None:
        self.decoded.add(key)
        for pack in doc.packs:
            self.packs.setdefault(pack.sha256, (pack, key))
        for record in doc.parts:
            self.parts.setdefault(record.sha256, {}).setdefault(record, key)
        for f in doc.files:
            prior = self.blobs.setdefault(f.sha256, (f.size, key))
            if prior[0] != f.size:
                self.problems.append(Problem(
                    key, "size", f"{key}: {f.root}/{f.path}: size {f.size} but {prior[1]} "
                    f"records {prior[0]} for the same sha256 {f.sha256[:12]}"))


def audit_store(store: Store, *, quick: bool = False, workers: int = 8,
                progress: Callable[[int, int], None] | None = None,
                trust: TrustPolicy = UNCHECKED) -> VerifyStoreResult:
    """Check every manifest of ``store`` (gated) and each blob and pack it references, once."""
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        catalogue = read_catalogue(store, pool, trust, workers=workers)
        checked, problems = check_objects(store, catalogue, pool, quick, progress)
    temps = tuple(store.stale_temps()) if isinstance(store, TempFiles) else ()
    return VerifyStoreResult(catalogue.listed, len(catalogue.blobs), checked,
                             (*catalogue.problems, *problems), quick,
                             time.monotonic() - started, len(catalogue.packs), temps)


def read_catalogue(store: Store, pool: ThreadPoolExecutor, trust: TrustPolicy = UNCHECKED,
                   *, workers: int = 8) -> Catalogue:
    keys = sorted(k for k in store.list(MANIFESTS) if entry_key_of(k) is not None)
    catalogue = Catalogue(listed=len(keys), pins=read_pins(store, workers))
    read = pool.map(lambda k: _read_gated(store, k, trust, catalogue.pins), keys)
    for key, (doc, problem) in zip(keys, read, strict=True):
        if problem is not None:
            catalogue.problems.append(problem)
        if doc is not None:  # a refused one's blobs are still checked: they may be fine
            catalogue.add(key, doc)
    return catalogue


def _read_gated(store: Store, key: str, trust: TrustPolicy, pins: Mapping[str, str | None]
                ) -> tuple[Manifest | None, Problem | None]:
    try:
        doc = decode_entry(store.read(key), key, entry_key_of(key))
    except (ManifestError, NotFoundError) as exc:
        return None, Problem(key, "manifest", str(exc))
    except UnavailableError as exc:
        return None, Problem(key, "unavailable", str(exc))
    return doc, gate(doc, key, trust, pins)


def gate(doc: Manifest, key: str, trust: TrustPolicy, pins: Mapping[str, str | None]
         ) -> Problem | None:
    """Why the trust gate refuses manifest ``key`` (kind ``untrusted`` or ``pin``), or None."""
    for kind, check in (("untrusted", lambda: trust.admit(doc, key)),
                        ("pin", lambda: check_pin(doc, key, pins.get(doc.entry_key)))):
        try:
            check()
        except UntrustedEntryError as exc:
            return Problem(key, kind, str(exc))
    return None


def check_objects(store: Store, catalogue: Catalogue, pool: ThreadPoolExecutor, quick: bool,
                  progress: Callable[[int, int], None] | None = None,
                  only: Collection[str] | None = None) -> tuple[int, list[Problem]]:
    """Bytes read and problems of the catalogue's blobs and packs (with ``only``: those)."""
    blobs = sorted(s for s in catalogue.blobs if only is None or s in only)
    packs = sorted(s for s in catalogue.packs if only is None or s in only)

    def blob(sha: str) -> tuple[int, list[Problem]]:
        size, ref = catalogue.blobs[sha]
        return _check(store, blob_key(sha), ref, quick, lambda src: _blob_problems(
            src, sha, size, ref, catalogue.parts.get(sha, {})))

    def pack(sha: str) -> tuple[int, list[Problem]]:
        record, ref = catalogue.packs[sha]
        return _check(store, pack_key(sha), ref, quick,
                      lambda src: _pack_problems(src, pack_key(sha), record, ref))

    checked, problems = 0, []
    for done, (nbytes, found) in enumerate(pool.map(blob, blobs), 1):
        checked += nbytes
        problems.extend(found)
        if progress:
            progress(done, len(blobs))
    for nbytes, found in pool.map(pack, packs):
        checked += nbytes
        problems.extend(found)
    return checked, problems


def _check(store: Store, key: str, ref: str, quick: bool,
           check: Callable[[BinaryIO], tuple[int, list[Problem]]]) -> tuple[int, list[Problem]]:
    """Bytes read and problems of object ``key``: ``check`` its bytes, or (``quick``) only
    whether it is there."""
    try:
        if not quick:
            with store.open(key) as src:
                return check(src)
        if store.has(key):
            return 0, []
    except NotFoundError:
        pass
    except UnavailableError as exc:
        return 0, [Problem(key, "unavailable", str(exc))]
    return 0, [Problem(key, "missing", f"{key}: missing (referenced by {ref})")]


def _blob_problems(src: BinaryIO, sha: str, size: int, ref: str,
                   parts: Mapping[PartDigests, str]) -> tuple[int, list[Problem]]:
    key = blob_key(sha)
    h = hashlib.sha256()
    hashers = {p: PartHasher(p.part_size) for p in parts}
    n = 0
    while chunk := src.read(CHUNK):
        n += len(chunk)
        h.update(chunk)
        for hasher in hashers.values():
            hasher.update(chunk)
    if n != size:
        return n, [Problem(key, "size", f"{key}: {n} bytes, expected {size} "
                           f"(referenced by {ref})")]
    if h.hexdigest() != sha:
        return n, [Problem(key, "sha256", f"{key}: sha256 is {h.hexdigest()[:12]}, not its "
                           f"name (referenced by {ref})")]
    return n, [_parts_problem(record, by, hasher.digests())
               for (record, by), hasher in zip(parts.items(), hashers.values(), strict=True)
               if hasher.digests() != record.digests]


def _parts_problem(record: PartDigests, by: str, found: tuple[str, ...]) -> Problem:
    bad = [i + 1 for i, (a, b) in enumerate(zip(found, record.digests, strict=False))
           if a != b] \
        or [min(len(found), len(record.digests)) + 1]  # a manifest that disagrees on the size
    return Problem(by, "manifest", f"{by}: part digests of blob {record.sha256[:12]} do not "
                   f"match its bytes (part {bad[0]} of {len(record.digests)}); restores of it "
                   f"fail")


def _pack_problems(src: BinaryIO, key: str, pack: PackRecord, by: str
                   ) -> tuple[int, list[Problem]]:
    """Streamed member by member, so memory stays at one member."""
    bad, n = [], 0
    for m in pack.members:  # validated: in offset order, inside the pack
        n += len(read_full(src, m.offset - n))  # the gap before it
        data = read_full(src, m.size)
        n += len(data)
        if hashlib.sha256(data).hexdigest() != m.sha256:
            bad.append(m)
    while chunk := src.read(CHUNK):
        n += len(chunk)
    if n != pack.size:
        return n, [Problem(key, "size", f"{key}: {n} bytes, expected {pack.size} "
                           f"(referenced by {by})")]
    return n, [Problem(key, "sha256", f"{key}: member {m.sha256[:12]} at offset {m.offset} "
                       f"does not match its sha256 (referenced by {by})") for m in bad]


def read_full(src: BinaryIO, size: int) -> bytes:
    """``size`` bytes of ``src`` (fewer only where it ends), however little each read gives."""
    parts, left = [], size
    while left > 0 and (chunk := src.read(min(left, CHUNK))):
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)
