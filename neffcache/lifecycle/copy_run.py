"""The copy use case, ``copy_entries``: open both stores, select the entries, copy them (see
``copy`` for how); from a typed request."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from neffcache.config import read_settings
from neffcache.errors import UsageError
from neffcache.lifecycle.copy import CopyEntriesResult, apply_copy
from neffcache.lifecycle.entry_select import select_manifests
from neffcache.request_rules import checked_request
from neffcache.store import TempFiles, open_store, side_environ
from neffcache.trust import load_trust


@checked_request
class CopyEntriesRequest:
    """What ``copy_entries`` copies, from where to where.

    ``source``/``target``: store URLs (PATH, file://PATH or s3://BUCKET/PREFIX; a local target
    is created). The selection: the entries built for the cells of ``matrix`` (only those
    whose id matches one of ``cells``, globs, when given), or every entry with
    ``all_entries``; only the fingerprints ``fingerprints`` (keys or prefixes of at least 6 hex
    digits) when given. ``workers``: parallel transfers; ``progress(done, total)`` per batch
    of blobs. Each side is configured on its own (two endpoints, regions, keys): from
    ``environ`` (default: the process's) with ``NEFFCACHE_FROM_*`` / ``NEFFCACHE_TO_*``
    overrides and ``source_profile`` / ``target_profile`` (see ``store.side_environ``).
    ``trusted_keys`` / ``require_signatures``: the trust gate's policy (empty: the settings'
    NEFFCACHE_TRUSTED_KEYS / config); each entry the target lacks passes it before anything
    of it is written (``neffcache.trust``).
    """

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
    """Copy the selected entries from ``source`` to ``target``: each blob and pack the target
    lacks once, verified against its size and sha256 while it streams, then manifests and
    cell pointers (first writer wins). Rerunning an interrupted copy copies only what is
    missing. Raises UsageError (exit 2) for the same store twice or a bad selection,
    IntegrityError (exit 4) for a source object that does not match its sha256 (nothing of it
    is kept), UnavailableError (exit 6) when a store cannot be reached."""
    env = os.environ if request.environ is None else request.environ
    trust = load_trust(read_settings(env), request.trusted_keys,
                       require=request.require_signatures)
    src = open_store(request.source, environ=side_environ(env, "FROM", request.source_profile))
    dst = open_store(request.target, create=True,
                     environ=side_environ(env, "TO", request.target_profile))
    if src.url == dst.url:
        raise UsageError(f"--from and --to are the same store ({src.url})")
    src.check()
    dst.check()
    if isinstance(dst, TempFiles):
        for temp in dst.stale_temps():  # what an earlier, killed copy left
            dst.remove_temp(temp)
    manifests = select_manifests(src, request.matrix, request.cells, request.fingerprints,
                                 request.all_entries, workers=request.workers)
    return apply_copy(src, dst, manifests, workers=request.workers,
                      on_progress=request.progress, trust=trust)
