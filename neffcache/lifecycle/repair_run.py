"""The repair use case, ``repair_store``: verify, plan the objects to rewrite, ask for consent,
rewrite each from a source of good bytes (a store, a bundle or a restored directory), verify."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from neffcache.config import read_settings
from neffcache.errors import ExitRule, IntegrityError, NeffcacheError, UsageError
from neffcache.lifecycle.repair import DirSource, RepairItem, plan_repair, rewrite_object
from neffcache.lifecycle.verify import Problem, VerifyStoreResult, _read_manifest, verify_store
from neffcache.manifest import Manifest, PackRecord
from neffcache.store import (
    CELLS,
    MANIFESTS,
    Store,
    entry_key_of,
    manifest_key,
    open_store,
    side_environ,
)
from neffcache.thread_pool import map_in_threads


@dataclass(frozen=True, slots=True)
class RepairRequest:
    """What ``repair_store`` repairs, and from where.

    ``store``: the store to repair (None: as the CLI would, NEFFCACHE_STORE > config > default).
    ``source``: a store URL with good bytes (PATH, s3://..., bundle:FILE), or ``from_dir``: a
    restored directory (its manifest copies say which file holds which blob); exactly one.
    ``dry_run``: plan only. Otherwise rewriting needs ``confirmed=True`` or a
    ``confirm(preview)`` callback returning True. ``workers``: parallel reads and writes.
    """

    store: str | None = None
    source: str | None = None
    from_dir: str | Path | None = None
    dry_run: bool = False
    confirmed: bool = False
    confirm: Callable[[RepairResult], bool] | None = None
    workers: int = 8


@dataclass(frozen=True, slots=True)
class RepairResult(ExitRule):
    """What a repair planned and did: the objects found bad (``planned``), what became of each
    (``outcomes``: repaired | good | unavailable) and the problems a verify finds afterwards
    (``remaining``; with a dry run, the ones found before). Exit 0 when nothing remains bad,
    4 otherwise."""

    store: str
    source: str
    dry_run: bool
    planned: tuple[RepairItem, ...]
    outcomes: tuple[tuple[str, str], ...] = ()
    remaining: tuple[Problem, ...] = ()

    def count(self, outcome: str) -> int:
        return sum(1 for _, o in self.outcomes if o == outcome)

    def error(self) -> NeffcacheError | None:
        """IntegrityError (exit 4) while problems remain (a dry run: any problem), else None."""
        if not self.remaining:
            return None
        return IntegrityError(f"{len(self.remaining)} problem(s) remain in {self.store}; "
                              f"first: {self.remaining[0].message}",
                              hint=None if self.dry_run else
                              "repair from another source: --from STORE | bundle:FILE, "
                              "--from-dir DIR")

    def to_json(self) -> dict[str, Any]:
        """``neffcache repair --json``: store, source, dry_run, planned (key, kind, reason,
        size, sha256), repaired, good, unavailable, outcomes (key, outcome), remaining
        (key, kind, error), ok."""
        return {"store": self.store, "source": self.source, "dry_run": self.dry_run,
                "planned": [i.to_json() for i in self.planned],
                "repaired": self.count("repaired"), "good": self.count("good"),
                "unavailable": self.count("unavailable"),
                "outcomes": [{"key": k, "outcome": o} for k, o in self.outcomes],
                "remaining": [p.to_json() for p in self.remaining],
                "ok": not self.remaining}


def repair_store(request: RepairRequest) -> RepairResult:
    """Find the store's missing and damaged manifests, blobs, packs (and so large-file parts)
    and rewrite each from the source; a good object is never overwritten, and only bytes that
    match the manifest's size and sha256 are written. Manifests first (their blobs are known
    only then), then blobs and packs. Raises UsageError (exit 2) for no or two sources, the
    same store twice or no consent; UnavailableError (exit 6) when a store cannot be reached.
    """
    if (request.source is None) == (request.from_dir is None):
        raise UsageError("repair needs one source: --from STORE (or bundle:FILE) or --from-dir")
    target = open_store(read_settings(os.environ, store=request.store).store_url)
    target.check()
    with ExitStack() as stack:
        source = _open_source(request, target, stack)
        preview = _plan(target, request.workers, source.url, True)
        if request.dry_run or not preview.planned or not _consent(request, preview):
            return preview
        outcomes = _apply(target, source, preview.planned, request.workers)
        second = _plan(target, request.workers, source.url, False)  # blobs of fixed manifests
        tried = {i.key for i in preview.planned}
        outcomes += _apply(target, source,
                           tuple(i for i in second.planned if i.key not in tried),
                           request.workers)
        after = verify_store(target, workers=request.workers)
        return replace(preview, dry_run=False, outcomes=tuple(outcomes),
                       remaining=after.problems)


def _open_source(request: RepairRequest, target: Store, stack: ExitStack) -> Store:
    if request.from_dir is not None:
        return DirSource(request.from_dir)  # type: ignore[return-value]
    assert request.source is not None
    source = open_store(request.source, environ=side_environ(os.environ, "FROM"))  # its own keys
    if hasattr(source, "close"):
        stack.callback(source.close)
    if source.url == target.url:
        raise UsageError(f"--from and --store are the same store ({target.url})")
    source.check()
    return source


def _plan(target: Store, workers: int, source: str, dry_run: bool) -> RepairResult:
    """Verify the target and plan: its problems, plus manifests its cell pointers name that
    it lacks."""
    found: VerifyStoreResult = verify_store(target, workers=workers)
    problems = list(found.problems)
    keys = sorted(k for k in target.list(MANIFESTS) if entry_key_of(k) is not None)
    docs = [d for _, d in map_in_threads(lambda k: _read_manifest(target, k), keys, workers)
            if isinstance(d, Manifest)]
    blobs = {f.sha256: f.size for m in docs for f in m.files}
    packs: dict[str, PackRecord] = {p.sha256: p for m in docs for p in m.packs}
    listed = set(keys)
    for pointer in target.list(CELLS):
        named = _pointed(target, pointer)
        if named is not None and manifest_key(named) not in listed:
            listed.add(manifest_key(named))
            problems.append(Problem(manifest_key(named), "missing",
                                    f"{manifest_key(named)}: missing (named by {pointer})"))
    return RepairResult(target.url, source, dry_run, plan_repair(problems, blobs, packs),
                        remaining=tuple(problems))


def _pointed(target: Store, pointer: str) -> str | None:
    """The entry key a cell pointer names, or None when it cannot be read."""
    try:
        doc = json.loads(target.read(pointer))
    except (NeffcacheError, ValueError):
        return None
    key = doc.get("entry_key") if isinstance(doc, dict) else None
    return key if isinstance(key, str) else None


def _apply(target: Store, source: Store, items: tuple[RepairItem, ...],
           workers: int) -> list[tuple[str, str]]:
    return list(zip((i.key for i in items),
                    map_in_threads(lambda i: rewrite_object(target, source, i), items, workers),
                    strict=True))


def _consent(request: RepairRequest, preview: RepairResult) -> bool:
    if request.confirmed:
        return True
    if request.confirm is None:
        raise UsageError(f"repair would rewrite {len(preview.planned)} object(s) in "
                         f"{preview.store}; not confirmed",
                         hint="neffcache repair --dry-run, then neffcache repair --yes")
    return request.confirm(preview)
