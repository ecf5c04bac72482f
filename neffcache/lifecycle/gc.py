"""gc: delete blobs and packs no manifest references, abort stale multipart uploads."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Set
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from neffcache.documents import Document
from neffcache.errors import IntegrityError, NotFoundError, UsageError
from neffcache.hashing import is_sha256
from neffcache.manifest import SCHEMA_VERSION
from neffcache.precompile import GRACE_FLOOR_SECONDS, REFRESH_SECONDS
from neffcache.store import (
    BLOBS,
    MANIFESTS,
    PACKS,
    PENDING,
    RETIRED,
    MultipartUploads,
    Store,
    Upload,
    blob_key,
    pack_key,
)
from neffcache.thread_pool import map_in_threads

DEFAULT_GRACE_SECONDS = 3600.0
# A delete is issued within this long of the pending/ listing that cleared it, or waits for the
# next listing: a publish that starts meanwhile has at most this long to be missed (its final
# re-check of the blobs it skipped then finds any such deletion).
RECHECK_SECONDS = 10.0
_BATCH = 500
Sorted = tuple[tuple[str, ...], tuple[str, ...], int, tuple[str, ...]]


def check_grace(grace: float, *, force: bool) -> None:
    """A grace shorter than the floor could outlive no live intent: refuse it unless forced."""
    if grace < GRACE_FLOOR_SECONDS and not force:
        raise UsageError(f"gc --grace {grace:g}: shorter than the {GRACE_FLOOR_SECONDS:g} s "
                         f"floor (a publish renews its pending/ note every "
                         f"{REFRESH_SECONDS:g} s, so a shorter grace can delete the blobs of a "
                         "publish in progress)",
                         hint=f"use --grace {GRACE_FLOOR_SECONDS:g} or more, or add --force "
                              "when no publish, copy or retire can be running")


@dataclass(frozen=True, slots=True)
class Intent:
    """What a publish in progress (pending/) or a retire (retired/: with packs) names."""

    key: str
    created_at: float | None  # None: unreadable, so it spares its blobs and is never deleted
    blobs: frozenset[str]
    packs: frozenset[str] = frozenset()

    def fresh(self, now: float, grace: float) -> bool:
        return self.created_at is None or now - self.created_at < grace


@dataclass(frozen=True, slots=True)
class GcPlan(Document):
    manifests: int
    blobs: int
    referenced: int
    delete: tuple[str, ...]  # blob keys
    spared: tuple[str, ...]  # unreferenced, but named by a publish in progress or a young retire
    stale_intents: tuple[str, ...]
    unknown: tuple[str, ...]  # keys under blobs/ or packs/ that are not such keys: left alone
    packs: int = 0
    delete_packs: tuple[str, ...] = ()  # pack keys
    spared_packs: tuple[str, ...] = ()  # unreferenced, but a publish is in progress or a retire


@dataclass(frozen=True, slots=True)
class GcResult:
    plan: GcPlan
    deleted: tuple[str, ...]
    kept_on_recheck: tuple[str, ...]
    dry_run: bool
    deleted_packs: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {**self.plan.to_json(), "deleted": list(self.deleted),
                "deleted_count": len(self.deleted), "kept_on_recheck": list(self.kept_on_recheck),
                "deleted_packs": list(self.deleted_packs), "dry_run": self.dry_run}


def _sha_of(key: str, key_of: Callable[[str], str]) -> str | None:
    """The sha256 of a blob or pack key, or None if it is not exactly ``key_of(sha256)``."""
    name = key.rsplit("/", 1)[-1]
    return name if is_sha256(name) and key_of(name) == key else None


def plan_packs(pack_keys: Iterable[str], referenced: set[str], intents: Iterable[Intent], *,
               now: float, grace: float, retired: Set[str] = frozenset()) -> Sorted:
    """(delete, spared, packs seen, unknown keys): a publish in progress names none of its packs,
    so none goes while an intent is fresh (restore falls back to the blobs), nor ``retired``."""
    busy = any(i.fresh(now, grace) for i in intents)
    return _sort_out(pack_keys, pack_key, referenced, lambda sha: busy or sha in retired)


def _sort_out(keys: Iterable[str], key_of: Callable[[str], str], referenced: set[str],
              protected: Callable[[str], bool]) -> Sorted:
    """(unreferenced to delete, unreferenced but protected, well-formed keys, other keys)."""
    shas = {key: _sha_of(key, key_of) for key in sorted(keys)}
    unknown = tuple(key for key, sha in shas.items() if sha is None)
    loose = [(key, sha) for key, sha in shas.items() if sha is not None and sha not in referenced]
    return (tuple(key for key, sha in loose if not protected(sha)),
            tuple(key for key, sha in loose if protected(sha)), len(shas) - len(unknown), unknown)


def plan_gc(blob_keys: Iterable[str], referenced: set[str], intents: Iterable[Intent], *,
            now: float, grace: float, retired: Set[str] = frozenset()) -> GcPlan:
    """Unreferenced blobs to delete, sparing those a fresh intent or ``retired`` names (pure)."""
    intents = list(intents)
    protected = set(retired).union(*(i.blobs for i in intents if i.fresh(now, grace)))
    stale = sorted(i.key for i in intents if not i.fresh(now, grace))
    delete, spared, total, unknown = _sort_out(blob_keys, blob_key, referenced,
                                               protected.__contains__)
    return GcPlan(manifests=-1, blobs=total, referenced=len(referenced), delete=delete,
                  spared=spared, stale_intents=tuple(stale), unknown=unknown)


def manifest_all_references(data: bytes, source: str) -> tuple[set[str], set[str]]:
    """(blob sha256s, pack sha256s) a manifest references, read leniently (a hostile path does
    not hide its blobs); IntegrityError for one that is not JSON or of a newer schema."""
    try:
        doc = json.loads(data)
        version = doc.get("schema_version")
        files = doc["files"]
        packs = doc.get("packs", [])
    except (ValueError, UnicodeDecodeError, AttributeError, KeyError, TypeError):
        raise IntegrityError(f"{source}: unreadable manifest; gc cannot know what it references",
                             hint="neffcache verify") from None
    if not isinstance(version, int) or version > SCHEMA_VERSION or not isinstance(files, list):
        raise IntegrityError(f"{source}: schema_version {version!r} is not one gc understands "
                             f"(<= {SCHEMA_VERSION})")
    return _shas(files), _shas(packs) if isinstance(packs, list) else set()


def _shas(records: list[Any]) -> set[str]:
    return {r["sha256"] for r in records if isinstance(r, dict)
            and is_sha256(r.get("sha256"))}


def parse_intent(key: str, data: bytes) -> Intent:
    """A pending/ intent or a retired/ record (unreadable: ``created_at`` None, names nothing)."""
    try:
        doc = json.loads(data)
        return Intent(key, float(doc["created_at"]), frozenset(str(b) for b in doc["blobs"]),
                      frozenset(str(p) for p in doc.get("packs", [])))
    except (ValueError, UnicodeDecodeError, KeyError, TypeError, AttributeError):
        return Intent(key, None, frozenset())


def _read_all(store: Store, keys: Iterable[str], workers: int) -> dict[str, bytes]:
    """The objects at ``keys`` that still exist (a finished publish drops its intent)."""
    def one(key: str) -> tuple[str, bytes | None]:
        try:
            return key, store.read(key)
        except NotFoundError:
            return key, None

    return {k: d for k, d in map_in_threads(one, sorted(keys), workers) if d is not None}


def read_all_references(store: Store, keys: Iterable[str], workers: int
                        ) -> tuple[set[str], set[str]]:
    found = [manifest_all_references(d, k) for k, d in _read_all(store, keys, workers).items()]
    return set().union(*(b for b, _ in found)), set().union(*(p for _, p in found))


def read_intents(store: Store, keys: Iterable[str], workers: int) -> list[Intent]:
    return [parse_intent(k, d) for k, d in _read_all(store, keys, workers).items()]


def read_retired(store: Store, *, now: float, grace: float, workers: int
                 ) -> tuple[set[str], set[str]]:
    """(blob sha256s, pack sha256s) named by retire records younger than ``grace``."""
    young = [r for r in read_intents(store, store.list(RETIRED), workers)
             if r.created_at is not None and now - r.created_at < grace]
    return set().union(*(r.blobs for r in young)), set().union(*(r.packs for r in young))


def collect_gc(store: Store, *, now: float, grace: float = DEFAULT_GRACE_SECONDS,
               workers: int = 16) -> tuple[GcPlan, set[str], set[str]]:
    """The plan, and the manifest and intent keys seen (``apply_gc`` reads only newer ones)."""
    blob_keys = list(store.list(BLOBS))  # blobs first: anything uploaded later is not a candidate
    pack_keys = list(store.list(PACKS))
    manifest_keys = {k for k in store.list(MANIFESTS) if k.endswith(".json")}
    intent_keys = set(store.list(PENDING))
    refs, pack_refs = read_all_references(store, manifest_keys, workers)
    intents = read_intents(store, intent_keys, workers)
    young_blobs, young_packs = read_retired(store, now=now, grace=grace, workers=workers)
    plan = plan_gc(blob_keys, refs, intents, now=now, grace=grace, retired=young_blobs)
    delete_packs, spared_packs, packs, unknown_packs = plan_packs(
        pack_keys, pack_refs, intents, now=now, grace=grace, retired=young_packs)
    plan = replace(plan, manifests=len(manifest_keys), unknown=plan.unknown + unknown_packs,
                   packs=packs, delete_packs=delete_packs, spared_packs=spared_packs)
    return plan, manifest_keys, intent_keys


def apply_gc(store: Store, plan: GcPlan, seen: tuple[set[str], set[str]], *,
             workers: int = 16, recheck: float = RECHECK_SECONDS,
             clock: Callable[[], float] = time.monotonic) -> GcResult:
    """Delete the plan's blobs in batches, keeping those new manifests and intents name; a delete
    later than ``recheck`` after that listing waits for the next (the first ``workers`` of a
    batch always go). Then the packs, unless a publish started since, and stale intents."""
    seen_manifests, seen_intents = set(seen[0]), set(seen[1])
    deleted: list[str] = []
    kept: list[str] = []
    todo = list(plan.delete)
    keep: set[str] = set()  # every listing's: a manifest seen once protects later batches too
    new_packs: set[str] = set()
    publish_started = False
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        while True:
            new_m = {k for k in store.list(MANIFESTS) if k.endswith(".json")} - seen_manifests
            new_i = set(store.list(PENDING)) - seen_intents
            seen_manifests |= new_m
            seen_intents |= new_i
            blobs_named, packs_named = read_all_references(store, new_m, workers)
            keep |= blobs_named
            new_packs |= packs_named
            publish_started = publish_started or bool(new_i)
            keep |= set().union(*(i.blobs for i in read_intents(store, new_i, workers)))
            if not todo:
                break
            cleared = clock()
            batch, todo = todo[:_BATCH], todo[_BATCH:]
            go = [k for k in batch if _sha_of(k, blob_key) not in keep]
            kept.extend(k for k in batch if _sha_of(k, blob_key) in keep)

            def one(item: tuple[int, str], cleared: float = cleared) -> bool:
                if item[0] >= workers and clock() - cleared > recheck:
                    return False  # the listing that cleared it is too old: list again first
                store.delete(item[1])
                return True

            done = list(pool.map(one, enumerate(go)))
            deleted.extend(k for k, d in zip(go, done, strict=True) if d)
            todo = [k for k, d in zip(go, done, strict=True) if not d] + todo
        packs = [] if publish_started else \
            [k for k in plan.delete_packs if _sha_of(k, pack_key) not in new_packs]
        list(pool.map(store.delete, packs))
        list(pool.map(store.delete, plan.stale_intents))
    return GcResult(plan, tuple(deleted), tuple(kept), dry_run=False,
                    deleted_packs=tuple(packs))


@dataclass(frozen=True, slots=True)
class UploadPlan:
    listed: int  # incomplete multipart uploads under the store's prefix
    abort: tuple[Upload, ...]  # started more than the grace ago; no publish in progress needs it
    spared: tuple[Upload, ...]  # as old, but a fresh intent names its blob (or a pack's publish)
    unknown: tuple[Upload, ...] = ()  # not a blob or pack key: not neffcache's, left alone

    def to_json(self) -> dict[str, Any]:
        return {"listed": self.listed, **{name: [upload_json(u) for u in getattr(self, name)]
                                          for name in ("abort", "spared", "unknown")}}


def upload_json(upload: Upload) -> dict[str, str]:
    when = datetime.fromtimestamp(upload.initiated, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"key": upload.key, "upload_id": upload.upload_id, "initiated": when}


def plan_uploads(uploads: Iterable[Upload], intents: Iterable[Intent], *, now: float,
                 grace: float) -> UploadPlan:
    """Uploads older than ``grace`` to abort, unless a fresh intent may need them (pure)."""
    fresh = [i for i in intents if i.fresh(now, grace)]
    named = set().union(*(i.blobs for i in fresh))
    shas = [(u, _sha_of(u.key, blob_key), _sha_of(u.key, pack_key))
            for u in sorted(uploads, key=lambda u: (u.key, u.upload_id))]
    old = [(u, blob in named if blob is not None else bool(fresh)) for u, blob, pack in shas
           if (blob, pack) != (None, None) and now - u.initiated >= grace]
    return UploadPlan(len(shas), tuple(u for u, needed in old if not needed),
                      tuple(u for u, needed in old if needed),
                      tuple(u for u, blob, pack in shas if (blob, pack) == (None, None)))


def collect_uploads(store: Store, *, now: float, grace: float = DEFAULT_GRACE_SECONDS,
                    workers: int = 16) -> tuple[UploadPlan, set[str]] | None:
    """The plan and the intent keys seen; None for a store without multipart uploads."""
    if not isinstance(store, MultipartUploads):
        return None
    uploads = list(store.list_uploads())  # first: an upload started later is no candidate
    intent_keys = set(store.list(PENDING))
    intents = read_intents(store, intent_keys, workers)
    return plan_uploads(uploads, intents, now=now, grace=grace), intent_keys


def apply_uploads(store: Store, plan: UploadPlan, seen_intents: set[str], *,
                  workers: int = 16) -> tuple[Upload, ...]:
    """Abort the plan's uploads but those new intents name (and every pack's, if any)."""
    if not plan.abort or not isinstance(store, MultipartUploads):
        return ()
    new = read_intents(store, set(store.list(PENDING)) - seen_intents, workers)
    named = set().union(*(i.blobs for i in new))
    go = [u for u in plan.abort
          if not (_sha_of(u.key, blob_key) in named or (new and _sha_of(u.key, pack_key)))]
    map_in_threads(store.abort_upload, go, workers)
    return tuple(go)
