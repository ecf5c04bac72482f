"""Garbage collection: delete blobs and packs no manifest references (``plan_gc`` and
``plan_packs`` are pure; the rest I/O).

Concurrent publishes stay safe: a publish writes ``pending/<entry-key>.<id>.json`` naming every
blob it relies on *before* uploading or skipping any, renews it (under a new key) every
``REFRESH_SECONDS`` while it runs, and drops it once its manifest is written (see
``precompile.intents``). gc lists blobs first, then manifests and intents; a blob named by an
intent younger than the grace period (default 1 hour, at least ``GRACE_FLOOR_SECONDS`` unless
forced: ``check_grace``) is spared, and manifests/intents are listed again right before each
batch of deletions; a delete not started within ``RECHECK_SECONDS`` of that listing waits for
the next one. Intents older than the grace period are left by crashed publishes and are
deleted. A manifest gc cannot read stops it (its references are unknown).

Multipart uploads (S3 only) left by killed publishes are aborted once started more than the
grace period ago, unless a fresh intent names their blob (or, for a pack, any publish is in
progress): ``plan_uploads`` decides, ``collect_uploads``/``apply_uploads`` do the I/O.

Retired entries (``neffcache retire``) leave a record under ``retired/`` naming every blob and
pack they referenced; while a record is younger than the grace period those blobs and packs are
spared too, so a restore that read a manifest just before it was retired still finds its blobs.

Packs (small blobs back to back, an extra: every member is also a blob) are named by manifests
only, and a publish uploads its packs before its manifest, without naming them in its intent.
So unreferenced packs are deleted only when no publish is in progress (no fresh intent at
planning, no new intent before deleting). Even a pack deleted under a racing publish loses
nothing: restore falls back to the members' blobs.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from neffcache.documents import Document
from neffcache.errors import IntegrityError, NotFoundError, UsageError
from neffcache.lifecycle.retire import parse_record
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

DEFAULT_GRACE_SECONDS = 3600.0
# A delete is issued within this long of the pending/ listing that cleared it, or waits for the
# next listing: a publish that starts meanwhile has at most this long to be missed (its final
# re-check of the blobs it skipped then finds any such deletion).
RECHECK_SECONDS = 10.0
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_BATCH = 500


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
    key: str
    created_at: float | None  # None: unreadable, so it spares its blobs and is never deleted
    blobs: frozenset[str]


@dataclass(frozen=True, slots=True)
class GcPlan(Document):
    manifests: int
    blobs: int
    referenced: int
    delete: tuple[str, ...]  # blob keys
    spared: tuple[str, ...]  # unreferenced, but named by a publish in progress
    stale_intents: tuple[str, ...]
    unknown: tuple[str, ...]  # keys under blobs/ or packs/ that are not such keys: left alone
    packs: int = 0
    delete_packs: tuple[str, ...] = ()  # pack keys
    spared_packs: tuple[str, ...] = ()  # unreferenced, but a publish is in progress


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


def sha_of_blob_key(key: str) -> str | None:
    """The sha256 of a blob key, or None if the key is not exactly ``blob_key(sha256)``."""
    return _sha_of(key, blob_key)


def sha_of_pack_key(key: str) -> str | None:
    """The sha256 of a pack key, or None if the key is not exactly ``pack_key(sha256)``."""
    return _sha_of(key, pack_key)


def _sha_of(key: str, key_of: Callable[[str], str]) -> str | None:
    name = key.rsplit("/", 1)[-1]
    return name if _SHA_RE.match(name) and key_of(name) == key else None


def plan_packs(pack_keys: Iterable[str], referenced: set[str], intents: Iterable[Intent], *,
               now: float, grace: float) -> tuple[tuple[str, ...], tuple[str, ...], int,
                                                  tuple[str, ...]]:
    """(delete, spared, packs seen, unknown keys): unreferenced packs are deleted only when no
    intent is fresh, since a publish in progress does not name the packs it uploads (pure)."""
    busy = any(i.created_at is None or now - i.created_at < grace for i in intents)
    return _sort_out(pack_keys, sha_of_pack_key, referenced, lambda sha: busy)


def _sort_out(keys: Iterable[str], sha_of: Callable[[str], str | None], referenced: set[str],
              protected: Callable[[str], bool]
              ) -> tuple[tuple[str, ...], tuple[str, ...], int, tuple[str, ...]]:
    """(unreferenced to delete, unreferenced but protected, well-formed keys, other keys)."""
    delete: list[str] = []
    spared: list[str] = []
    unknown: list[str] = []
    total = 0
    for key in sorted(keys):
        sha = sha_of(key)
        if sha is None:
            unknown.append(key)
            continue
        total += 1
        if sha not in referenced:
            (spared if protected(sha) else delete).append(key)
    return tuple(delete), tuple(spared), total, tuple(unknown)


def plan_gc(blob_keys: Iterable[str], referenced: set[str], intents: Iterable[Intent], *,
            now: float, grace: float) -> GcPlan:
    """Unreferenced blobs to delete, sparing those a fresh intent names (pure)."""
    intents = list(intents)
    fresh = [i for i in intents if i.created_at is None or now - i.created_at < grace]
    stale = sorted(i.key for i in intents if i.created_at is not None
                   and now - i.created_at >= grace)
    protected = set().union(*(i.blobs for i in fresh)) if fresh else set()
    delete, spared, total, unknown = _sort_out(blob_keys, sha_of_blob_key, referenced,
                                               protected.__contains__)
    return GcPlan(manifests=-1, blobs=total, referenced=len(referenced), delete=delete,
                  spared=spared, stale_intents=tuple(stale), unknown=unknown)


def manifest_references(data: bytes, source: str) -> set[str]:
    """The sha256s a manifest references, read leniently (a hostile path does not hide its
    blobs); a manifest that is not JSON, or of a newer schema, is an IntegrityError."""
    return manifest_all_references(data, source)[0]


def manifest_all_references(data: bytes, source: str) -> tuple[set[str], set[str]]:
    """(blob sha256s, pack sha256s) a manifest references; see ``manifest_references``."""
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
    blobs = {f["sha256"] for f in files if isinstance(f, dict)
             and isinstance(f.get("sha256"), str) and _SHA_RE.match(f["sha256"])}
    pack_shas = {p["sha256"] for p in packs if isinstance(p, dict)
                 and isinstance(p.get("sha256"), str) and _SHA_RE.match(p["sha256"])} \
        if isinstance(packs, list) else set()
    return blobs, pack_shas


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


def read_all_references(store: Store, keys: Iterable[str], workers: int
                        ) -> tuple[set[str], set[str]]:
    """(blob sha256s, pack sha256s) the manifests at ``keys`` reference."""
    blobs: set[str] = set()
    packs: set[str] = set()
    for key, data in _read_all(store, keys, workers).items():
        if data is not None:
            b, p = manifest_all_references(data, key)
            blobs |= b
            packs |= p
    return blobs, packs


def read_intents(store: Store, keys: Iterable[str], workers: int) -> list[Intent]:
    return [parse_intent(k, d) for k, d in _read_all(store, keys, workers).items() if d is not None]


def collect_gc(store: Store, *, now: float, grace: float = DEFAULT_GRACE_SECONDS,
               workers: int = 16) -> tuple[GcPlan, set[str], set[str]]:
    """List blobs, then manifests and intents; plan. Also returns the manifest and intent keys
    seen, so ``apply_gc`` can look only at what appeared since."""
    blob_keys = list(store.list(BLOBS))  # blobs first: anything uploaded later is not a candidate
    pack_keys = list(store.list(PACKS))
    manifest_keys = {k for k in store.list(MANIFESTS) if k.endswith(".json")}
    intent_keys = set(store.list(PENDING))
    refs, pack_refs = read_all_references(store, manifest_keys, workers)
    intents = read_intents(store, intent_keys, workers)
    plan = plan_gc(blob_keys, refs, intents, now=now, grace=grace)
    delete_packs, spared_packs, packs, unknown_packs = plan_packs(pack_keys, pack_refs, intents,
                                                                  now=now, grace=grace)
    young_blobs, young_packs = read_retired(store, now=now, grace=grace, workers=workers)
    delete, spared = _spare(plan.delete, plan.spared, sha_of_blob_key, young_blobs)
    delete_packs, spared_packs = _spare(delete_packs, spared_packs, sha_of_pack_key, young_packs)
    plan = GcPlan(len(manifest_keys), plan.blobs, plan.referenced, delete, spared,
                  plan.stale_intents, plan.unknown + unknown_packs, packs, delete_packs,
                  spared_packs)
    return plan, manifest_keys, intent_keys


def read_retired(store: Store, *, now: float, grace: float, workers: int
                 ) -> tuple[set[str], set[str]]:
    """(blob sha256s, pack sha256s) named by retire records younger than ``grace``."""
    blobs: set[str] = set()
    packs: set[str] = set()
    for data in _read_all(store, list(store.list(RETIRED)), workers).values():
        created, b, p = parse_record(data) if data is not None else (None, set(), set())
        if created is not None and now - created < grace:
            blobs |= b
            packs |= p
    return blobs, packs


def _spare(delete: tuple[str, ...], spared: tuple[str, ...], sha_of: Callable[[str], str | None],
           protected: set[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Move the keys whose sha256 is protected from ``delete`` to ``spared`` (pure)."""
    if not protected:
        return delete, spared
    moved = tuple(k for k in delete if sha_of(k) in protected)
    return tuple(k for k in delete if sha_of(k) not in protected), tuple(sorted(spared + moved))


