"""A bundle file as a read-only store (``open_store("bundle:FILE")``)."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from neffcache.errors import IntegrityError, NotFoundError, UsageError
from neffcache.store.base import FileRange
from neffcache.store.bundle_format import MAX_TOC_BYTES, TOC_NAME, Member, Toc, decode_toc

if TYPE_CHECKING:
    import tarfile

_CHUNK = 1 << 20
_BLOCK = 512
RECORD = 20 * _BLOCK  # tar's record: every tar file is a whole number of them
UNTRUSTED_GZIP_RATIO = 16
TMP_RESERVE = 64 << 20


class BundleStore(contextlib.AbstractContextManager["BundleStore"]):
    """Read-only: ``put`` and ``delete`` are UsageErrors. Members are read by offset, never
    extracted, so a name never becomes a path."""

    def __init__(self, path: str | Path, *, expect_sha256: str | None = None,
                 max_bytes: int | None = None) -> None:
        self.path = Path(path).expanduser().absolute()
        self.url = f"bundle:{self.path}"
        try:
            self._fh: BinaryIO = open(self.path, "rb")  # noqa: SIM115 - closed by close()
        except FileNotFoundError:
            raise UsageError(f"bundle {self.path}: no such file") from None
        except OSError as exc:
            raise UsageError(f"bundle {self.path}: cannot read: {exc.strerror}") from None
        expect = None if expect_sha256 is None else expect_sha256.strip().lower()
        try:
            if self._fh.read(2) == b"\x1f\x8b":  # gzip
                self._fh = _decompress(self.path, self._fh, expect, max_bytes)
            self._fh.seek(0, os.SEEK_END)
            self._size = self._fh.tell()
            if self._size % RECORD:
                raise IntegrityError(f"bundle {self.path}: {self._size} bytes is not a whole "
                                     f"number of tar records (truncated)")
            self.digest, self.toc, self._offsets = _index(self._fh, self._size, str(self.path),
                                                          expect)
        except BaseException:
            self._fh.close()
            raise
        self._members = {m.name: m for m in self.toc.members}
        self._verified = False

    def close(self) -> None:
        self._fh.close()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def verify_all(self) -> int:
        """Hash every member against the TOC (IntegrityError at the first that differs, once);
        the bytes checked."""
        if self._verified:
            return self.toc.total_bytes
        for m in self.toc.members:
            with FileRange(self._fh, self._offsets[m.name], m.size, "bundle") as src:
                digest = hashlib.file_digest(src, "sha256").hexdigest()
            if digest != m.sha256:
                raise IntegrityError(f"bundle {self.path}: member {m.name} does not match its "
                                     f"sha256 in the table of contents (damaged or tampered)")
        self._verified = True
        return self.toc.total_bytes

    def check(self) -> None:
        """A bundle with one member that differs from its TOC is refused whole."""
        self.verify_all()

    def has(self, key: str) -> bool:
        return key in self._members

    def open(self, key: str, start: int = 0, length: int | None = None) -> BinaryIO:
        member = self._members.get(key)
        if member is None:
            raise NotFoundError(f"{self.url}: {key}: not in the bundle")
        if start < 0 or (length is not None and length < 0):
            raise UsageError(f"{self.url}/{key}: negative range start={start} length={length}")
        start = min(start, member.size)
        left = member.size - start if length is None else min(length, member.size - start)
        body = FileRange(self._fh, self._offsets[key] + start, left, "bundle")
        return body  # type: ignore[return-value]

    def read(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        with self.open(key, start, length) as fh:
            data = fh.read()
        member = self._members[key]
        if start == 0 and length is None and not key.startswith(("blobs/", "packs/")) \
                and hashlib.sha256(data).hexdigest() != member.sha256:
            raise IntegrityError(f"{self.url}: {key} does not match its sha256 in the table "
                                 f"of contents")
        return data

    def put(self, key: str, source: BinaryIO, *, if_absent: bool = True) -> bool:
        raise UsageError(f"{self.url}: a bundle is read-only")

    def list(self, prefix: str) -> Iterator[str]:
        return iter([k for k in self._members if k.startswith(prefix)])

    def delete(self, key: str) -> None:
        raise UsageError(f"{self.url}: a bundle is read-only")


def _trusted_toc(data: bytes, expect: str | None, name: str) -> tuple[str, Toc]:
    """(digest, TOC): the digest checked against ``expect`` before the TOC is believed."""
    digest = hashlib.sha256(data).hexdigest()
    if expect is not None and digest != expect:
        raise IntegrityError(f"bundle {name}: digest {digest} is not the expected {expect}")
    return digest, decode_toc(data, f"bundle {name}")


def _index(fh: BinaryIO, size: int, name: str,
           expect: str | None = None) -> tuple[str, Toc, dict[str, int]]:
    """(digest, TOC, data offset per member) once the TOC comes first, every other member is a
    regular file the TOC lists, once, of its size, and the bytes between are zero."""
    import tarfile  # here, not at the top: the store face stays cheap to import

    fh.seek(0)
    try:
        with tarfile.open(fileobj=fh, mode="r:", format=tarfile.GNU_FORMAT) as tar:
            infos = tar.getmembers()
    except (tarfile.TarError, EOFError, OSError, UnicodeError, ValueError) as exc:
        raise IntegrityError(f"bundle {name}: not a readable tar file ({exc})") from None
    if not infos or infos[0].name != TOC_NAME or not infos[0].isreg() \
            or infos[0].size > MAX_TOC_BYTES:
        raise IntegrityError(f"bundle {name}: not a neffcache bundle (its first member is not "
                             f"{TOC_NAME})")
    toc_info = infos[0]
    toc_data = os.pread(fh.fileno(), toc_info.size, toc_info.offset_data)
    if len(toc_data) != toc_info.size:
        raise IntegrityError(f"bundle {name}: truncated inside its table of contents")
    digest, toc = _trusted_toc(toc_data, expect, name)
    listed: dict[str, Member] = {m.name: m for m in toc.members}
    offsets: dict[str, int] = {}
    for info in infos[1:]:
        what = f"bundle {name}: member {info.name[:120]!r}"
        if not info.isreg():
            raise IntegrityError(f"{what}: links, directories and devices are refused")
        m = listed.get(info.name)
        if m is None:
            raise IntegrityError(f"{what}: not in the table of contents (foreign member)")
        if info.name in offsets:
            raise IntegrityError(f"{what}: appears twice")
        if info.size != m.size or info.offset_data + info.size > size:
            raise IntegrityError(f"{what}: {info.size} bytes where the table of contents says "
                                 f"{m.size}, or the file ends inside it (truncated)")
        offsets[info.name] = info.offset_data
    missing = [n for n in listed if n not in offsets]
    if missing:
        raise IntegrityError(f"bundle {name}: {len(missing)} member(s) of the table of "
                             f"contents are absent (truncated or damaged), first {missing[0]}")
    _check_gaps(fh, infos, size, name)
    return digest, toc, offsets


def _check_gaps(fh: BinaryIO, infos: list[tarfile.TarInfo], size: int, name: str) -> None:
    ends = [(i.offset_data + i.size, nxt.offset) for i, nxt in pairwise(infos)]
    last = infos[-1].offset_data + infos[-1].size
    if size < -(-last // _BLOCK) * _BLOCK + 2 * _BLOCK:
        raise IntegrityError(f"bundle {name}: no end-of-archive marker after the last member "
                             f"(truncated)")
    ends.append((last, size))
    for start, stop in ends:
        pos = start
        while pos < stop:
            data = os.pread(fh.fileno(), min(stop - pos, _CHUNK), pos)
            if not data:
                break
            if data.count(0) != len(data):
                at = pos + len(data) - len(data.lstrip(bytes(1)))
                raise IntegrityError(f"bundle {name}: unexpected bytes at offset {at} between "
                                     f"members (damaged or tampered)")
            pos += len(data)


def _decompress(path: Path, fh: BinaryIO, expect: str | None,
                max_bytes: int | None) -> BinaryIO:
    """A gzip bundle's tar in an anonymous temp file, stopped once it grows beyond its cap, set
    from the trusted side (``_untrusted_cap`` until the TOC is authenticated)."""
    import gzip
    import tempfile

    fh.seek(0, os.SEEK_END)
    trusted_cap = _untrusted_cap(fh.tell(), max_bytes)
    out = tempfile.TemporaryFile()  # noqa: SIM115 - returned open
    fh.seek(0)
    limit = min(MAX_TOC_BYTES + 2 * _BLOCK, trusted_cap)
    written = 0
    toc_end = None
    try:
        with gzip.GzipFile(fileobj=fh) as gz:
            while chunk := gz.read(max(1, min(_CHUNK, limit + 1 - written))):
                written += len(chunk)
                if written > limit:
                    raise IntegrityError(f"bundle {path}: decompresses to more than "
                                         f"{limit} bytes (its cap){_CAP_HINT}")
                out.write(chunk)
                if toc_end is None and written >= _BLOCK:
                    toc_end, toc_cap = _toc_limit(out, path, written, expect)
                    authenticated = toc_end is not None and expect is not None
                    own = max_bytes if max_bytes is not None else toc_cap
                    limit = min(toc_cap, own if authenticated else trusted_cap)
                    if written > limit:
                        raise IntegrityError(f"bundle {path}: decompresses to more than "
                                             f"{limit} bytes (its cap){_CAP_HINT}")
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        out.close()
        raise IntegrityError(f"bundle {path}: damaged gzip stream ({exc})") from None
    except BaseException:
        out.close()
        raise
    fh.close()
    out.flush()
    return out  # type: ignore[return-value]


_CAP_HINT = "; pass --expect-sha256 or --max-bytes to allow more"


def _untrusted_cap(compressed: int, max_bytes: int | None) -> int:
    """``max_bytes``, else ``UNTRUSTED_GZIP_RATIO`` times ``compressed``; never into the last
    ``TMP_RESERVE`` bytes free in the temp directory."""
    import tempfile

    cap = max_bytes if max_bytes is not None else \
        compressed * UNTRUSTED_GZIP_RATIO + (16 << 20)
    with contextlib.suppress(OSError):
        st = os.statvfs(tempfile.gettempdir())
        cap = min(cap, max(0, st.f_bavail * st.f_frsize - TMP_RESERVE))
    return cap


def _toc_limit(out: BinaryIO, path: Path, written: int,
               expect: str | None) -> tuple[int | None, int]:
    """Once the TOC is out: (its end, the largest tar its members allow), digest checked."""
    import tarfile

    head = os.pread(out.fileno(), _BLOCK, 0)
    try:
        info = tarfile.TarInfo.frombuf(head, "utf-8", "surrogateescape")
    except tarfile.HeaderError:
        raise IntegrityError(f"bundle {path}: not a neffcache bundle") from None
    if info.name != TOC_NAME or info.size > MAX_TOC_BYTES:
        raise IntegrityError(f"bundle {path}: not a neffcache bundle (its first member is not "
                             f"{TOC_NAME})")
    end = _BLOCK + info.size
    if written < end:
        return None, MAX_TOC_BYTES + 2 * _BLOCK
    _, toc = _trusted_toc(os.pread(out.fileno(), info.size, _BLOCK), expect, str(path))
    per_member = 4 * _BLOCK  # header, a long-name header and its block, padding
    limit = end + _BLOCK + sum(m.size + per_member for m in toc.members) + 3 * RECORD
    return end, limit
