"""Write a bundle: entries from a store into one self-describing tar file (see bundle).

The file is written beside its final path under a temp name, every blob and pack checked
against its sha256 while it streams in, fsynced, then renamed into place: a failed export
leaves nothing at the final path. Returns the bundle's digest (sha256 of its TOC).
"""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

from neffcache.errors import IntegrityError, NotFoundError, UsageError
from neffcache.hashing import VerifyingReader, sha256_bytes
from neffcache.manifest import Manifest, encode_manifest
from neffcache.precompile import default_producer
from neffcache.store import (
    TOC_NAME,
    Member,
    Store,
    Toc,
    bundle_entry,
    cell_pointer_key,
    encode_toc,
    manifest_key,
    plan_members,
)


def write_bundle(store: Store, manifests: Sequence[Manifest], out: Path, *,
                 gzip: bool = False,
                 on_progress: Callable[[int, int], None] | None = None) -> tuple[str, Toc]:
    """Write the entries (manifests, pointers, blobs, packs) to ``out``; (digest, TOC)."""
    if not manifests:
        raise UsageError("no entries selected: nothing to export")
    out = Path(out).absolute()
    if out.is_dir():
        raise UsageError(f"-o {out}: is a directory; expected a file name")
    mbytes = {manifest_key(m.entry_key): encode_manifest(m) for m in manifests}
    pbytes = {}
    for m in manifests:
        key = cell_pointer_key(m.cell.key, m.fingerprint.key)
        with contextlib.suppress(NotFoundError):
            pbytes[key] = store.read(key)
    members = plan_members(manifests, mbytes, pbytes)
    toc = Toc(entries=tuple(bundle_entry(m) for m in manifests), members=members,
              created_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
              producer=tuple(sorted(default_producer().items())))
    toc_data = encode_toc(toc)
    small = {**mbytes, **pbytes}
    tmp = out.parent / f".{out.name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as fh:
            with tarfile.open(fileobj=fh, mode="w:gz" if gzip else "w",
                              format=tarfile.GNU_FORMAT) as tar:
                tar.addfile(_info(TOC_NAME, len(toc_data)), io.BytesIO(toc_data))
                for i, member in enumerate(members, 1):
                    _add(tar, store, member, small)
                    if on_progress:
                        on_progress(i, len(members))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, out)
    except OSError as exc:
        raise UsageError(f"{out}: cannot write bundle: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return sha256_bytes(toc_data), toc


def _info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime, info.type = size, 0o644, 0, tarfile.REGTYPE
    return info


def _add(tar: tarfile.TarFile, store: Store, member: Member, small: dict[str, bytes]) -> None:
    if member.name in small:
        tar.addfile(_info(member.name, member.size), io.BytesIO(small[member.name]))
        return
    try:
        raw = store.open(member.name)
    except NotFoundError:
        raise IntegrityError(f"{store.url}/{member.name}: missing (an entry references it)",
                             hint="neffcache verify") from None
    with VerifyingReader(raw, size=member.size, sha256=member.sha256,
                         name=f"{store.url}/{member.name}") as reader:
        try:
            # tarfile wants full reads; object streams may return less per read.
            tar.addfile(_info(member.name, member.size), _FullReads(reader))  # type: ignore[arg-type]
        except OSError as exc:  # tarfile: "unexpected end of data"
            raise IntegrityError(f"{store.url}/{member.name}: shorter than its recorded "
                                 f"{member.size} bytes ({exc})") from None
        reader.read(1)  # reach the end: checks size and sha256 (object streams cannot seek)
        reader.finish()


class _FullReads:
    """``read(n)`` returns n bytes unless the stream ends (tarfile treats less as the end)."""

    def __init__(self, src: VerifyingReader) -> None:
        self._src = src

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            return self._src.read()  # type: ignore[no-any-return]
        parts, left = [], size
        while left > 0:
            chunk = self._src.read(left)
            if not chunk:
                break
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)
