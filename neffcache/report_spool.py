"""The report spool (I/O edge): restore reports that could not be sent, kept as files in a
local directory, bounded (the oldest dropped), for the next restore that can send them; and
``neffcache warm``'s verdicts the index did not take in time, for the next warm that reaches it.

One file per report, ``<report-id>.json`` (the report's own encoding), written via a temp
file, fsync and rename; oldest first is by modification time, then name. Nothing here waits
on the network: ``report_send`` decides what is sent, within its time budget.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from neffcache.errors import ReportError
from neffcache.reports import MAX_BYTES as REPORT_MAX_BYTES
from neffcache.reports import Report, Verdicts, decode_document

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
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return final


@dataclass(frozen=True, slots=True)
class Spooled:
    path: Path
    size: int
    mtime: float


def pending(directory: Path) -> list[Spooled]:
    """The spooled report files, oldest first (none when the directory does not exist)."""
    found = []
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    for name in names:
        if name.startswith(".") or not name.endswith(SUFFIX):
            continue
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(directory / name, follow_symlinks=False)
            found.append(Spooled(directory / name, st.st_size, st.st_mtime))
    return sorted(found, key=lambda s: (s.mtime, s.path.name))


def keep(directory: Path, report: Document, *, max_files: int = MAX_FILES,
         max_bytes: int = MAX_BYTES) -> int:
    """Spool ``report``, then drop the oldest files until at most ``max_files`` files and
    ``max_bytes`` bytes are left; returns how many were dropped. Raises OSError when the
    report cannot be written."""
    write_file(directory, report)
    files = pending(directory)
    total = sum(s.size for s in files)
    dropped = 0
    for s in files:
        if len(files) - dropped <= max_files and total <= max_bytes:
            break
        discard(s.path)
        total -= s.size
        dropped += 1
    return dropped


def load(path: Path) -> Document:
    """A spooled document, decoded and validated as ingestion would; raises ReportError for a
    file that is not one (too large, malformed) and OSError when it cannot be read."""
    if os.stat(path, follow_symlinks=False).st_size > REPORT_MAX_BYTES:
        raise ReportError(f"{path}: larger than {REPORT_MAX_BYTES} bytes")
    return decode_document(path.read_bytes(), source=str(path))


def discard(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
