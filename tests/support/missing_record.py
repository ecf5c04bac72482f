"""Test helper: the entries of missing.json alone (restore reads them with their check time)."""

from __future__ import annotations

from pathlib import Path

from neffcache.restore.local import MISSING_RECHECK_SECONDS, read_missing_record


def read_missing(target: Path, fingerprint_key: str, now: float,
                 max_age: float = MISSING_RECHECK_SECONDS) -> dict[str, tuple[str, ...]]:
    """Entry keys recorded missing for this fingerprint less than ``max_age`` seconds ago."""
    return read_missing_record(target, fingerprint_key, now, max_age)[0]
