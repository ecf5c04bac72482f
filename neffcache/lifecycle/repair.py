"""Repair a store, ``repair_store``: one verify, a plan, consent, then checked rewrites."""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from neffcache.command_steps import consent, open_checked_store
from neffcache.config import read_settings
from neffcache.documents import Document, fields_of
from neffcache.errors import (
    ExitRule,
    IntegrityError,
    ManifestError,
    NeffcacheError,
    NotFoundError,
    UntrustedEntryError,
    UsageError,
)
from neffcache.hashing import CHUNK, VerifyingReader
from neffcache.lifecycle.copy import put_verified
from neffcache.lifecycle.entry_select import decode_entry
from neffcache.lifecycle.verify import Catalogue, Problem, check_objects, gate, read_catalogue
from neffcache.lifecycle.verify_local import DirSource
from neffcache.manifest import Manifest
from neffcache.request_rules import checked_request
from neffcache.store import (
    BLOBS,
    DAMAGED,
    MANIFESTS,
    PACKS,
    Store,
    entry_key_of,
    manifest_key,
    open_store,
    side_environ,
)
from neffcache.thread_pool import map_in_threads
from neffcache.trust import TrustPolicy, load_trust


@dataclass(frozen=True, slots=True)
class RepairItem(Document):
    """One object to rewrite (kind: blob | pack | manifest), why, and its bytes' size, sha256."""

    key: str
    kind: str
    reason: str
    size: int | None = None
    sha256: str | None = None


def plan_repair(problems: Sequence[Problem], cat: Catalogue) -> tuple[RepairItem, ...]:
    """The objects to rewrite, each once, by key (pure); an "unavailable" one may be good."""
    items: dict[str, RepairItem] = {}
    for p in problems:
        if p.kind == "unavailable" or p.key in items:
            continue
        name = p.key.rsplit("/", 1)[-1]
        if p.key.startswith(BLOBS) and name in cat.blobs:
            items[p.key] = RepairItem(p.key, "blob", p.kind, cat.blobs[name][0], name)
        elif p.key.startswith(PACKS) and name in cat.packs:
            items[p.key] = RepairItem(p.key, "pack", p.kind, cat.packs[name][0].size, name)
        elif p.key.startswith(MANIFESTS) and entry_key_of(p.key) is not None:
            items[p.key] = RepairItem(p.key, "manifest", p.kind)
    return tuple(items[k] for k in sorted(items))


class Source(Protocol):
    """Where a repair reads good bytes: a store, a bundle or a restored directory."""

    url: str

    def open(self, key: str) -> BinaryIO: ...

    def read(self, key: str) -> bytes: ...


@checked_request
class RepairRequest:
    """What ``repair_store`` repairs, and from where: exactly one of ``source``, a store URL
    with good bytes (PATH, s3://..., bundle:FILE), and ``from_dir``, a restored directory. A
    replacement manifest passes the trust gate (``trusted_keys``; empty: the settings'):
    signed by a trusted key when keys are configured, and the digest the target's cell
    pointer pins; without keys a manifest with no pin cannot be proven and is refused."""

    store: str | None = None
    source: str | None = None
    from_dir: str | Path | None = None
    dry_run: bool = False
    confirmed: bool = False
    confirm: Callable[[RepairResult], bool] | None = None
    workers: int = 8
    trusted_keys: Sequence[str] = ()
    require_signatures: bool = False


@dataclass(frozen=True, slots=True)
class RepairResult(ExitRule):
    """What a repair planned and did: the objects found bad (``planned``), what became of each
    (``outcomes``: repaired | good | unavailable) and the problems left (``remaining``)."""

    store: str
    source: str
    dry_run: bool
    planned: tuple[RepairItem, ...]
    outcomes: tuple[tuple[str, str], ...] = ()
    remaining: tuple[Problem, ...] = ()
    refused: tuple[Problem, ...] = ()  # manifests the source cannot replace (kind: why)

    def count(self, outcome: str) -> int:
        return sum(1 for _, o in self.outcomes if o == outcome)

    def error(self) -> NeffcacheError | None:
        """IntegrityError (exit 4) while problems remain (a dry run: any problem), else None."""
        if not self.remaining:
            return None
        return IntegrityError(f"{len(self.remaining)} problem(s) remain in {self.store}; "
                              f"first: {self.remaining[0].message}",
                              hint=None if self.dry_run else
                              "repair from another source: --from STORE | bundle:FILE, "
                              "--from-dir DIR")

    def to_json(self) -> dict[str, Any]:
        return dict(fields_of(self), ok=not self.remaining,
                    outcomes=[{"key": k, "outcome": o} for k, o in self.outcomes],
                    **{o: self.count(o) for o in ("repaired", "good", "unavailable")})


