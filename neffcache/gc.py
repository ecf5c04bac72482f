"""Garbage collection: delete blobs no manifest references (``plan_gc`` is pure; the rest I/O).

Concurrent publishes stay safe: a publish writes ``pending/<entry-key>.<id>.json`` naming every
blob it relies on *before* uploading or skipping any, and drops it once its manifest is written.
gc lists blobs first, then manifests and intents; a blob named by an intent younger than the
grace period (default 1 hour) is spared, and manifests/intents are listed again right before
each batch of deletions. Intents older than the grace period are left by crashed publishes and
are deleted. A manifest gc cannot read stops it (its references are unknown).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from neffcache.errors import IntegrityError, NotFoundError
from neffcache.manifest import SCHEMA_VERSION
from neffcache.store import Store, blob_key
from neffcache.store.base import BLOBS, MANIFESTS, PENDING

DEFAULT_GRACE_SECONDS = 3600.0
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_BATCH = 500


@dataclass(frozen=True, slots=True)
class Intent:
    key: str
    created_at: float | None  # None: unreadable, so it spares its blobs and is never deleted
    blobs: frozenset[str]


@dataclass(frozen=True, slots=True)
class GcPlan:
    manifests: int
    blobs: int
    referenced: int
    delete: tuple[str, ...]  # blob keys
    spared: tuple[str, ...]  # unreferenced, but named by a publish in progress
    stale_intents: tuple[str, ...]
    unknown: tuple[str, ...]  # keys under blobs/ that are not blob keys: left alone

    def to_json(self) -> dict[str, Any]:
        return {"manifests": self.manifests, "blobs": self.blobs, "referenced": self.referenced,
                "delete": list(self.delete), "spared": list(self.spared),
                "stale_intents": list(self.stale_intents), "unknown": list(self.unknown)}


@dataclass(frozen=True, slots=True)
class GcResult:
    plan: GcPlan
    deleted: tuple[str, ...]
    kept_on_recheck: tuple[str, ...]
    dry_run: bool

    def to_json(self) -> dict[str, Any]:
        return {**self.plan.to_json(), "deleted": list(self.deleted),
                "deleted_count": len(self.deleted), "kept_on_recheck": list(self.kept_on_recheck),
                "dry_run": self.dry_run}


def sha_of_blob_key(key: str) -> str | None:
    """The sha256 of a blob key, or None if the key is not exactly ``blob_key(sha256)``."""
    name = key.rsplit("/", 1)[-1]
    return name if _SHA_RE.match(name) and blob_key(name) == key else None


def plan_gc(blob_keys: Iterable[str], referenced: set[str], intents: Iterable[Intent], *,
            now: float, grace: float) -> GcPlan:
    """Unreferenced blobs to delete, sparing those a fresh intent names (pure)."""
    intents = list(intents)
    fresh = [i for i in intents if i.created_at is None or now - i.created_at < grace]
    stale = sorted(i.key for i in intents if i.created_at is not None
                   and now - i.created_at >= grace)
    protected = set().union(*(i.blobs for i in fresh)) if fresh else set()
    delete: list[str] = []
    spared: list[str] = []
    unknown: list[str] = []
    total = 0
    for key in sorted(blob_keys):
        sha = sha_of_blob_key(key)
        if sha is None:
            unknown.append(key)
            continue
        total += 1
        if sha in referenced:
            continue
        (spared if sha in protected else delete).append(key)
    return GcPlan(manifests=-1, blobs=total, referenced=len(referenced), delete=tuple(delete),
                  spared=tuple(spared), stale_intents=tuple(stale), unknown=tuple(unknown))


def manifest_references(data: bytes, source: str) -> set[str]:
    """The sha256s a manifest references, read leniently (a hostile path does not hide its
    blobs); a manifest that is not JSON, or of a newer schema, is an IntegrityError."""
    try:
        doc = json.loads(data)
        version = doc.get("schema_version")
        files = doc["files"]
    except (ValueError, UnicodeDecodeError, AttributeError, KeyError, TypeError):
        raise IntegrityError(f"{source}: unreadable manifest; gc cannot know what it references",
                             hint="neffcache verify") from None
    if not isinstance(version, int) or version > SCHEMA_VERSION or not isinstance(files, list):
        raise IntegrityError(f"{source}: schema_version {version!r} is not one gc understands "
                             f"(<= {SCHEMA_VERSION})")
    return {f["sha256"] for f in files if isinstance(f, dict)
            and isinstance(f.get("sha256"), str) and _SHA_RE.match(f["sha256"])}


def parse_intent(key: str, data: bytes) -> Intent:
    try:
        doc = json.loads(data)
        created = float(doc["created_at"])
        blobs = frozenset(str(b) for b in doc["blobs"])
    except (ValueError, UnicodeDecodeError, KeyError, TypeError):
        return Intent(key, None, frozenset())
    return Intent(key, created, blobs)


# --- I/O ----------------------------------------------------------------------------------

def _read_all(store: Store, keys: Iterable[str], workers: int) -> dict[str, bytes | None]:
    def one(key: str) -> tuple[str, bytes | None]:
        try:
            return key, store.read(key)
        except NotFoundError:
            return key, None  # deleted since it was listed (a finished publish's intent)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return dict(pool.map(one, sorted(keys)))


def read_references(store: Store, keys: Iterable[str], workers: int) -> set[str]:
    refs: set[str] = set()
    for key, data in _read_all(store, keys, workers).items():
        if data is not None:
            refs |= manifest_references(data, key)
    return refs


def read_intents(store: Store, keys: Iterable[str], workers: int) -> list[Intent]:
    return [parse_intent(k, d) for k, d in _read_all(store, keys, workers).items() if d is not None]


def collect_gc(store: Store, *, now: float, grace: float = DEFAULT_GRACE_SECONDS,
               workers: int = 16) -> tuple[GcPlan, set[str], set[str]]:
    """List blobs, then manifests and intents; plan. Also returns the manifest and intent keys
    seen, so ``apply_gc`` can look only at what appeared since."""
    blob_keys = list(store.list(BLOBS))  # blobs first: anything uploaded later is not a candidate
    manifest_keys = {k for k in store.list(MANIFESTS) if k.endswith(".json")}
    intent_keys = set(store.list(PENDING))
    refs = read_references(store, manifest_keys, workers)
    plan = plan_gc(blob_keys, refs, read_intents(store, intent_keys, workers), now=now,
                   grace=grace)
    plan = GcPlan(len(manifest_keys), plan.blobs, plan.referenced, plan.delete, plan.spared,
                  plan.stale_intents, plan.unknown)
    return plan, manifest_keys, intent_keys


def apply_gc(store: Store, plan: GcPlan, seen: tuple[set[str], set[str]], *,
             workers: int = 16) -> GcResult:
    """Delete the plan's blobs in batches; before each batch, read manifests and intents that
    appeared since planning and keep any blob they name. Then delete stale intents."""
    seen_manifests, seen_intents = set(seen[0]), set(seen[1])
    deleted: list[str] = []
    kept: list[str] = []
    todo = list(plan.delete)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        while todo:
            batch, todo = todo[:_BATCH], todo[_BATCH:]
            new_m = {k for k in store.list(MANIFESTS) if k.endswith(".json")} - seen_manifests
            new_i = set(store.list(PENDING)) - seen_intents
            seen_manifests |= new_m
            seen_intents |= new_i
            keep = read_references(store, new_m, workers)
            for intent in read_intents(store, new_i, workers):
                keep |= intent.blobs
            go = [k for k in batch if sha_of_blob_key(k) not in keep]
            kept.extend(k for k in batch if sha_of_blob_key(k) in keep)
            list(pool.map(store.delete, go))
            deleted.extend(go)
        list(pool.map(store.delete, plan.stale_intents))
    return GcResult(plan, tuple(deleted), tuple(kept), dry_run=False)


def dry_run(plan: GcPlan) -> GcResult:
    return GcResult(plan, (), (), dry_run=True)


def describe(result: GcResult) -> Mapping[str, int]:
    p = result.plan
    return {"manifests": p.manifests, "blobs": p.blobs, "referenced": p.referenced,
            "unreferenced": len(p.delete) + len(p.spared), "spared": len(p.spared),
            "deleted": len(result.deleted), "stale_intents": len(p.stale_intents)}
