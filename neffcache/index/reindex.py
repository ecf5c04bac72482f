"""Index what the store holds: entries from its manifests alone, its restore reports, each once."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from neffcache.errors import ManifestError, NeffcacheError, NotFoundError, ReportError
from neffcache.index.api import Index
from neffcache.index.values import InvalidManifest, InvalidObject, InvalidReport, ReindexResult
from neffcache.manifest import Manifest, decode_manifest
from neffcache.reports import MAX_BYTES, Report, date_prefixes, decode_report, report_id_of
from neffcache.store import MANIFESTS, REPORTS, Store, entry_key_of, manifest_key

READERS = 8  # objects fetched in parallel (S3 latency dominates)
BATCH = 200  # manifests or reports indexed per transaction
REMOVE_BATCH = 2_000  # stale entries removed per transaction
BULK = 1000  # rows written past which the planner's statistics are refreshed
T = TypeVar("T")


def plan_objects(object_keys: Iterable[str], name_of: Callable[[str], str | None],
                 skip: Collection[str] = ()) -> tuple[list[tuple[str, str]], list[str]]:
    """(object key, the name it holds) pairs, sorted, without ``skip``; and keys naming none."""
    named = [(key, name_of(key)) for key in sorted(set(object_keys).difference(skip))]
    return [(key, name) for key, name in named if name], [key for key, name in named if not name]


def _load_manifest(store: Store, key: str, entry: str) -> Manifest | InvalidManifest | None:
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
        if pending and (len(pending) >= BATCH or done == len(wanted)):
            added += record(pending)
            pending = []
        if progress is not None:
            progress(done, len(wanted))
    return added, invalid, valid


def reindex(index: Index, store: Store, *, prune: bool = True,
            progress: Callable[[int, int], None] | None = None) -> ReindexResult:
    """Index every valid manifest, prune entries whose manifest is gone; memory: the listing,
    one batch and one page of index keys."""
    wanted, _stray = plan_objects(store.list(MANIFESTS), entry_key_of)
    added, invalid, valid = record_objects(
        lambda k, e: _load_manifest(store, k, e), wanted,
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
    for page in itertools.chain(index.entry_key_pages(), [[]]):  # []: the end, remove the rest
        stale.extend(stale_keys(page, found))
        if stale and (len(stale) >= REMOVE_BATCH or not page):
            keep = still_stored(stale) if still_stored is not None else set()
            removed += index.remove_entries([k for k in stale if k not in keep])
            stale = []
    return removed


def stored_manifests(store: Store, keys: Sequence[str]) -> set[str]:
    present = read_objects(lambda k, _: store.has(manifest_key(k)), [(k, k) for k in keys])
    return {k for k, p in zip(keys, present, strict=True) if p}


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What an ingest found and added; ``settled`` (not in the JSON): keys needing no second
    look."""

    scanned: int = 0
    added: int = 0
    already_ingested: int = 0
    invalid: tuple[InvalidReport, ...] = ()
    settled: frozenset[str] = field(default=frozenset(), compare=False)

    def to_json(self) -> dict[str, Any]:  # settled: not in the document
        return {"scanned": self.scanned, "added": self.added,
                "already_ingested": self.already_ingested,
                "invalid": [{"key": i.key, "reason": i.reason} for i in self.invalid]}


def ingest_reports(index: Index, store: Store, prefixes: Sequence[str] = (REPORTS,), *,
                   skip: Collection[str] = ()) -> IngestResult:
    """Ingest the report objects under ``prefixes`` not in ``skip`` nor yet in the index."""
    wanted, stray = plan_objects((key for prefix in prefixes for key in store.list(prefix)),
                                 report_id_of, skip)
    invalid = [InvalidReport(k, f"{k}: not a report key (reports/YYYY-MM-DD/<report-id>.json)")
               for k in stray]
    known = index.known_report_ids([rid for _, rid in wanted])
    to_read = [(k, rid) for k, rid in wanted if rid not in known]
    added, unreadable, valid = record_objects(lambda k, r: _load_report(store, k, r), to_read,
                                              index.record_reports)
    invalid.extend(unreadable)
    if added >= BULK:
        index.refresh_statistics(["restore_reports", "entries"])
    settled = ({k for k, rid in wanted if rid in known} | set(stray) | {k for k, _ in valid}
               | {bad.key for bad in unreadable})
    # Already ingested: known before this run, or recorded by another ingester meanwhile.
    return IngestResult(scanned=len(wanted) + len(stray), added=added,
                        already_ingested=len(known) + len(valid) - added,
                        invalid=tuple(invalid), settled=frozenset(settled))


def _load_report(store: Store, key: str, rid: str) -> Report | InvalidReport | None:
    try:
        data = store.read(key, 0, MAX_BYTES + 1)
    except NotFoundError:
        return None  # deleted since listing
    try:
        report = decode_report(data, source=key)
    except ReportError as exc:
        return InvalidReport(key, str(exc))
    if report.report_id != rid:
        return InvalidReport(key, f"{key}: holds report {report.report_id!r}, not the one "
                                  f"its name says")
    return report


def ingest_report_files(index: Index, paths: Sequence[Path]) -> IngestResult:
    """Each path a file, or a directory whose ``*.json`` files are read (not recursively)."""
    files = [f for p in paths for f in (sorted(p.glob("*.json")) if p.is_dir() else [p])]
    reports: list[Report] = []
    invalid: list[InvalidReport] = []
    for f in files:
        try:
            with open(f, "rb") as fh:
                data = fh.read(MAX_BYTES + 1)
            reports.append(decode_report(data, source=str(f)))
        except ReportError as exc:
            invalid.append(InvalidReport(str(f), str(exc)))
        except OSError as exc:
            invalid.append(InvalidReport(str(f), f"{f}: cannot read: {exc.strerror}"))
    unique = list({r.report_id: r for r in reports}.values())
    added = sum(index.record_reports(unique[i:i + BATCH]) for i in range(0, len(unique), BATCH))
    return IngestResult(scanned=len(files), added=added,
                        already_ingested=len(reports) - added, invalid=tuple(invalid))


class ReportPoller:
    """Serve's background ingestion: the first tick reads ``catch_up_days``, every later tick
    yesterday to tomorrow (UTC); settled keys are not read again."""

    def __init__(self, index: Index, store: Store, *, catch_up_days: int = 7,
                 warn: Callable[[str], None] | None = None) -> None:
        self.index, self.store, self.warn = index, store, warn
        self.catch_up_days = catch_up_days
        self._settled: dict[str, set[str]] = {}  # date prefix -> settled keys
        self._first = True

    def tick(self, now: datetime) -> IngestResult:
        prefixes = date_prefixes(now, self.catch_up_days if self._first else 1)
        skip = set().union(*(self._settled.get(p, set()) for p in prefixes))
        result = ingest_reports(self.index, self.store, prefixes, skip=skip)
        self._first = False
        window = set(date_prefixes(now, 1))
        self._settled = {p: keys for p, keys in self._settled.items() if p in window}
        for key in result.settled:
            prefix = key.rsplit("/", 1)[0] + "/"
            if prefix in window:
                self._settled.setdefault(prefix, set()).add(key)
        if self.warn:
            for bad in result.invalid:
                self.warn(f"warning: restore report skipped: {bad.reason}")
        return result

    def safe_tick(self, now: datetime) -> IngestResult | None:
        """``tick``, with a failure turned into one warning line."""
        try:
            return self.tick(now)
        except NeffcacheError as exc:
            if self.warn:
                self.warn(f"warning: restore reports not ingested: {' '.join(str(exc).split())}")
            return None
