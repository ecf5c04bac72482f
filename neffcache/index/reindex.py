"""Rebuild the index's entries from the store's manifests alone."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from neffcache.errors import ManifestError, NotFoundError
from neffcache.index.api import Index
from neffcache.index.values import InvalidManifest, InvalidObject, ReindexResult
from neffcache.manifest import Manifest, decode_manifest
from neffcache.store import MANIFESTS, Store, entry_key_of, manifest_key

READERS = 8  # manifests fetched in parallel (S3 latency dominates)
BATCH = 200  # manifests indexed per transaction
REMOVE_BATCH = 2_000  # stale entries removed per transaction
T = TypeVar("T")


def plan_objects(object_keys: Iterable[str], name_of: Callable[[str], str | None],
                 skip: Collection[str] = ()) -> tuple[list[tuple[str, str]], list[str]]:
    """(object key, the name it holds) pairs, sorted, without ``skip``; and keys naming none."""
    wanted, stray = [], []
    for key in sorted(set(object_keys)):
        if key in skip:
            continue
        name = name_of(key)
        (wanted.append((key, name)) if name else stray.append(key))
    return wanted, stray


def _load(store: Store, key: str, entry: str) -> Manifest | InvalidManifest | None:
    try:
        manifest = decode_manifest(store.read(key), source=key)
    except NotFoundError:
        return None  # deleted since listing
    except ManifestError as e:
        return InvalidManifest(key, str(e))
    if manifest.entry_key != entry:
        return InvalidManifest(key, f"{key}: holds entry {manifest.entry_key}, "
                                    f"not the one its name says")
    return manifest


def read_objects(load: Callable[[str, str], T], items: Sequence[tuple[str, str]]
                 ) -> Iterator[T]:
    """``load(object key, expected name)`` per pair, READERS at a time, in input order."""
    with ThreadPoolExecutor(max_workers=READERS) as pool:
        yield from pool.map(lambda kv: load(*kv), items)


def record_objects(load: Callable[[str, str], T | InvalidObject | None],
                   wanted: Sequence[tuple[str, str]], record: Callable[[list[T]], int],
                   progress: Callable[[int, int], None] | None = None
                   ) -> tuple[int, list[InvalidObject], list[tuple[str, str]]]:
    """``load`` the ``wanted`` pairs' objects, ``record`` the valid ones BATCH at a time: (how
    many were new, the invalid ones, the pairs whose object was valid); None: gone since."""
    added, invalid, valid = 0, [], []
    pending: list[T] = []
    for done, (pair, item) in enumerate(zip(wanted, read_objects(load, wanted), strict=True), 1):
        if isinstance(item, InvalidObject):
            invalid.append(item)
        elif item is not None:
            valid.append(pair)
            pending.append(item)
        if len(pending) >= BATCH:
            added += record(pending)
            pending = []
        if progress is not None:
            progress(done, len(wanted))
    if pending:
        added += record(pending)
    return added, invalid, valid


BULK = 1000  # rows written past which the planner's statistics are refreshed


def reindex(index: Index, store: Store, *, prune: bool = True,
            progress: Callable[[int, int], None] | None = None) -> ReindexResult:
    """Index every valid manifest, prune entries whose manifest is gone; memory: the listing,
    one batch and one page of index keys."""
    wanted, _stray = plan_objects(store.list(MANIFESTS), entry_key_of)
    added, invalid, valid = record_objects(
        lambda k, e: _load(store, k, e), wanted,
        lambda manifests: index.record_entries(manifests, store.url), progress)
    # entry keys with a valid manifest: already in order (the listing is sorted), a linear pass
    found = sorted(entry for _, entry in valid)
    # An entry published while the store was read is in the index but not in the listing:
    # a candidate is removed only if its manifest is still absent.
    removed = (remove_stale(index, found, lambda keys: stored_manifests(store, keys))
               if prune else 0)
    if added + removed >= BULK:
        index.refresh_statistics(["entries", "cells", "fingerprints"])
    return ReindexResult(scanned=len(wanted), added=added,
                         already_indexed=len(found) - added, removed=removed,
                         invalid=tuple(invalid))


def stale_keys(page: Sequence[str], found: Sequence[str]) -> list[str]:
    """The keys of ``page`` not in ``found`` (sorted); memory stays about one page."""
    if not page:
        return []
    lo = bisect.bisect_left(found, min(page))
    hi = bisect.bisect_right(found, max(page))
    window = set(found[lo:hi])
    return [key for key in page if key not in window]


def remove_stale(index: Index, found: Sequence[str],
                 still_stored: Callable[[Sequence[str]], set[str]] | None = None) -> int:
    """Remove indexed entries not in ``found`` (sorted) unless ``still_stored`` (new since)."""
    removed = 0
    stale: list[str] = []

    def flush() -> int:
        keep = still_stored(stale) if still_stored is not None else set()
        return index.remove_entries([k for k in stale if k not in keep])

    for page in index.entry_key_pages():
        stale.extend(stale_keys(page, found))
        if len(stale) >= REMOVE_BATCH:
            removed += flush()
            stale = []
    if stale:
        removed += flush()
    return removed


def stored_manifests(store: Store, keys: Sequence[str]) -> set[str]:
    present = read_objects(lambda k, _: store.has(manifest_key(k)), [(k, k) for k in keys])
    return {k for k, p in zip(keys, present, strict=True) if p}