def apply_gc(store: Store, plan: GcPlan, seen: tuple[set[str], set[str]], *,
             workers: int = 16, recheck: float = RECHECK_SECONDS,
             clock: Callable[[], float] = time.monotonic) -> GcResult:
    """Delete the plan's blobs in batches; before each batch, read manifests and intents that
    appeared since planning and keep any blob they name. A delete that would start more than
    ``recheck`` seconds after that listing goes back for the next one (the first ``workers`` of
    a batch always go, so every round makes progress). Then the plan's packs, unless a
    publish started since planning (its packs are named nowhere yet) and except those new
    manifests name. Then delete stale intents."""
    seen_manifests, seen_intents = set(seen[0]), set(seen[1])
    deleted: list[str] = []
    kept: list[str] = []
    todo = list(plan.delete)
    new_packs: set[str] = set()
    publish_started = False
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        while True:
            new_m = {k for k in store.list(MANIFESTS) if k.endswith(".json")} - seen_manifests
            new_i = set(store.list(PENDING)) - seen_intents
            seen_manifests |= new_m
            seen_intents |= new_i
            keep, packs_named = read_all_references(store, new_m, workers)
            new_packs |= packs_named
            publish_started = publish_started or bool(new_i)
            for intent in read_intents(store, new_i, workers):
                keep |= intent.blobs
            if not todo:
                break
            cleared = clock()
            batch, todo = todo[:_BATCH], todo[_BATCH:]
            go = [k for k in batch if sha_of_blob_key(k) not in keep]
            kept.extend(k for k in batch if sha_of_blob_key(k) in keep)

            def one(item: tuple[int, str], cleared: float = cleared) -> bool:
                if item[0] >= workers and clock() - cleared > recheck:
                    return False  # the listing that cleared it is too old: list again first
                store.delete(item[1])
                return True

            done = list(pool.map(one, enumerate(go)))
            deleted.extend(k for k, d in zip(go, done, strict=True) if d)
            todo = [k for k, d in zip(go, done, strict=True) if not d] + todo
        packs = [] if publish_started else \
            [k for k in plan.delete_packs if sha_of_pack_key(k) not in new_packs]
        list(pool.map(store.delete, packs))
        list(pool.map(store.delete, plan.stale_intents))
    return GcResult(plan, tuple(deleted), tuple(kept), dry_run=False,
                    deleted_packs=tuple(packs))


