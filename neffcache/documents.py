"""JSON, canonical (same value, same bytes and digest) or derived from frozen dataclasses (pure)."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from enum import Enum
from pathlib import PurePath
from typing import Any, get_type_hints


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


@dataclasses.dataclass(frozen=True, slots=True)
class Doc:
    """``Annotated`` metadata: a field's OpenAPI description (``server.schemas``), its key when
    not its name ("": left out), and whether it is left out when None."""

    text: str = ""
    key: str | None = None
    optional: bool = False


class Document:
    """Mixin for a frozen dataclass whose JSON document is its fields, in order."""

    __slots__ = ()

    def to_json(self) -> dict[str, Any]:
        return fields_of(self)

    def encode(self) -> bytes:
        """``to_json()`` as compact JSON, keys sorted: the bytes a report or spool file holds."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")).encode()


def fields_of(value: Any) -> dict[str, Any]:
    return {key: encode(item) for name, key, optional in document_keys(value.__class__)
            if (item := getattr(value, name)) is not None or not optional}


@functools.cache
def document_keys(cls: Any) -> tuple[tuple[str, str, bool], ...]:
    """(field, key, optional) of each field of ``cls`` in its document."""
    fields = dataclasses.fields(cls)
    # only annotations naming Doc are resolved: others may name TYPE_CHECKING-only imports
    hints = get_type_hints(cls, include_extras=True) if any(
        "Doc(" in str(f.type) for f in fields) else {}
    docs = [(f.name, next((m for m in getattr(hints.get(f.name), "__metadata__", ())
                           if isinstance(m, Doc)), Doc())) for f in fields]
    return tuple((name, doc.key or name, doc.optional) for name, doc in docs if doc.key != "")


_PLAIN = frozenset({str, int, float, bool, type(None)})


def encode(value: Any) -> Any:
    if type(value) in _PLAIN:  # most values: one set lookup (this runs per field per row)
        return value
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (str, int, float)):
        return value
    to_json = getattr(value, "to_json", None)
    if to_json is not None:
        return to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return fields_of(value)
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, Mapping):
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    raise TypeError(f"no JSON document for {type(value).__name__}")
