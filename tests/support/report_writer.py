"""Write one restore report where a restore would send it, with no thread and no spool."""

from __future__ import annotations

from neffcache.report_send import _writer
from neffcache.reports import Report


def write_report(report: Report, destination: str, store_url: str) -> str:
    """Write ``report`` to ``destination`` (``store`` or a directory path); returns where it
    went. Raises NeffcacheError or OSError when it cannot."""
    return _writer(destination, store_url)(report)
