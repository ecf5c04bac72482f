"""sha256 of files and streams, and what a sha256 (or a key prefix) looks like in hex."""

from __future__ import annotations

import hashlib
import io
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from neffcache.errors import IntegrityError

CHUNK = 1 << 20
SHA256_HEX = re.compile(r"[0-9a-f]{64}")  # a sha256 as its 64 lowercase hex digits


def sha256_file(path: str | Path) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    for chunk in _chunks(path):
        h.update(chunk)
        size += len(chunk)
    return h.hexdigest(), size


def sha256_file_parts(path: str | Path, part_bytes: int) -> tuple[str, int, tuple[str, ...]]:
    """(sha256, size, sha256 of each ``part_bytes`` slice) of a file, in one read pass."""
    whole, parts = hashlib.sha256(), PartHasher(part_bytes)
    size = 0
    for chunk in _chunks(path):
        whole.update(chunk)
        parts.update(chunk)
        size += len(chunk)
    return whole.hexdigest(), size, parts.digests()


def _chunks(path: str | Path) -> Iterator[memoryview]:
    """Views of one reused buffer, each valid until the next."""
    with open(path, "rb", buffering=0) as fh:
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        while n := fh.readinto(buf):
            yield view[:n]


class PartHasher:
    """The sha256 of each ``part_bytes`` slice of a stream (an empty stream has one part)."""

    def __init__(self, part_bytes: int) -> None:
        if part_bytes <= 0:
            raise ValueError("part_bytes must be positive")
        self.part_bytes = part_bytes
        self._done: list[str] = []
        self._hash = hashlib.sha256()
        self._in_part = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while len(view):
            take = min(len(view), self.part_bytes - self._in_part)
            self._hash.update(view[:take])
            self._in_part += take
            view = view[take:]
            if self._in_part == self.part_bytes:
                self._done.append(self._hash.hexdigest())
                self._hash, self._in_part = hashlib.sha256(), 0

    def digests(self) -> tuple[str, ...]:
        if self._in_part or not self._done:
            return (*self._done, self._hash.hexdigest())
        return tuple(self._done)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_sha256(value: object) -> bool:
    return isinstance(value, str) and SHA256_HEX.fullmatch(value) is not None


def is_key_prefix(text: str) -> bool:
    """6 to 64 lowercase hex digits: enough to name a key by its start."""
    return re.fullmatch(r"[0-9a-f]{6,64}", text) is not None


class VerifyingReader(io.RawIOBase):
    """A file being uploaded, which must yield exactly ``size`` bytes with ``sha256``, else
    IntegrityError: each byte is hashed once, in order, even when the consumer seeks back
    (botocore does), so a file that changed meanwhile is never committed under that sha256."""

    def __init__(self, raw: BinaryIO, *, size: int, sha256: str, name: str) -> None:
        super().__init__()
        self._raw, self.size, self._sha256, self._name = raw, size, sha256, name
        self._hash = hashlib.sha256()
        self._hashed = 0  # bytes [0, _hashed) went into _hash, in order
        self._pos = 0
        self.verified = False
        self.failure: IntegrityError | None = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self._pos = self._raw.seek(offset, whence)
        return self._pos

    def fileno(self) -> int:
        """The stream's descriptor (a store may size the upload from it)."""
        return self._raw.fileno()

    def read(self, size: int | None = -1) -> bytes:
        """Never asks for more than one byte past the end: a huge ``size`` costs no buffer."""
        if size is None or size < 0:
            return self.readall()
        data = self._raw.read(min(size, max(0, self.size - self._pos) + 1))
        self._take(data)
        return data

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def _take(self, data: bytes) -> None:
        start, end = self._pos, self._pos + len(data)
        if end > self.size:
            self._fail(f"{self._name}: grew beyond {self.size} bytes while being uploaded")
        if start <= self._hashed < end:
            self._hash.update(data[self._hashed - start:])
            self._hashed = end
        self._pos = end
        if not data and self._pos >= self._hashed:
            self._check_end()

    def _check_end(self) -> None:
        if self._hashed != self.size:
            self._fail(f"{self._name}: {self._hashed} bytes read, expected {self.size} (file "
                       f"changed while being uploaded)")
        digest = self._hash.hexdigest()
        if digest != self._sha256:
            self._fail(f"{self._name}: sha256 {digest} differs from {self._sha256} (file "
                       f"changed while being uploaded)")
        self.verified = True

    def _fail(self, message: str) -> None:
        """Kept as ``failure``: obstore may surface it as its own, the store raises this one."""
        self.failure = IntegrityError(message)
        raise self.failure

    def finish(self) -> None:
        """Hash whatever the consumer did not read, then check size and sha256."""
        if self.verified:
            return
        self.seek(self._hashed)
        while self.read(CHUNK):  # the empty read at the end checks size and sha256 (_take)
            pass

    def read_to_end(self) -> None:
        """``finish`` without a seek back (object streams cannot)."""
        self.read(1)
        self.finish()

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()