# --- multipart uploads (S3) ----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class UploadPlan:
    listed: int  # incomplete multipart uploads under the store's prefix
    abort: tuple[Upload, ...]  # started more than the grace ago; no publish in progress needs it
    spared: tuple[Upload, ...]  # as old, but a fresh intent names its blob (or a pack's publish)
    unknown: tuple[Upload, ...] = ()  # not a blob or pack key: not neffcache's, left alone

    def to_json(self) -> dict[str, Any]:
        return {"listed": self.listed, "abort": [upload_json(u) for u in self.abort],
                "spared": [upload_json(u) for u in self.spared],
                "unknown": [upload_json(u) for u in self.unknown]}


def upload_json(upload: Upload) -> dict[str, str]:
    when = datetime.fromtimestamp(upload.initiated, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"key": upload.key, "upload_id": upload.upload_id, "initiated": when}


def plan_uploads(uploads: Iterable[Upload], intents: Iterable[Intent], *, now: float,
                 grace: float) -> UploadPlan:
    """Uploads of blobs and packs started more than ``grace`` ago, to abort unless a fresh intent
    names the blob (or, for a pack, any publish is in progress: intents do not name packs)
    (pure)."""
    uploads = list(uploads)
    fresh = [i for i in intents if i.created_at is None or now - i.created_at < grace]
    named = set().union(*(i.blobs for i in fresh)) if fresh else set()
    abort: list[Upload] = []
    spared: list[Upload] = []
    unknown: list[Upload] = []
    for u in sorted(uploads, key=lambda u: (u.key, u.upload_id)):
        blob, pack = sha_of_blob_key(u.key), sha_of_pack_key(u.key)
        if blob is None and pack is None:
            unknown.append(u)
        elif now - u.initiated >= grace:
            needed = blob in named if blob is not None else bool(fresh)
            (spared if needed else abort).append(u)
    return UploadPlan(len(uploads), tuple(abort), tuple(spared), tuple(unknown))


