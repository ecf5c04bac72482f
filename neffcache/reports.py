"""Restore reports and warm verdicts as documents: built, keyed, validated and bounded (pure)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any

from neffcache.documents import Doc, Document, fields_of
from neffcache.errors import ReportError
from neffcache.fingerprint import Fingerprint
from neffcache.hashing import SHA256_HEX, is_sha256
from neffcache.store import REPORTS
from neffcache.store import report_key as _report_key

KIND = "neffcache.restore-report"
SCHEMA_VERSION = 1

MAX_BYTES = 4 << 20  # a report object larger than this is refused unread
MAX_CELLS = 20_000  # ids per cell list (a large matrix, with room)
MAX_TEXT = 2_000  # error messages, paths
MAX_NAME = 255  # host, matrix, cell ids, backend, status words
MAX_FIELDS = 200  # fingerprint fields and info
MAX_INT = (1 << 63) - 1
STATUSES = ("ok", "partial", "failed")
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"  # UTC, to the microsecond

_HOST_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
REPORT_ID = re.compile(r"[A-Za-z0-9._-]{1,64}-\d{8}T\d{6}Z-[0-9a-f]{8}")
_REPORT_KEY = re.compile(  # reports/<UTC date>/<report-id>.json
    rf"{re.escape(REPORTS)}\d{{4}}-\d{{2}}-\d{{2}}/({REPORT_ID.pattern})\.json")
# Credentials that could slip into free text: URL userinfo, query strings (presigned URLs carry
# X-Amz-Signature / X-Amz-Credential / X-Amz-Security-Token there) and AWS access key ids.
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/\s@]*@")
_QUERY = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s?#]*)[?#][^\s'\"]*")
_ACCESS_KEY = re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")


@dataclass(frozen=True, slots=True)
class Report(Document):
    """One restore run as an instance reports it; every field validated."""

    report_id: str
    time: datetime  # UTC, to the microsecond (so runs within one second keep their order)
    host: str
    matrix: str
    backend: str
    fingerprint_key: str
    fingerprint: Fingerprint | None
    status: str
    exit_code: int
    error: str | None
    store: str
    target: str
    cells_requested: tuple[str, ...]
    cells_restored: tuple[str, ...]
    cells_missing: tuple[str, ...]
    cells_incomplete: tuple[str, ...]
    entries: tuple[str, ...]  # entry keys found for the requested cells
    files_fetched: int
    files_skipped: int
    files_failed: int
    bytes_fetched: int
    deadline_hit: bool
    seconds: float
    conflicts: int
    version: Annotated[str, Doc(key="neffcache_version")]  # neffcache's, on the instance

    @property
    def key(self) -> str:
        return report_key(self.time, self.report_id)

    def to_json(self) -> dict[str, Any]:
        return {"kind": KIND, "schema_version": SCHEMA_VERSION, **fields_of(self),
                "time": format_time(self.time)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Report:
        """ReportError names the first bad field (kind and schema_version: decode_document)."""
        v = _Fields(data)
        fp_key = v.match("fingerprint_key", SHA256_HEX)
        report = cls(
            report_id=v.match("report_id", REPORT_ID), time=v.time("time"),
            host=v.text("host", MAX_NAME), matrix=v.text("matrix", MAX_NAME),
            backend=v.text("backend", MAX_NAME), fingerprint_key=fp_key,
            fingerprint=v.fingerprint("fingerprint", fp_key),
            status=v.choice("status", STATUSES), exit_code=v.integer("exit_code", 255),
            error=v.text("error", MAX_TEXT, optional=True), store=v.text("store", MAX_TEXT),
            target=v.text("target", MAX_TEXT),
            cells_requested=v.names("cells_requested"),
            cells_restored=v.names("cells_restored"), cells_missing=v.names("cells_missing"),
            cells_incomplete=v.names("cells_incomplete"), entries=v.keys("entries"),
            files_fetched=v.integer("files_fetched"), files_skipped=v.integer("files_skipped"),
            files_failed=v.integer("files_failed"), bytes_fetched=v.integer("bytes_fetched"),
            deadline_hit=v.flag("deadline_hit"), seconds=v.number("seconds"),
            conflicts=v.integer("conflicts"), version=v.text("neffcache_version", MAX_NAME))
        if report.report_id.rsplit("-", 2)[1] != report.time.strftime("%Y%m%dT%H%M%SZ"):
            raise ReportError("report_id: its time does not match the report's time")
        return report


VERDICTS_KIND = "neffcache.warm-verdicts"
VERDICT_STATUSES = ("hit", "compiled")


@dataclass(frozen=True, slots=True)
class Verdicts(Document):
    """One ``neffcache warm``'s (entry key, hit | compiled) pairs, for the index."""

    report_id: str
    time: datetime
    verdicts: tuple[tuple[str, str], ...]

    def to_json(self) -> dict[str, Any]:
        return {"kind": VERDICTS_KIND, "schema_version": SCHEMA_VERSION,
                "report_id": self.report_id, "time": format_time(self.time),
                "verdicts": [{"entry_key": k, "status": s} for k, s in self.verdicts]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Verdicts:
        v = _Fields(data)
        pairs = []
        for item in v._get("verdicts", _cells, f"expected a list of at most {MAX_CELLS}"):
            f = _Fields(item if isinstance(item, Mapping) else {})
            pairs.append((f.match("entry_key", SHA256_HEX), f.choice("status", VERDICT_STATUSES)))
        return cls(v.match("report_id", REPORT_ID), v.time("time"), tuple(pairs))


def decode_document(data: bytes, *, source: str) -> Report | Verdicts:
    if len(data) > MAX_BYTES:
        raise ReportError(f"{source}: larger than {MAX_BYTES} bytes")
    try:
        doc = json.loads(data)
        if not isinstance(doc, Mapping):
            raise ReportError("not a JSON object")
        if doc.get("kind") not in (KIND, VERDICTS_KIND):
            raise ReportError(f"kind: expected {KIND!r}")
        if doc.get("schema_version") != SCHEMA_VERSION:
            raise ReportError(f"schema_version: expected {SCHEMA_VERSION}")
        return (Verdicts if doc["kind"] == VERDICTS_KIND else Report).from_json(doc)
    except ReportError as exc:
        raise ReportError(f"{source}: {exc}") from None
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ReportError(f"{source}: not valid JSON: {str(exc)[:200]}") from None


def decode_report(data: bytes, *, source: str) -> Report:
    """ReportError names ``source`` and the field."""
    doc = decode_document(data, source=source)
    if not isinstance(doc, Report):
        raise ReportError(f"{source}: kind: expected {KIND!r}")
    return doc


def build_report(doc: Mapping[str, Any], *, fingerprint: Fingerprint, host: str, matrix: str,
                 now: datetime, nonce: str, version: str) -> Report:
    """From a restore's JSON document (``RestoreResult.to_json()`` or its early-stop failure
    document), text scrubbed of credentials and bounded; ``nonce``: 8 hex characters."""
    now = now.astimezone(timezone.utc)
    report_id = make_report_id(host, now, nonce)

    def names(key: str) -> tuple[str, ...]:
        return tuple(_bounded(str(c), MAX_NAME) for c in (doc.get(key) or ())[:MAX_CELLS])

    def count(key: str) -> int:
        value = doc.get(key, 0)
        return min(max(int(value), 0), MAX_INT) if isinstance(value, (int, float)) else 0

    failed = doc.get("files_failed_count", doc.get("files_failed", 0))
    seconds = doc.get("seconds", 0.0)
    status = doc.get("status")
    return Report(
        report_id=report_id, time=now, host=_bounded(host, MAX_NAME),
        matrix=_bounded(scrub(matrix), MAX_NAME),
        backend=_bounded(str(doc.get("backend") or fingerprint.backend), MAX_NAME),
        fingerprint_key=fingerprint.key, fingerprint=fingerprint,
        status=status if status in STATUSES else "failed",
        exit_code=min(max(count("exit_code"), 0), 255),
        error=_bounded(scrub(str(doc["error"])), MAX_TEXT) if doc.get("error") else None,
        store=_bounded(scrub(str(doc.get("store") or "")), MAX_TEXT),
        target=_bounded(scrub(str(doc.get("target") or "")), MAX_TEXT),
        cells_requested=names("cells_requested"), cells_restored=names("cells_restored"),
        cells_missing=names("cells_missing"), cells_incomplete=names("cells_incomplete"),
        entries=tuple(k for k in (doc.get("entries") or ())[:MAX_CELLS]
                      if is_sha256(k)),
        files_fetched=count("files_fetched"), files_skipped=count("files_skipped"),
        files_failed=len(failed) if isinstance(failed, list) else count("files_failed_count"),
        bytes_fetched=count("bytes_fetched"), deadline_hit=bool(doc.get("deadline_hit")),
        seconds=float(seconds) if _finite(seconds) and seconds >= 0 else 0.0,
        conflicts=count("conflicts"), version=_bounded(version, MAX_NAME))


def safe_host(host: str) -> str:
    cleaned = _HOST_UNSAFE.sub("_", host).strip("._-")[:64]
    return cleaned or "unknown"


def make_report_id(host: str, when: datetime, nonce: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{8}", nonce):
        raise ValueError(f"nonce {nonce!r}: expected 8 lowercase hex characters")
    stamp = when.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{safe_host(host)}-{stamp}-{nonce}"


def report_key(when: datetime, report_id: str) -> str:
    """``reports/<UTC date>/<report-id>.json``."""
    return _report_key(f"{when.astimezone(timezone.utc):%Y-%m-%d}", report_id)


def report_id_of(object_key: str) -> str | None:
    found = _REPORT_KEY.fullmatch(object_key)
    return found.group(1) if found else None


def date_prefixes(now: datetime, days_back: int, days_ahead: int = 1) -> list[str]:
    """``reports/<date>/``, oldest first, ``days_ahead`` too: an instance's clock may be ahead."""
    today = now.astimezone(timezone.utc).date()
    return [f"{REPORTS}{today + timedelta(days=d):%Y-%m-%d}/"
            for d in range(-days_back, days_ahead + 1)]


def scrub(text: str) -> str:
    text = _USERINFO.sub(r"\1", text)
    text = _QUERY.sub(r"\1", text)
    return _ACCESS_KEY.sub("AKIA…", text)


def format_time(when: datetime) -> str:
    return when.astimezone(timezone.utc).strftime(TIME_FORMAT)


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _cells(value: Any, item_ok: Callable[[Any], bool] = lambda _: True) -> bool:
    """A list of at most ``MAX_CELLS`` items, each ``item_ok``."""
    return isinstance(value, list) and len(value) <= MAX_CELLS and all(map(item_ok, value))


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


class _Fields:
    """Typed, bounded reads of a decoded report's fields."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = data

    def _get(self, name: str, ok: Callable[[Any], bool] | None = None,
             expected: str = "") -> Any:
        """ReportError when the field is missing, or ``expected`` when its value is not ``ok``."""
        if name not in self.data:
            raise ReportError(f"{name}: missing")
        value = self.data[name]
        if ok is not None and not ok(value):
            raise ReportError(f"{name}: {expected}")
        return value

    def text(self, name: str, limit: int, *, optional: bool = False) -> Any:
        value = self._get(name, lambda v: (v is None and optional)
                          or (isinstance(v, str) and len(v) <= limit),
                          f"expected a string of at most {limit} characters")
        if value is not None and value != scrub(value):
            raise ReportError(f"{name}: holds something that looks like a credential")
        return value

    def match(self, name: str, pattern: re.Pattern[str]) -> str:
        return self._get(name, lambda v: isinstance(v, str) and bool(pattern.fullmatch(v)),
                         "malformed")

    def choice(self, name: str, choices: Sequence[str]) -> str:
        return str(self._get(name, lambda v: v in choices,
                             f"expected one of {', '.join(choices)}"))

    def integer(self, name: str, limit: int = MAX_INT) -> int:
        return self._get(name, lambda v: not isinstance(v, bool) and isinstance(v, int)
                         and 0 <= v <= limit, f"expected an integer from 0 to {limit}")

    def number(self, name: str) -> float:
        return float(self._get(name, lambda v: _finite(v) and 0 <= v <= 1e9,
                               "expected a non-negative number"))

    def flag(self, name: str) -> bool:
        return self._get(name, lambda v: isinstance(v, bool), "expected true or false")

    def time(self, name: str) -> datetime:
        value = self._get(name)
        try:
            when = datetime.strptime(value, TIME_FORMAT)
        except (TypeError, ValueError):
            raise ReportError(f"{name}: expected YYYY-MM-DDTHH:MM:SS.ffffffZ") from None
        return when.replace(tzinfo=timezone.utc)

    def names(self, name: str) -> tuple[str, ...]:
        return tuple(self._get(name, lambda v: _cells(v, lambda c: isinstance(c, str)
                                                      and 0 < len(c) <= MAX_NAME),
                               f"expected a list of at most {MAX_CELLS} cell ids"))

    def keys(self, name: str) -> tuple[str, ...]:
        return tuple(self._get(name, lambda v: _cells(v, is_sha256),
                               "expected a list of entry keys (64 hex characters)"))

    def fingerprint(self, name: str, key: str) -> Fingerprint | None:
        value = self._get(name)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise ReportError(f"{name}: expected an object")
        fields, info = value.get("fields"), value.get("info") or {}
        if not isinstance(fields, Mapping) or not isinstance(info, Mapping) \
                or len(fields) + len(info) > MAX_FIELDS or not all(
                    isinstance(k, str) and isinstance(v, str) and len(k) <= MAX_NAME
                    and len(v) <= MAX_TEXT for part in (fields, info) for k, v in part.items()):
            raise ReportError(f"{name}: expected fields and info of at most {MAX_FIELDS} "
                              f"string pairs")
        try:
            fp = Fingerprint.from_json(value)
        except ValueError as exc:
            raise ReportError(f"{name}: {exc}") from None
        if fp.key != key:
            raise ReportError(f"{name}: its key is not fingerprint_key")
        return fp
