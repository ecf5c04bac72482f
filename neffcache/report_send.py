"""Send a restore report (I/O edge): one create-only object under the store's ``reports/``
prefix, or one file in a local directory, within a time budget; never the index.

A boot must not wait on reporting: the write runs in a daemon thread given ``timeout``
seconds, and any failure or timeout is one warning line; it never changes an exit code.
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
from collections.abc import Callable
from pathlib import Path

from neffcache.config import REPORTS_OFF, REPORTS_TO_STORE
from neffcache.reports import Report, scrub


def write_report(report: Report, destination: str, store_url: str) -> str:
    """Write ``report`` to ``destination`` (``store`` or a directory path); returns where it
    went. Raises NeffcacheError or OSError when it cannot."""
    if destination == REPORTS_TO_STORE:
        from neffcache.store import open_store

        store = open_store(store_url)
        if not store.put(report.key, io.BytesIO(report.encode()), if_absent=True):
            raise FileExistsError(f"{report.key} already exists")
        return f"{store.url}/{report.key}"
    return str(_write_file(Path(destination).expanduser(), report))


def _write_file(directory: Path, report: Report) -> Path:
    """``DIR/<report-id>.json`` via a temp file beside it, fsync and rename."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"{report.report_id}.json"
    tmp = directory / f".{report.report_id}.json.tmp"
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


def send_report(report: Report, destination: str, store_url: str, timeout: float,
                warn: Callable[[str], None]) -> bool:
    """Write the report in a background thread for at most ``timeout`` seconds; True when it
    was written. A failure or a timeout is one ``warn`` line, never an exception."""
    if destination == REPORTS_OFF:
        return False
    errors: list[BaseException] = []

    def send() -> None:
        try:
            write_report(report, destination, store_url)
        except BaseException as exc:  # noqa: BLE001 - reported as one warning line below
            errors.append(exc)

    worker = threading.Thread(target=send, name="neffcache-report", daemon=True)
    worker.start()
    worker.join(timeout)
    where = "the store's reports/ prefix" if destination == REPORTS_TO_STORE else destination
    if worker.is_alive():
        warn(f"warning: restore report not written to {where} within {timeout:.1f} s")
        return False
    if errors:
        reason = " ".join(scrub(str(errors[0]) or type(errors[0]).__name__).split())
        warn(f"warning: restore report not written to {where}: {reason}")
        return False
    return True