def collect_uploads(store: Store, *, now: float, grace: float = DEFAULT_GRACE_SECONDS,
                    workers: int = 16) -> tuple[UploadPlan, set[str]] | None:
    """List the store's multipart uploads, then the intents; plan. None for a store without
    multipart uploads (local, bundle). Also returns the intent keys seen, for ``apply_uploads``."""
    if not isinstance(store, MultipartUploads):
        return None
    uploads = list(store.list_uploads())  # first: an upload started later is no candidate
    intent_keys = set(store.list(PENDING))
    intents = read_intents(store, intent_keys, workers)
    return plan_uploads(uploads, intents, now=now, grace=grace), intent_keys


def apply_uploads(store: Store, plan: UploadPlan, seen_intents: set[str], *,
                  workers: int = 16) -> tuple[Upload, ...]:
    """Abort the plan's uploads, except those named by intents that appeared since planning
    (and every pack's, if any did). Returns the uploads aborted."""
    if not plan.abort or not isinstance(store, MultipartUploads):
        return ()
    new = read_intents(store, set(store.list(PENDING)) - seen_intents, workers)
    named = set().union(*(i.blobs for i in new)) if new else set()
    go = [u for u in plan.abort
          if not (sha_of_blob_key(u.key) in named or (new and sha_of_pack_key(u.key)))]
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        list(pool.map(store.abort_upload, go))
    return tuple(go)


def plan_only(plan: GcPlan) -> GcResult:
    """The result of a dry run: the plan, nothing deleted."""
    return GcResult(plan, (), (), dry_run=True)


def describe(result: GcResult) -> Mapping[str, int]:
    p = result.plan
    return {"manifests": p.manifests, "blobs": p.blobs, "referenced": p.referenced,
            "unreferenced": len(p.delete) + len(p.spared), "spared": len(p.spared),
            "deleted": len(result.deleted), "stale_intents": len(p.stale_intents),
            "packs": p.packs, "unreferenced_packs": len(p.delete_packs) + len(p.spared_packs),
            "deleted_packs": len(result.deleted_packs)}
