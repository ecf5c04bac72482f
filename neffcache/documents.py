"""JSON documents derived from frozen dataclasses: a value is declared once, as its dataclass,
and its document is its fields in order, each value ``encode``d (pure).

A value whose document is not its fields writes its own ``to_json`` (``shaped_as`` builds one
from a TypedDict of the value's attributes). ``Doc`` carries a field's description into the
HTTP API's schema (``Annotated[int, Doc("...")]``), derived from the same dataclass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from enum import Enum
from pathlib import PurePath
from typing import Any


@dataclasses.dataclass(frozen=True, slots=True)
class Doc:
    """A field's description in the API's OpenAPI document (``Annotated`` metadata)."""

    text: str


class Document:
    """Mixin for a frozen dataclass whose JSON document is its fields, in order."""

    __slots__ = ()

    def to_json(self) -> dict[str, Any]:
        return fields_of(self)


def shaped_as(value: Any, shape: Any) -> Any:
    """``value``'s document as the TypedDict ``shape`` declares it: each of its keys, in order,
    the value's attribute of that name (a property for a computed key), encoded; a field the
    shape does not name is left out."""
    return {key: encode(getattr(value, key)) for key in shape.__annotations__}


def fields_of(value: Any) -> dict[str, Any]:
    """A dataclass instance's fields, in order, each value encoded."""
    return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}


def encode(value: Any) -> Any:
    """The JSON value of ``value``: its own ``to_json()`` or fields, a list for a tuple, an
    object for a mapping, ISO 8601 to the second for a datetime, an enum's value, a path's
    text."""
    if value is None or isinstance(value, (bool, int, float)) and not isinstance(value, Enum):
        return value
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, str):
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
