"""The bundle use cases: ``export_bundle`` (entries of a store into one file),
``import_bundle`` (a bundle's entries into a store) and ``show_bundle`` (its table of
contents, checked); each from a typed request (see ``bundle`` for the format)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neffcache.config import read_settings
from neffcache.errors import ExitRule, NeffcacheError
from neffcache.lifecycle.bundle_write import write_bundle
from neffcache.lifecycle.copy import CopyEntriesResult, apply_copy
from neffcache.lifecycle.entry_select import read_manifests, select_manifests
from neffcache.request_rules import checked_request
from neffcache.store import BundleStore, Toc, manifest_key, open_store
from neffcache.trust import load_trust


@checked_request
class ExportBundleRequest:
    """What ``export_bundle`` writes, and where.

    ``output``: the bundle file. The selection: the entries built for the cells of ``matrix``
    (only those whose id matches one of ``cells``, globs, when given), or every entry with
    ``all_entries``; only ``fingerprints`` (keys or prefixes) when given. ``gzip``: compress.
    ``store``: a store URL (None: as the CLI would, NEFFCACHE_STORE > config file > default).
    ``progress(done, total)``: per object written.
    """

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
    """The bundle written: its path, its digest (the sha256 of its table of contents, to
    publish and check with ``expect_sha256``), the table of contents and the file's size.
    A result is a success (exit 0)."""

    file: str
    sha256: str
    toc: Toc
    file_bytes: int

    def to_json(self) -> dict[str, Any]:
        """``neffcache bundle export --json``: file, sha256, entries (entry_key, cell_id,
        fingerprint_key, backend), members, bytes (the members' total), file_bytes."""
        return {"file": self.file, "sha256": self.sha256,
                "entries": [e.to_json() for e in self.toc.entries],
                "members": len(self.toc.members), "bytes": self.toc.total_bytes,
                "file_bytes": self.file_bytes}


def export_bundle(request: ExportBundleRequest) -> ExportBundleResult:
    """Write the selected entries (manifests, pointers, blobs, packs; each blob once, checked
    against its sha256 as it is written) into one bundle file, under a temp name renamed into
    place: a failed export leaves nothing at ``output``. Raises UsageError (exit 2) for a bad
    selection, no entry selected or an unwritable file, IntegrityError (exit 4) for a store
    object missing or not matching its sha256 or an entry the trust gate refuses (with keys
    configured), UnavailableError (exit 6) when the store cannot
    be reached."""
    settings = read_settings(os.environ, store=request.store)
    trust = load_trust(settings)
    s = open_store(settings.store_url)
    s.check()
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
    digest is ``expect_sha256`` (when given), into ``store`` (None: as the CLI would,
    NEFFCACHE_STORE > config file > default; a local store is created); ``workers``
    parallel uploads; ``max_bytes``: the most a gzip bundle may decompress to (see
    ``store.BundleStore``). ``trusted_keys`` / ``require_signatures``: the trust gate's
    policy (empty: the settings'); an entry it refuses is not imported (exit 4)."""

    file: str | Path
    expect_sha256: str | None = None
    store: str | None = None
    workers: int = 8
    max_bytes: int | None = None
    trusted_keys: Sequence[str] = ()
    require_signatures: bool = False


@dataclass(frozen=True, slots=True)
class ImportBundleResult(ExitRule):
    """What the import did (``copy``: the entries, blobs and packs written or already there),
    the bundle's path and digest. A result is a success (exit 0)."""

    copy: CopyEntriesResult
    file: str
    sha256: str

    def error(self) -> NeffcacheError | None:
        return self.copy.error()

    def to_json(self) -> dict[str, Any]:
        """``neffcache bundle import --json``: file, sha256, source, target, entries,
        entries_copied, entries_present, blobs_copied, blobs_skipped, bytes_copied,
        packs_copied, packs_skipped, refused."""
        return dict(self.copy.to_json(), file=self.file, sha256=self.sha256)


def import_bundle(request: ImportBundleRequest) -> ImportBundleResult:
    """Check the whole bundle (structure, every member against its sha256, with
    ``expect_sha256`` the table itself), then publish its entries: blobs and packs the store
    lacks, verified again while streaming, manifests and pointers last (first writer wins).
    Raises IntegrityError (exit 4) for a truncated, tampered or foreign bundle, before
    anything is written; UnavailableError (exit 6) when the store cannot be reached."""
    settings = read_settings(os.environ, store=request.store)
    trust = load_trust(settings, request.trusted_keys, require=request.require_signatures)
    dst = open_store(settings.store_url, create=True)
    with BundleStore(request.file, expect_sha256=request.expect_sha256,
                     max_bytes=request.max_bytes) as src:
        src.verify_all()
        manifests = read_manifests(src, [e.entry_key for e in src.toc.entries])
        dst.check()
        copied = apply_copy(src, dst, manifests, workers=request.workers, trust=trust)
        digest = src.digest
    return ImportBundleResult(copied, str(Path(request.file).absolute()), digest)


@checked_request
class ShowBundleRequest:
    """Which bundle ``show_bundle`` reads: ``file``, refused unless its digest is
    ``expect_sha256`` (when given); ``verify`` also hashes every member (the structure is
    always checked); ``max_bytes``: the most a gzip bundle may decompress to."""

    file: str | Path
    expect_sha256: str | None = None
    verify: bool = False
    max_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class ShowBundleResult(ExitRule):
    """A bundle's path, digest and table of contents, and whether every member was hashed.
    A result is a success (exit 0): a bad bundle raises."""

    file: str
    sha256: str
    toc: Toc
    verified: bool

    def to_json(self) -> dict[str, Any]:
        """``neffcache bundle show --json``: file, sha256, created_at, producer, entries,
        members, bytes, verified."""
        return {"file": self.file, "sha256": self.sha256, "created_at": self.toc.created_at,
                "producer": dict(self.toc.producer),
                "entries": [e.to_json() for e in self.toc.entries],
                "members": len(self.toc.members), "bytes": self.toc.total_bytes,
                "verified": self.verified}


def show_bundle(request: ShowBundleRequest) -> ShowBundleResult:
    """Read a bundle's table of contents and check its structure (and, with ``verify``, every
    member against its sha256). Raises IntegrityError (exit 4) for a bad bundle."""
    with BundleStore(request.file, expect_sha256=request.expect_sha256,
                     max_bytes=request.max_bytes) as b:
        if request.verify:
            b.verify_all()
        return ShowBundleResult(str(b.path), b.digest, b.toc, request.verify)
