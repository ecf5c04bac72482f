"""Copy entries from one store to another: blobs once, verified, manifests last."""

from __future__ import annotations

import functools
import io
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from neffcache.command_steps import open_checked_store
from neffcache.config import read_settings
from neffcache.documents import fields_of
from neffcache.errors import ExitRule, IntegrityError, UntrustedEntryError, UsageError
from neffcache.hashing import VerifyingReader
from neffcache.lifecycle.entry_select import select_manifests
from neffcache.manifest import Manifest, encode_manifest
from neffcache.precompile import held_intents, write_pointer
from neffcache.request_rules import checked_request
from neffcache.store import (
    BLOBS,
    PACKS,
    Member,
    Store,
    TempFiles,
    describe_store,
    holds_good,
    manifest_key,
    plan_members,
    side_environ,
)
from neffcache.thread_pool import map_in_threads
from neffcache.trust import UNCHECKED, TrustPolicy, admit_into, load_trust


@checked_request
class CopyEntriesRequest:
    """What ``copy_entries`` copies from store ``source`` to store ``target`` (a local one is
    created): the selection as for ``ExportBundleRequest``. Each side is configured on its own,
    from ``environ`` (default: the process's) with ``NEFFCACHE_FROM_*`` / ``NEFFCACHE_TO_*``
    overrides and ``source_profile`` / ``target_profile`` (``store.side_environ``). Each entry
    the target lacks passes the trust gate (``trusted_keys``) before any of it is written."""

    source: str
    target: str
    matrix: str | Path | None = None
    cells: Sequence[str] = ()
    fingerprints: Sequence[str] = ()
    all_entries: bool = False
    workers: int = 8
    progress: Callable[[int, int], None] | None = None
    source_profile: str | None = None
    target_profile: str | None = None
    environ: Mapping[str, str] | None = None
    trusted_keys: Sequence[str] = ()
    require_signatures: bool = False


def copy_entries(request: CopyEntriesRequest) -> CopyEntriesResult:
    """Copy the selected entries; a rerun copies only what is missing. Raises UsageError (exit
    2) for the same store twice or a bad selection, IntegrityError (exit 4) for a bad source
    object (nothing of it is kept), UnavailableError (exit 6) for an unreachable store."""
    env = os.environ if request.environ is None else request.environ
    trust = load_trust(read_settings(env), request)
    if (url := describe_store(request.source)) == describe_store(request.target):
        raise UsageError(f"--from and --to are the same store ({url})")  # before any write
    src = open_checked_store(request.source,
                             environ=side_environ(env, "FROM", request.source_profile))
    dst = open_checked_store(request.target, create=True,
                             environ=side_environ(env, "TO", request.target_profile))
    if isinstance(dst, TempFiles):
        for temp in dst.stale_temps():  # what an earlier, killed copy left
            dst.remove_temp(temp)
    manifests = select_manifests(src, request.matrix, request.cells, request.fingerprints,
                                 request.all_entries, workers=request.workers)
    return apply_copy(src, dst, manifests, workers=request.workers,
                      on_progress=request.progress, trust=trust)


@dataclass(frozen=True, slots=True)
class CopyEntriesResult(ExitRule):
    """What a copy did: the entries asked for, those written and those already in the target,
    blobs and packs copied or skipped, entries the trust gate refused."""

    source: str
    target: str
    entries: tuple[str, ...]  # every entry key asked for
    entries_copied: int  # manifests this run wrote
    entries_present: int  # manifests the target already had
    blobs_copied: int
    blobs_skipped: int
    bytes_copied: int
    packs_copied: int
    packs_skipped: int
    refused: tuple[tuple[str, str], ...] = ()  # (entry key, why): stopped by the trust gate

    def error(self) -> UntrustedEntryError | None:
        """Exit 4 when the trust gate refused an entry."""
        if not self.refused:
            return None
        return UntrustedEntryError(f"{len(self.refused)} entr(ies) refused by the trust gate, "
                                   f"nothing of them written; first: {self.refused[0][1]}")

    def to_json(self) -> dict[str, Any]:
        return dict(fields_of(self),
                    refused=[{"entry_key": k, "error": e} for k, e in self.refused])


