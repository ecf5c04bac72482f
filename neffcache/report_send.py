"""Send restore reports to the store or a directory within a time budget, spooling the unsent."""

from __future__ import annotations

import contextlib
import functools
import io
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from neffcache.config import REPORTS_OFF, REPORTS_TO_STORE
from neffcache.errors import ReportError
from neffcache.reports import MAX_BYTES as REPORT_MAX_BYTES
from neffcache.reports import Report, Verdicts, decode_document, scrub

if TYPE_CHECKING:
    from neffcache.store import Store

Put = Callable[[Report], str]


def _writer(destination: str, store_url: str, store: Store | None = None) -> Put:
    """Writes reports (create-only) to ``destination``; a store is opened once, when needed."""
    if destination != REPORTS_TO_STORE:
        directory = Path(destination).expanduser()
        return lambda report: str(write_file(directory, report))

    @functools.cache
    def opened() -> Store:
        from neffcache.store import open_store

        return open_store(store_url) if store is None else store

    def put(report: Report) -> str:
        if not opened().put(report.key, io.BytesIO(report.encode()), if_absent=True):
            raise FileExistsError(f"{report.key} already exists")
        return f"{opened().url}/{report.key}"

    return put


def send_spooled(spool: Path, put: Put, until: float) -> int:
    """Send spooled restore reports, oldest first, until ``until`` (time.monotonic()); returns
    how many; raises what ``put`` raises. A file that is no document is dropped."""
    sent = 0
    for item in pending(spool):
        if time.monotonic() >= until:
            break
        try:
            report = load(item.path)
        except ReportError:
            discard(item.path)
            continue
        except OSError:
            continue
        if not isinstance(report, Report):
            continue  # a warm's verdicts: for the index, sent by the next warm
        with contextlib.suppress(FileExistsError):  # sent by a run that gave up waiting on it
            put(report)
        discard(item.path)
        sent += 1
    return sent


def send_report(report: Report, destination: str, store_url: str, timeout: float,
                warn: Callable[[str], None], spool: Path | None = None,
                store: Store | None = None) -> bool:
    """Write the report (after the spooled ones) in a daemon thread for at most ``timeout``
    seconds: a boot never waits on it. True when written; else one ``warn`` line, never an
    exception, and the report is spooled. ``store``: the restore's open one (saves ~10 ms)."""
    if destination == REPORTS_OFF:
        return False
    until = time.monotonic() + timeout
    errors: list[BaseException] = []
    flushed: list[int] = []
    put = _writer(destination, store_url, store)

    def send() -> None:
        if spool is not None:
            with contextlib.suppress(BaseException):  # this report is tried all the same
                flushed.append(send_spooled(spool, put, until))
        try:
            put(report)
        except BaseException as exc:  # noqa: BLE001 - reported as one warning line below
            errors.append(exc)

    worker = threading.Thread(target=send, name="neffcache-report", daemon=True)
    worker.start()
    worker.join(max(0.0, until - time.monotonic()))
    where = "the store's reports/ prefix" if destination == REPORTS_TO_STORE else destination
    if flushed and flushed[0]:
        warn(f"restore: sent {flushed[0]} spooled restore report(s) to {where}")
    if worker.is_alive():
        warn(f"warning: restore report not written to {where} within {timeout:.1f} s"
             f"{_spool(report, spool)}")
        return False
    if errors:
        reason = " ".join(scrub(str(errors[0]) or type(errors[0]).__name__).split())
        warn(f"warning: restore report not written to {where}: {reason}{_spool(report, spool)}")
        return False
    return True


def _spool(report: Report, spool: Path | None) -> str:
    """Spool the report; what to add to the warning line."""
    if spool is None:
        return ""
    try:
        dropped = keep(spool, report)
    except OSError as exc:
        return f"; not spooled either ({spool}: {exc.strerror or exc})"
    more = f", {dropped} oldest dropped" if dropped else ""
    return f"; kept in {spool}{more} (sent by the next restore that can)"


Document = Report | Verdicts  # what a spool file holds (its "kind" says which)

MAX_FILES = 100  # a boot that cannot report for 100 restores keeps only the newest 100
MAX_BYTES = 16 << 20  # ... and at most this much (a report is a few kB; at most 4 MiB)
SUFFIX = ".json"
SPOOL_DIR = "report-spool"  # a restore's default spool: in its target's .neffcache-entries/


def write_file(directory: Path, report: Document) -> Path:
    """``DIR/<report-id>.json`` via a temp file beside it, fsync and rename."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"{report.report_id}{SUFFIX}"
    tmp = directory / f".{report.report_id}{SUFFIX}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as out:
            out.write(report.encode())
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, final)
    finally:
        discard(tmp)
    return final


@dataclass(frozen=True, slots=True)
class Spooled:
    path: Path
    size: int
    mtime: float


def pending(directory: Path) -> list[Spooled]:
    found = []
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    for name in (n for n in names if not n.startswith(".") and n.endswith(SUFFIX)):
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(directory / name, follow_symlinks=False)
            found.append(Spooled(directory / name, st.st_size, st.st_mtime))
    return sorted(found, key=lambda s: (s.mtime, s.path.name))


def keep(directory: Path, report: Document, *, max_files: int = MAX_FILES,
         max_bytes: int = MAX_BYTES) -> int:
    """Spool ``report``, then drop the oldest files beyond ``max_files`` and ``max_bytes``;
    returns how many were dropped. Raises OSError when the report cannot be written."""
    write_file(directory, report)
    files = pending(directory)
    total = sum(s.size for s in files)
    for dropped, s in enumerate(files):  # oldest first
        if len(files) - dropped <= max_files and total <= max_bytes:
            return dropped
        discard(s.path)
        total -= s.size
    return len(files)


def load(path: Path) -> Document:
    """Validated as ingestion would: ReportError for a file that is not one, else OSError."""
    if os.stat(path, follow_symlinks=False).st_size > REPORT_MAX_BYTES:
        raise ReportError(f"{path}: larger than {REPORT_MAX_BYTES} bytes")
    return decode_document(path.read_bytes(), source=str(path))


def discard(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
