"""Canonical JSON and digests: the same value always gives the same bytes and key (pure)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from typing import Any


def canonical_json(value: Any, default: Callable[[Any], Any] | None = None) -> str:
    """Sorted keys, no whitespace, UTF-8 kept as is: stable across runs and Python versions."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=default)


def digest_of(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def digest_chunked(value: dict[str, Any], batch: int = 4096,
                   default: Callable[[Any], Any] | None = None) -> str:
    """``digest_of(value)`` piece by piece: a million-file manifest is never one string."""
    h = hashlib.sha256()
    for piece in canonical_pieces(value, batch, default):
        h.update(piece.encode("utf-8"))
    return h.hexdigest()


def canonical_pieces(value: dict[str, Any], batch: int = 4096,
                     default: Callable[[Any], Any] | None = None) -> Iterator[str]:
    """``canonical_json(value)`` of a dict, a long list ``batch`` items at a time."""
    yield "{"
    for n, key in enumerate(sorted(value)):
        item = value[key]
        yield f"{',' if n else ''}{canonical_json(key)}:"
        if isinstance(item, (list, tuple)) and len(item) > batch:
            yield "["
            for i in range(0, len(item), batch):
                piece = canonical_json(item[i:i + batch], default)[1:-1]
                yield ("," if i else "") + piece
            yield "]"
        else:
            yield canonical_json(item, default)
    yield "}"
