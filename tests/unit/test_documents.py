"""The shared encoder (``neffcache.documents``): a dataclass's document is its fields in order,
each value encoded the one way the documents agree on."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta, timezone
from enum import Enum
from pathlib import Path

import pytest

from neffcache.documents import Document, encode, fields_of
from neffcache.index import EntrySummary, IndexTotals, ReindexResult
from tests.support.documents import shaped_as


class Colour(Enum):
    RED = "red"


@dataclasses.dataclass(frozen=True, slots=True)
class Inner:
    name: str
    at: datetime | None


@dataclasses.dataclass(frozen=True, slots=True)
class Custom:
    value: int

    def to_json(self) -> list[int]:
        return [self.value, self.value]


@dataclasses.dataclass(frozen=True, slots=True)
class Outer(Document):
    zeta: int
    alpha: tuple[Inner, ...]
    colour: Colour
    path: Path
    table: dict[str, tuple[int, ...]]
    custom: Custom
    missing: str | None = None
    flag: bool = False
    ratio: float = 0.5


AT = datetime(2026, 1, 2, 3, 4, 5, 987654, tzinfo=timezone(timedelta(hours=2)))


def test_a_document_is_its_fields_in_declaration_order() -> None:
    value = Outer(2, (Inner("a", AT), Inner("b", None)), Colour.RED, Path("/x/y"),
                  {"k": (1, 2)}, Custom(7))
    doc = value.to_json()
    assert list(doc) == ["zeta", "alpha", "colour", "path", "table", "custom", "missing",
                         "flag", "ratio"]
    assert doc == {"zeta": 2,
                   "alpha": [{"name": "a", "at": "2026-01-02T03:04:05+02:00"},
                             {"name": "b", "at": None}],
                   "colour": "red", "path": "/x/y", "table": {"k": [1, 2]},
                   "custom": [7, 7], "missing": None, "flag": False, "ratio": 0.5}
    assert json.loads(json.dumps(doc)) == doc
    assert fields_of(value) == doc


def test_a_value_it_cannot_encode_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="set"):
        encode({1, 2})


def test_the_mixin_keeps_the_dataclass_slotted() -> None:
    assert not hasattr(Outer(1, (), Colour.RED, Path("."), {}, Custom(1)), "__dict__")
    assert not hasattr(IndexTotals(1, 2, 3, 4, 5, 6, 7), "__dict__")


def test_index_values_documents_keep_their_keys_and_formats() -> None:
    at = datetime(2026, 5, 6, 7, 8, 9, 123, tzinfo=timezone.utc)
    entry = EntrySummary("e", "c", "ck", "fk", "neuron", "s3://b/p", 10, 2, None, at,
                         verified_at=at, restore_count=3)
    assert entry.to_json() == {
        "entry_key": "e", "cell_id": "c", "cell_key": "ck", "fingerprint_key": "fk",
        "backend": "neuron", "store_url": "s3://b/p", "total_bytes": 10, "file_count": 2,
        "compile_seconds": None, "created_at": "2026-05-06T07:08:09+00:00",
        "verified_status": None, "verified_at": "2026-05-06T07:08:09+00:00",
        "last_used_at": None, "restore_count": 3, "signed_by": None}
    from neffcache.index import InvalidManifest

    assert ReindexResult(1, 0, 0, 0, (InvalidManifest("k", "why"),)).to_json() == {
        "scanned": 1, "added": 0, "already_indexed": 0, "removed": 0,
        "invalid": [{"key": "k", "reason": "why"}]}


def test_a_shaped_document_takes_the_typed_dicts_keys_in_order() -> None:
    from typing import TypedDict

    class Shape(TypedDict):
        flag: bool
        zeta: int
        derived: str

    @dataclasses.dataclass(frozen=True, slots=True)
    class Value:
        zeta: int
        flag: bool
        hidden: str = "not in the document"

        @property
        def derived(self) -> str:
            return f"z{self.zeta}"

    assert list(shaped_as(Value(3, True), Shape).items()) == [
        ("flag", True), ("zeta", 3), ("derived", "z3")]