def copy_object(src: Store, dst: Store, member: Member) -> bool:
    """``put_verified`` unless ``dst`` holds the object and it is not known to be bad."""
    if holds_good(dst, member.name, member.size):  # the skip decision: a rerun skips it
        return False
    with src.open(member.name) as raw:
        return put_verified(dst, member.name, raw, member.size, member.sha256,
                            name=f"{src.url}/{member.name}")


def put_verified(dst: Store, key: str, raw: BinaryIO, size: int, sha256: str, *,
                 name: str) -> bool:
    """Put ``raw`` at ``key`` if absent; wrong bytes are taken back and raise IntegrityError."""
    reader = VerifyingReader(raw, size=size, sha256=sha256, name=name)
    wrote = dst.put(key, reader, if_absent=True)  # type: ignore[arg-type]  # a raw stream
    if wrote:
        try:
            reader.read_to_end()
        except IntegrityError:
            dst.delete(key)  # ours, and wrong: take it back before anyone trusts it
            raise
    return wrote


def apply_copy(src: Store, dst: Store, manifests: Sequence[Manifest], *, workers: int = 8,
               on_progress: Callable[[int, int], None] | None = None,
               trust: TrustPolicy = UNCHECKED) -> CopyEntriesResult:
    """Objects, then manifests and pointers; a refused entry has nothing of it written."""
    present = [m for m in manifests if dst.has(manifest_key(m.entry_key))]
    have = {m.entry_key for m in present}
    gated = map_in_threads(lambda m: _gate(dst, m, src.url, trust),
                           [m for m in manifests if m.entry_key not in have], workers)
    refused = tuple((m.entry_key, why) for m, why in gated if why)
    todo = [m for m, why in gated if not why]
    manifests = [*present, *todo]
    objects = plan_members(manifests, {}, {})  # a present entry's too: one may have gone bad
    blobs = [b for b in objects if b.name.startswith(BLOBS)]  # each once, largest first

    copy = functools.partial(copy_object, src, dst)
    with held_intents(dst, todo):  # a concurrent gc spares their blobs
        wrote: list[bool] = []
        for i in range(0, len(blobs), 256):  # progress per batch, bounded memory
            wrote += map_in_threads(copy, blobs[i:i + 256], workers)
            if on_progress:
                on_progress(len(wrote), len(blobs))
        packs = map_in_threads(copy, [p for p in objects if p.name.startswith(PACKS)], workers)
        copied = 0
        for m in todo:
            copied += dst.put(manifest_key(m.entry_key), io.BytesIO(encode_manifest(m)),
                              if_absent=True)
            write_pointer(dst, m)
        # A gc that listed pending/ before our intents existed may have deleted a blob we
        # skipped: check those once more, now that manifests reference them.
        map_in_threads(copy, [b for b, w in zip(blobs, wrote, strict=True)
                              if not w and not dst.has(b.name)], workers)
        for m in present:
            write_pointer(dst, m)  # a copy killed between manifest and pointer
    new = [b for b, w in zip(blobs, wrote, strict=True) if w]
    return CopyEntriesResult(
        source=src.url, target=dst.url,
        entries=tuple(sorted((*(m.entry_key for m in manifests), *(k for k, _ in refused)))),
        entries_copied=copied, entries_present=len(present) + len(todo) - copied,
        blobs_copied=len(new), blobs_skipped=len(blobs) - len(new),
        bytes_copied=sum(b.size for b in new), packs_copied=sum(packs),
        packs_skipped=len(packs) - sum(packs), refused=refused)


def _gate(dst: Store, m: Manifest, source: str, trust: TrustPolicy) -> tuple[Manifest, str]:
    try:
        admit_into(dst, m, f"{source}/{manifest_key(m.entry_key)}", trust)
    except UntrustedEntryError as exc:
        return m, str(exc)
    return m, ""