def repair_store(request: RepairRequest) -> RepairResult:
    """Rewrite the store's missing and damaged objects from the source, never a good one, only
    with checked bytes and gated manifests. Raises UsageError (exit 2) for no or two sources,
    the same store twice or no consent; ConfigError (2) for a trust setting that cannot be
    met; UnavailableError (exit 6) when a store cannot be reached."""
    if (request.source is None) == (request.from_dir is None):
        raise UsageError("repair needs one source: --from STORE (or bundle:FILE) or --from-dir")
    settings = read_settings(os.environ, store=request.store)
    trust = load_trust(settings, request)
    target = open_checked_store(settings.store_url)
    with ExitStack() as stack:
        source = _open_source(request, target, stack)
        plan = _plan(target, source, trust, request.workers)
        preview = plan.result
        if request.dry_run or not preview.planned or not consent(
                request.confirmed, request.confirm, preview,
                f"repair would rewrite {len(preview.planned)} object(s) in {preview.store}; "
                "not confirmed", hint="neffcache repair --dry-run, then neffcache repair --yes"):
            return preview
        outcomes = _apply(target, source, plan, request.workers)
        done = {k for k, o in outcomes
                if o == "repaired" or o == "good" and k not in plan.manifests}
        return replace(preview, dry_run=False, outcomes=tuple(outcomes),
                       remaining=tuple(p for p in preview.remaining if p.key not in done))


def _open_source(request: RepairRequest, target: Store, stack: ExitStack) -> Source:
    if request.from_dir is not None:
        return DirSource(request.from_dir)
    assert request.source is not None
    # compared before it is checked: the same store twice is a UsageError whatever its state
    source = open_store(request.source, environ=side_environ(os.environ, "FROM"))  # its own keys
    if hasattr(source, "close"):
        stack.callback(source.close)
    if source.url == target.url:
        raise UsageError(f"--from and --store are the same store ({target.url})")
    source.check()
    return source


@dataclass(frozen=True, slots=True)
class _Plan:
    result: RepairResult
    manifests: dict[str, bytes]  # the gated replacements, by key
    admitted: Callable[[str], bool]  # re-gates the target's manifest right before a write


def _plan(target: Store, source: Source, trust: TrustPolicy, workers: int) -> _Plan:
    """One verify of the target, then the objects the gated replacement manifests bring."""
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        cat = read_catalogue(target, pool, trust, workers=workers)
        _, found = check_objects(target, cat, pool, quick=False)
        problems = [*cat.problems, *found, *_unlisted(cat)]
        wanted = [i for i in plan_repair(problems, cat) if i.kind == "manifest"]
        read = map_in_threads(lambda i: _replacement(source, i.key, trust, cat), wanted,
                              workers)
        refused = tuple(r for r in read if isinstance(r, Problem))
        manifests = {i.key: r for i, r in zip(wanted, read, strict=True)
                     if not isinstance(r, Problem)}
        known = (set(cat.blobs), set(cat.packs))
        for key, (_, doc) in manifests.items():
            cat.add(key, doc)
        brought = (set(cat.blobs) - known[0]) | (set(cat.packs) - known[1])
        _, more = check_objects(target, cat, pool, quick=False, only=brought)
    bad = {p.key for p in refused}
    problems = [p for p in problems if p.key not in bad] + more
    planned = tuple(i for i in plan_repair(problems, cat)
                    if i.kind != "manifest" or i.key in manifests)

    def admitted(key: str) -> bool:
        try:
            doc = good_manifest(target.read(key), key)
        except NotFoundError:
            return False
        return doc is not None and gate(doc, key, trust, cat.pins) is None

    result = RepairResult(target.url, source.url, True, planned,
                          remaining=(*problems, *refused), refused=refused)
    return _Plan(result, {k: data for k, (data, _) in manifests.items()}, admitted)


