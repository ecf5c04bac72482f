"""The state file's rows, compact: read in one pass into 66 bytes per file, written in pieces.

A state file (``neffcache.restore.state``) is ``{"schema_version": 1, "files": {path: row},
"pending": {boot: {path: row}}}`` with ``row = [size, mtime_ns, ctime_ns, inode, sha256,
mode]``. ``json.loads`` of a million rows holds a list, three ints and a 64-character str per
file (~550 bytes) while it builds them; ``parse_rows`` walks the text instead (the C scanner
of ``json`` for each key and row) and keeps each row as one ``bytes`` of 66 (``pack_row``:
size, mtime, ctime, inode, mode, raw sha256), ~240 bytes a file with its path and dict slot.
A row that is not a plausible record is left out (its file is hashed again); a document that
is not one (bad JSON, another schema) reads as empty. Pure: no file is read or written here.
"""

from __future__ import annotations

import json
import json.decoder
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

PACKED = struct.Struct("<QqqQH32s")  # size, mtime_ns, ctime_ns, inode, mode, sha256 (raw)
Rows = dict[str, bytes]  # path -> packed row
# json's own scanners (C): a string from after its opening quote; any value at a position
scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
_scan_value: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_WHITE = " \t\n\r"


class BadState(ValueError):
    """The text is not a state document this reader understands."""


def pack_row(row: Any) -> bytes | None:
    """A JSON row ``[size, mtime_ns, ctime_ns, inode, sha256, mode]`` packed, or None if it is
    not one (wrong length or types, a sha256 that is not 64 hex digits)."""
    try:
        size, mtime, ctime, inode, sha, mode = row
        raw = bytes.fromhex(sha)  # TypeError: not a str
        if len(raw) != 32 or len(sha) != 64:
            return None
        return PACKED.pack(size, mtime, ctime, inode, mode, raw)  # struct.error: not ints
    except (ValueError, TypeError, struct.error):
        return None


def unpack_row(packed: bytes) -> tuple[int, int, int, int, str, int]:
    """The row ``pack_row`` packed: (size, mtime_ns, ctime_ns, inode, sha256, mode)."""
    size, mtime, ctime, inode, mode, raw = PACKED.unpack(packed)
    return size, mtime, ctime, inode, raw.hex(), mode


def parse_rows(text: str, schema: int) -> tuple[Rows, dict[str, Rows]]:
    """A state document's durable rows and its pending rows by boot, packed; empty ones when
    it is not a document of ``schema``."""
    try:
        files, pending, version = _parse(text)
    except (BadState, IndexError, ValueError):
        return {}, {}
    return (files, pending) if version == [schema] else ({}, {})


def _parse(text: str) -> tuple[Rows, dict[str, Rows], list[Any]]:
    files: Rows = {}
    pending: dict[str, Rows] = {}
    version: list[Any] = []

    def top(key: str, i: int) -> int:
        if key == "files":
            return _rows(text, i, files)
        if key == "pending":
            return _object(text, i, lambda boot, j: _rows(text, j, pending.setdefault(boot, {})))
        value, i = _value(text, i)
        if key == "schema_version":
            version.append(value)
        return i

    end = _skip(text, _object(text, _skip(text, 0), top))
    if end != len(text):
        raise BadState("text after the document")
    return files, pending, version


def _skip(s: str, i: int) -> int:
    while i < len(s) and s[i] in _WHITE:
        i += 1
    return i


def _value(s: str, i: int) -> tuple[Any, int]:
    try:
        return _scan_value(s, i)
    except StopIteration as exc:
        raise BadState(f"a value expected at {i}") from exc


def _object(s: str, i: int, member: Callable[[str, int], int]) -> int:
    """Walk the JSON object at ``s[i]``: ``member(key, i)`` reads each value from ``i`` and
    returns where it ends; the end of the object is returned."""
    if s[i] != "{":
        raise BadState(f"an object expected at {i}")
    i = _skip(s, i + 1)
    if s[i] == "}":
        return i + 1
    while True:
        if s[i] != '"':
            raise BadState(f"a key expected at {i}")
        key, i = scanstring(s, i + 1)
        i = _skip(s, i)
        if s[i] != ":":
            raise BadState(f"':' expected at {i}")
        i = _skip(s, member(key, _skip(s, i + 1)))
        if s[i] == "}":
            return i + 1
        if s[i] != ",":
            raise BadState(f"',' or '}}' expected at {i}")
        i = _skip(s, i + 1)


def _rows(s: str, i: int, into: Rows) -> int:
    """The object of rows at ``s[i]`` into ``into``; implausible rows are left out. The hot
    loop: per file one key and one row scanned by ``json``'s C scanner, and one pack."""
    if s[i] != "{":
        raise BadState(f"an object expected at {i}")
    i = _skip(s, i + 1)
    if s[i] == "}":
        return i + 1
    scan = _scan_value
    while True:
        if s[i] != '"':
            raise BadState(f"a key expected at {i}")
        path, i = scanstring(s, i + 1)
        if s[i] != ":":
            i = _skip(s, i)
            if s[i] != ":":
                raise BadState(f"':' expected at {i}")
        i = _skip(s, i + 1) if s[i + 1] in _WHITE else i + 1
        try:
            row, i = scan(s, i)
        except StopIteration as exc:
            raise BadState(f"a row expected at {i}") from exc
        packed = pack_row(row)
        if packed is not None:  # else not a record: its file is hashed again
            into[path] = packed
        if s[i] in _WHITE:
            i = _skip(s, i)
        if s[i] == "}":
            return i + 1
        if s[i] != ",":
            raise BadState(f"',' or '}}' expected at {i}")
        i = _skip(s, i + 1) if s[i + 1] in _WHITE else i + 1


def encode_rows(files: Sequence[str], file_row: Callable[[str], list[Any]],
                pending: Iterable[tuple[str, Sequence[str], Callable[[str], list[Any]]]],
                schema: int, batch: int = 4096) -> Iterator[bytes]:
    """The state document in pieces of ``batch`` rows: ``files`` (paths, in order) with their
    rows, then each ``(boot, paths, row)`` of ``pending`` (none left out: the caller passes
    only boots with paths). Compact JSON, as ``json.dumps(doc, separators=(",", ":"))``."""
    yield b'{"schema_version":%d,"files":{' % schema
    yield from _pieces(files, file_row, batch)  # not copied: a million paths are 8 MiB
    yield b"}"
    first = True
    for boot, paths, row in pending:
        yield (b',"pending":{' if first else b",") + json.dumps(boot).encode() + b":{"
        yield from _pieces(paths, row, batch)
        yield b"}"
        first = False
    if not first:
        yield b"}"
    yield b"}"


def _pieces(paths: Sequence[str], row: Callable[[str], list[Any]], batch: int) -> Iterator[bytes]:
    for i in range(0, len(paths), batch):
        rows = {p: row(p) for p in paths[i:i + batch]}
        yield (b"," if i else b"") + json.dumps(rows, separators=(",", ":"))[1:-1].encode()


def packed_as_json(rows: Mapping[str, bytes]) -> Callable[[str], list[Any]]:
    """The JSON row of each path of ``rows`` (packed), for ``encode_rows``."""
    return lambda path: list(unpack_row(rows[path]))
