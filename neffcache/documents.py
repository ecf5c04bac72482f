"""JSON documents derived from frozen dataclasses: their fields in order, each encoded (pure)."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from datetime import datetime
from enum import Enum
from pathlib import PurePath
from typing import Any, get_type_hints


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
    keys = []
    for f in fields:
        doc = next((m for m in getattr(hints.get(f.name), "__metadata__", ())
                    if isinstance(m, Doc)), Doc())
        if doc.key != "":
            keys.append((f.name, doc.key or f.name, doc.optional))
    return tuple(keys)


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