def _unlisted(cat: Catalogue) -> list[Problem]:
    listed = {entry_key_of(k) for k in cat.decoded} | {
        entry_key_of(p.key) for p in cat.problems}
    return [Problem(manifest_key(e), "missing", f"{manifest_key(e)}: missing (named by its "
                    f"cell pointer)") for e in sorted(cat.pins) if e not in listed]


def _replacement(source: Source, key: str, trust: TrustPolicy, cat: Catalogue
                 ) -> tuple[bytes, Manifest] | Problem:
    """The source's manifest ``key`` if it decodes and passes the gate, else why not."""
    where = f"{source.url}/{key}"
    try:
        data = source.read(key)
    except NotFoundError:
        return Problem(key, "unavailable", f"{where}: the source does not have it")
    doc = good_manifest(data, key)
    if doc is None:
        return Problem(key, "unavailable", f"{where}: does not decode as that entry's manifest")
    try:
        trust.admit_replacement(doc, where, cat.pins.get(doc.entry_key))
    except UntrustedEntryError as exc:
        return Problem(key, "untrusted", str(exc))
    return data, doc


def _apply(target: Store, source: Source, plan: _Plan, workers: int) -> list[tuple[str, str]]:
    """As in a publish, an entry's manifest is written only after the objects it references."""
    objects = [i for i in plan.result.planned if i.kind != "manifest"]
    manifests = [i for i in plan.result.planned if i.kind == "manifest"]
    done = map_in_threads(lambda i: rewrite_object(target, source, i), objects, workers)
    done += map_in_threads(lambda i: rewrite_manifest(
        target, i.key, plan.manifests[i.key], plan.admitted), manifests, workers)
    return list(zip((i.key for i in (*objects, *manifests)), done, strict=True))


def good_manifest(data: bytes, key: str) -> Manifest | None:
    try:
        return decode_entry(data, key, entry_key_of(key))
    except ManifestError:
        return None


def object_is_good(store: Store, item: RepairItem) -> bool:
    if item.size is None or item.sha256 is None:  # a manifest item: no object to check
        return False
    try:
        with store.open(item.key) as src:
            reader = VerifyingReader(src, size=item.size, sha256=item.sha256, name=item.key)
            while reader.read(CHUNK):
                pass
    except (NotFoundError, IntegrityError):
        return False
    return True


def rewrite_object(target: Store, source: Source, item: RepairItem) -> str:
    """"repaired", "good" (the target's copy: untouched) or "unavailable" (no good bytes)."""
    assert item.size is not None and item.sha256 is not None
    if object_is_good(target, item):
        return "good"
    try:  # checked while it streams: a mismatch leaves nothing of it
        with source.open(item.key) as raw:
            target.delete(item.key)
            put_verified(target, item.key, raw, item.size, item.sha256,
                         name=f"{source.url}/{item.key}")
    except (NotFoundError, IntegrityError):
        return "unavailable"
    if not object_is_good(target, item):
        return "unavailable"
    target.delete(DAMAGED + item.key)  # no longer quarantined
    return "repaired"


def rewrite_manifest(target: Store, key: str, data: bytes,
                     admitted: Callable[[str], bool]) -> str:
    """Unless the target's copy is ``admitted`` right before the write: "repaired", "good" or
    "unavailable" (afterwards it is not ``data``)."""
    if admitted(key):
        return "good"
    target.delete(key)
    target.put(key, io.BytesIO(data), if_absent=True)
    try:
        if target.read(key) != data:  # another writer's bytes since the delete
            return "good" if admitted(key) else "unavailable"
    except NotFoundError:
        return "unavailable"
    return "repaired"
