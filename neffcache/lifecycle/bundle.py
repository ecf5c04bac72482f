"""Bundles: export entries of a store into one tar file, import and show one."""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from neffcache.command_steps import open_checked_store
from neffcache.config import read_settings
from neffcache.errors import ExitRule, IntegrityError, NeffcacheError, NotFoundError, UsageError
from neffcache.hashing import VerifyingReader, sha256_bytes
from neffcache.lifecycle.copy import CopyEntriesResult, apply_copy
from neffcache.lifecycle.entry_select import read_manifests, select_manifests
from neffcache.manifest import Manifest, encode_manifest
from neffcache.precompile import default_producer
from neffcache.request_rules import checked_request
from neffcache.store import (
    TOC_NAME,
    BundleStore,
    Member,
    Store,
    Toc,
    bundle_entry,
    cell_pointer_key,
    encode_toc,
    manifest_key,
    plan_members,
)
from neffcache.trust import load_trust


@checked_request
class ExportBundleRequest:
    """What ``export_bundle`` writes into ``output``: the entries built for the cells of
    ``matrix`` (those whose id matches one of the globs ``cells``, when given), or every entry
    with ``all_entries``; only ``fingerprints`` (keys or prefixes) when given."""

    output: str | Path
    matrix: str | Path | None = None
    cells: Sequence[str] = ()
    fingerprints: Sequence[str] = ()
    all_entries: bool = False
    gzip: bool = False
    store: str | None = None
    progress: Callable[[int, int], None] | None = None


@dataclass(frozen=True, slots=True)
class ExportBundleResult(ExitRule):
    """The bundle written: its path, digest (to check with ``expect_sha256``), table of
    contents and size."""

    file: str
    sha256: str
    toc: Toc
    file_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "sha256": self.sha256,
                "entries": [e.to_json() for e in self.toc.entries],
                "members": len(self.toc.members), "bytes": self.toc.total_bytes,
                "file_bytes": self.file_bytes}


def export_bundle(request: ExportBundleRequest) -> ExportBundleResult:
    """Write the selected entries into one bundle file. Raises UsageError (exit 2) for a bad or
    empty selection or an unwritable file, IntegrityError (exit 4) for a bad store object or
    an entry the trust gate refuses, UnavailableError (exit 6) for an unreachable store."""
    settings = read_settings(os.environ, store=request.store)
    trust = load_trust(settings)
    s = open_checked_store(settings.store_url)
    manifests = select_manifests(s, request.matrix, request.cells, request.fingerprints,
                                 request.all_entries)
    for m in manifests:  # with keys configured, nothing untrusted leaves in a bundle
        trust.admit(m, f"{s.url}/{manifest_key(m.entry_key)}")
    path = Path(request.output).expanduser().absolute()
    digest, toc = write_bundle(s, manifests, path, gzip=request.gzip,
                               on_progress=request.progress)
    return ExportBundleResult(str(path), digest, toc, path.stat().st_size)


@checked_request
class ImportBundleRequest:
    """What ``import_bundle`` publishes: every entry of bundle ``file``, refused unless its
    digest is ``expect_sha256`` (when given), into ``store`` (a local one is created);
    ``max_bytes``: the most a gzip bundle may decompress to; an entry the trust gate
    (``trusted_keys``; empty: the settings') refuses is not imported (exit 4)."""

    file: str | Path
    expect_sha256: str | None = None
    store: str | None = None
    workers: int = 8
    max_bytes: int | None = None
    trusted_keys: Sequence[str] = ()
    require_signatures: bool = False


@dataclass(frozen=True, slots=True)
class ImportBundleResult(ExitRule):
    """What the import did (``copy``), the bundle's path and digest."""

    copy: CopyEntriesResult
    file: str
    sha256: str

    def error(self) -> NeffcacheError | None:
        return self.copy.error()

    def to_json(self) -> dict[str, Any]:
        return dict(self.copy.to_json(), file=self.file, sha256=self.sha256)


def import_bundle(request: ImportBundleRequest) -> ImportBundleResult:
    """Check the whole bundle, then copy its entries into the store. Raises IntegrityError (exit
    4) for a bad bundle, before the store is touched; UnavailableError (exit 6) when the store
    cannot be reached."""
    settings = read_settings(os.environ, store=request.store)
    trust = load_trust(settings, request)
    with BundleStore(request.file, expect_sha256=request.expect_sha256,
                     max_bytes=request.max_bytes) as src:
        src.verify_all()
        manifests = read_manifests(src, [e.entry_key for e in src.toc.entries])
        dst = open_checked_store(settings.store_url, create=True)
        copied = apply_copy(src, dst, manifests, workers=request.workers, trust=trust)
        return ImportBundleResult(copied, str(Path(request.file).absolute()), src.digest)


@checked_request
class ShowBundleRequest:
    """Which bundle ``show_bundle`` reads (refused unless its digest is ``expect_sha256``, when
    given); ``verify`` also hashes every member (the structure is always checked)."""

    file: str | Path
    expect_sha256: str | None = None
    verify: bool = False
    max_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class ShowBundleResult(ExitRule):
    """A bundle's path, digest and table of contents, and whether every member was hashed."""

    file: str
    sha256: str
    toc: Toc
    verified: bool

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "sha256": self.sha256, "created_at": self.toc.created_at,
                "producer": dict(self.toc.producer),
                "entries": [e.to_json() for e in self.toc.entries],
                "members": len(self.toc.members), "bytes": self.toc.total_bytes,
                "verified": self.verified}


def show_bundle(request: ShowBundleRequest) -> ShowBundleResult:
    """A bundle's table of contents, its structure checked; IntegrityError (exit 4) if bad."""
    with BundleStore(request.file, expect_sha256=request.expect_sha256,
                     max_bytes=request.max_bytes) as b:
        if request.verify:
            b.verify_all()
        return ShowBundleResult(str(b.path), b.digest, b.toc, request.verify)


def write_bundle(store: Store, manifests: Sequence[Manifest], out: Path, *,
                 gzip: bool = False,
                 on_progress: Callable[[int, int], None] | None = None) -> tuple[str, Toc]:
    """Write the entries to ``out`` atomically, each object checked; (the TOC's sha256, TOC)."""
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
    reader = VerifyingReader(raw, size=member.size, sha256=member.sha256,
                             name=f"{store.url}/{member.name}")
    # tarfile wants full reads, and object streams may return less per read: buffered
    with io.BufferedReader(reader) as full:
        try:
            tar.addfile(_info(member.name, member.size), full)
        except OSError as exc:  # tarfile: "unexpected end of data"
            raise IntegrityError(f"{store.url}/{member.name}: shorter than its recorded "
                                 f"{member.size} bytes ({exc})") from None
        reader.read_to_end()
