"""Canonical JSON and digests: the same value always gives the same bytes and key (pure)."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 kept as is: stable across runs and Python versions."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest_of(value: Any) -> str:
    """sha256 hex of the canonical JSON of a value."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
