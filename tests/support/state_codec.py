"""Test helpers: a state file's whole text encoded and decoded at once (restore reads and writes
it in pieces)."""

from __future__ import annotations

from collections.abc import Mapping

from neffcache.restore.state import (
    STATE_SCHEMA,
    StateRecord,
    _record,
    encode_state_chunks,
)
from neffcache.restore.state_rows import Rows, parse_row_pieces


def parse_rows(text: str, schema: int) -> tuple[Rows, dict[str, Rows]]:
    """A state document's durable rows and its pending rows by boot, packed; empty ones when it is
    not a document of ``schema``."""
    return parse_row_pieces((text,), schema)


def encode_state(records: Mapping[str, StateRecord],
                 pending: Mapping[str, tuple[str, StateRecord]] | None = None) -> bytes:
    """The state file: ``files`` (durable) and, if any, ``pending`` ({boot: {path: row}})."""
    return b"".join(encode_state_chunks(sorted(records), records.__getitem__, pending))


def decode_state(data: bytes) -> dict[str, StateRecord]:
    """A state file's durable records; anything unexpected yields an empty state."""
    files, _ = _parse(data)
    return {p: _record(b) for p, b in files.items()}


def decode_pending(data: bytes) -> dict[str, tuple[str, StateRecord]]:
    """A state file's pending records with their boot; anything unexpected yields none."""
    _, pending = _parse(data)
    return {p: (boot, _record(b)) for boot, rows in pending.items() for p, b in rows.items()}


def _parse(data: bytes) -> tuple[Rows, dict[str, Rows]]:
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return {}, {}
    return parse_rows(text, STATE_SCHEMA)
