"""JSON documents derived from frozen dataclasses: a value is declared once, as its dataclass,
and its document is its fields in order, each value ``encode``d (pure).

``Document`` gives a dataclass ``to_json()``: each field under its name, its value encoded by
``encode``: a nested value by its own ``to_json()`` (or its fields, for a dataclass without
one), a tuple or list as a list, a mapping as an object, a datetime as ISO 8601 to the second,
an enum as its value, a path as a string, None as null. ``Doc`` carries a field's
description into the HTTP API's schema (``Annotated[int, Doc("...")]``), which
``neffcache.server.schemas`` derives from the same dataclass, and its other name in the
document (``key``; "" leaves it out) or that it is left out when None (``optional``); a
computed key is a ``field(init=False)`` its ``__post_init__`` sets. A value whose document
is not its fields (flattened, reordered, a stored format with a ``schema_version``) writes
its own ``to_json``; ``shaped_as`` builds it when the API declares the document as a
TypedDict whose keys are the value's attributes.
"""

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
    """A field's description in the API's OpenAPI document, its key in its document when not
    its name ("": not in it), and whether it is left out when None (``Annotated`` metadata)."""

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


def shaped_as(value: Any, shape: Any) -> Any:
    """``value``'s document as the TypedDict ``shape`` declares it: each of its keys, in order,
    the value's attribute of that name (a property for a computed key), encoded; a field the
    shape does not name is left out."""
    return {key: encode(getattr(value, key)) for key in shape.__annotations__}


def fields_of(value: Any) -> dict[str, Any]:
    """A dataclass instance's fields, in order, each value encoded (as ``Doc`` says)."""
    return {key: encode(item) for name, key, optional in document_keys(value.__class__)
            if (item := getattr(value, name)) is not None or not optional}


@functools.cache
def document_keys(cls: Any) -> tuple[tuple[str, str, bool], ...]:
    """(field, key, optional) of each field of dataclass ``cls`` in its document, in order."""
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
    """The JSON value of ``value``: its own ``to_json()`` or fields, a list for a tuple, an
    object for a mapping, ISO 8601 to the second for a datetime, an enum's value, a path's
    text."""
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
