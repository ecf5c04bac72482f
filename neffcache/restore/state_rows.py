"""The state file's rows, packed 66 bytes a file, parsed and written in pieces. Pure."""

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


def unpack_row(packed: bytes) -> tuple[int, int, int, int, str, int]:
    size, mtime, ctime, inode, mode, raw = PACKED.unpack(packed)
    return size, mtime, ctime, inode, raw.hex(), mode


def parse_row_pieces(pieces: Iterable[str], schema: int) -> tuple[Rows, dict[str, Rows]]:
    """The durable rows and the pending rows by boot, packed, of the text ``pieces`` make up (read
    as the parser gets to them); empty ones when it is not a state document of ``schema``."""
    t = _Window(pieces)
    files: Rows = {}
    pending: dict[str, Rows] = {}
    version: list[Any] = []

    def top(key: str, i: int) -> int:
        if key == "files":
            return _object(t, i, into=files)
        if key == "pending":
            return _object(t, i, lambda boot, j: _object(t, j, into=pending.setdefault(boot, {})))
        value, i = _item(t, i, _scan_value)
        if key == "schema_version":
            version.append(value)
        return i

    try:
        end = _skip(t, _object(t, _skip(t, 0), top))
    except (BadState, IndexError, ValueError, StopIteration):
        return {}, {}
    # text after the document, or another schema: not a state document this reader understands
    return (files, pending) if end == len(t.s) and version == [schema] else ({}, {})


MARGIN = 1 << 16  # characters kept ahead of the parser: an item longer than this is read again


class _Window:
    """The text from where the parser is (``s``): ``at(i)`` drops what is before ``i``, reads until
    ``need`` characters follow (or the end) and returns where ``i`` is now."""

    __slots__ = ("_pieces", "eof", "s")

    def __init__(self, pieces: Iterable[str]) -> None:
        self._pieces: Iterator[str] = iter(pieces)
        self.s, self.eof = "", False

    def at(self, i: int, need: int = 0) -> int:
        need = need or MARGIN
        s = self.s
        if self.eof or len(s) - i >= need:
            return i
        parts = [s[i:]] if i < len(s) else []
        have = len(s) - i
        while have < need:
            piece = next(self._pieces, None)
            if piece is None:
                self.eof = True
                break
            parts.append(piece)
            have += len(piece)
        self.s = "".join(parts)  # one part: that very string, not a copy
        return 0


def _skip(t: _Window, i: int) -> int:
    """The first non-white position from ``i``, with a margin after it."""
    while True:
        s = t.s
        i = _skip_in(s, i)
        if i < len(s):
            return t.at(i)
        if t.eof:
            return i
        i = t.at(i)


def _skip_in(s: str, i: int) -> int:
    while i < len(s) and s[i] in _WHITE:
        i += 1
    return i


def _item(t: _Window, i: int, step: Callable[[str, int], tuple[Any, int]]) -> tuple[Any, int]:
    """``step`` at ``i``, again with more text when it ran into the window's end: an item counts
    only when 3 characters follow it (``1`` may go on as ``1.5``), or the text ends there."""
    while True:
        i = t.at(i)
        try:
            value, j = step(t.s, i)
            if j + 3 <= len(t.s) or t.eof:
                return value, j
        except (BadState, ValueError, IndexError, StopIteration):  # StopIteration: no value there
            if t.eof:
                raise
        i = t.at(i, 2 * (len(t.s) - i) + MARGIN)  # it ran past the window: twice as much


def _key(s: str, i: int) -> tuple[str, int]:
    if s[i] != '"':
        raise BadState(f"a key expected at {i}")
    key, i = scanstring(s, i + 1)
    i = _skip_in(s, i)
    if s[i] != ":":
        raise BadState(f"':' expected at {i}")
    return key, i + 1


def _object(t: _Window, i: int, member: Callable[[str, int], int] | None = None,
            into: Rows | None = None) -> int:
    """Walk the JSON object at ``i``: ``member(key, i)`` reads each value and returns its end;
    or, given ``into``, each member is a row packed into it, implausible rows left out (the hot
    loop)."""
    i = t.at(i)
    if t.s[i] != "{":
        raise BadState(f"an object expected at {i}")
    i = _skip(t, i + 1)
    if t.s[i] == "}":
        return i + 1
    while True:
        if into is not None:
            (path, row), i = _item(t, i, _row)
            try:  # a row of the wrong length or types, or a bad sha256, is left out: hashed again
                size, mtime, ctime, inode, sha, mode = row
                raw = bytes.fromhex(sha)  # TypeError: not a str
                if len(raw) == 32 and len(sha) == 64:
                    into[path] = PACKED.pack(size, mtime, ctime, inode, mode, raw)  # struct.error
            except (ValueError, TypeError, struct.error):
                pass
        elif member is not None:
            key, i = _item(t, _skip(t, i), _key)
            i = _skip(t, member(key, _skip(t, i)))
        c = t.s[i]
        if c == "}":
            return i + 1
        if c != ",":
            raise BadState(f"',' or '}}' expected at {i}")
        i += 1


def _row(s: str, i: int) -> tuple[tuple[str, Any], int]:
    if s[i] in _WHITE:
        i = _skip_in(s, i)
    if s[i] != '"':
        raise BadState(f"a key expected at {i}")
    path, i = scanstring(s, i + 1)
    if s[i] != ":":
        i = _skip_in(s, i)
        if s[i] != ":":
            raise BadState(f"':' expected at {i}")
    i = _skip_in(s, i + 1) if s[i + 1] in _WHITE else i + 1
    row, i = _scan_value(s, i)  # StopIteration: no value there
    if i < len(s) and s[i] in _WHITE:
        i = _skip_in(s, i)
    return (path, row), i


def encode_rows(files: Sequence[str], file_row: Callable[[str], list[Any]],
                pending: Iterable[tuple[str, Sequence[str], Callable[[str], list[Any]]]],
                schema: int, batch: int = 4096) -> Iterator[bytes]:
    """The state document in pieces of ``batch`` rows: ``files`` with their rows, then each ``(boot,
    paths, row)`` of ``pending``; compact JSON, as ``json.dumps(separators=(",", ":"))``."""
    yield b'{"schema_version":%d,"files":{' % schema
    yield from _pieces(files, file_row, batch)  # not copied: a million paths are 8 MiB
    yield b"}"
    before = b',"pending":{'  # the first boot's, then between boots
    for boot, paths, row in pending:
        yield before + json.dumps(boot).encode() + b":{"
        yield from _pieces(paths, row, batch)
        yield b"}"
        before = b","
    yield b"}}" if before == b"," else b"}"


def _pieces(paths: Sequence[str], row: Callable[[str], list[Any]], batch: int) -> Iterator[bytes]:
    for i in range(0, len(paths), batch):
        rows = {p: row(p) for p in paths[i:i + batch]}
        yield (b"," if i else b"") + json.dumps(rows, separators=(",", ":"))[1:-1].encode()


def packed_as_json(rows: Mapping[str, bytes]) -> Callable[[str], list[Any]]:
    return lambda path: list(unpack_row(rows[path]))
