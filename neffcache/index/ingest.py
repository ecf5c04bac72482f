"""Ingest restore reports from the store's ``reports/`` or from files (idempotent)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from neffcache.errors import NeffcacheError, NotFoundError, ReportError
from neffcache.index.api import Index
from neffcache.index.reindex import BATCH, BULK, plan_objects, record_objects
from neffcache.index.values import InvalidReport
from neffcache.reports import MAX_BYTES, Report, date_prefixes, decode_report, report_id_of
from neffcache.store import REPORTS, Store


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
    added, unreadable, valid = record_objects(lambda k, r: _load(store, k, r), to_read,
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


def _load(store: Store, key: str, rid: str) -> Report | InvalidReport | None:
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
        back = self.catch_up_days if self._first else 1
        prefixes = date_prefixes(now, back)
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
