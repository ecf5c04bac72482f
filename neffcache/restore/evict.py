"""Evict: files of entries this host no longer trusts leave the directories the runtime reads.

With trusted keys configured, a manifest copy in ``DIR/.neffcache-entries/`` that none of them
signed (restored before keys were required, or signed by a key since dropped) no longer
vouches for anything: its entry's files are removed from the cache roots (a path a trusted
copy wants with the same sha256 stays), then the copy, and the state files forget those
paths. Runs under DIR's lock, before a restore judges what is in place; a copy that does not
parse names no files, and is only removed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neffcache.backends import BACKENDS, root_dirs
from neffcache.errors import NeffcacheError
from neffcache.manifest import DIGEST_FIELD, SIGNATURE_FIELD, loads_light
from neffcache.restore.dest import lock_destination
from neffcache.restore.fs import Roots
from neffcache.restore.local import LOCAL_ENTRIES, MISSING_FILE, plain_relative
from neffcache.restore.state import forget_paths

_COPY_NAME = 64 + len(".json")


@dataclass(frozen=True, slots=True)
class Eviction:
    """The entries whose copies no trusted key signed, and how many of their files went."""

    entries: tuple[str, ...] = ()
    files: int = 0


def evict_untrusted(target: Path, trusted: Callable[[Any, Any], bool], *,
                    deadline: float | None = None) -> Eviction:
    """Remove the files and copies of the entries whose local copy is not ``trusted``
    (``trusted(signature, manifest_sha256)``, the copy's raw fields); see the module."""
    entries = Path(target, LOCAL_ENTRIES)
    try:
        names = sorted(n for n in os.listdir(entries)
                       if len(n) == _COPY_NAME and n.endswith(".json") and n != MISSING_FILE)
    except OSError:
        return Eviction()
    kept: set[tuple[str, str, str]] = set()  # (root dir, path, sha256) a trusted copy wants
    doomed: list[tuple[str, dict[str, Any] | None]] = []
    for name in names:
        doc = _read(entries / name)
        if doc is not None and trusted(doc.get(SIGNATURE_FIELD), doc.get(DIGEST_FIELD)):
            kept.update((d, f["path"], f["sha256"]) for d, f in _files(target, doc))
        else:
            doomed.append((name, doc))
    if not doomed:
        return Eviction()
    with lock_destination(str(target), deadline=deadline, who="restore (evict)") as held:
        removed = sum(_remove(target, doc, kept) for _, doc in doomed if doc is not None)
        for name, _ in doomed:
            with contextlib.suppress(OSError):
                os.unlink(entries / name)
        if not held.unclean:  # a killed restore's mark stays for the full run's sweep
            held.finished()
    return Eviction(tuple(n[:-5] for n, _ in doomed), removed)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        doc = loads_light(path.read_bytes(), members=False)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _files(target: Path, doc: dict[str, Any]) -> list[tuple[str, Any]]:
    """(root directory, file record) of each plausible file the copy names."""
    try:
        backend = BACKENDS[doc["fingerprint"]["backend"]]
        dirs = root_dirs(backend, str(target))
        return [(dirs[f["root"]], f) for f in doc["files"]
                if f["root"] in dirs and plain_relative(f["path"])]
    except (KeyError, TypeError, AttributeError, NeffcacheError):
        return []


def _remove(target: Path, doc: dict[str, Any], kept: set[tuple[str, str, str]]) -> int:
    """Unlink the copy's files no trusted copy wants (never through a symlink, never outside
    the roots); the state files forget them. How many were removed."""
    files = [(d, f) for d, f in _files(target, doc) if (d, f["path"], f["sha256"]) not in kept]
    if not files:
        return 0
    dirs = {f["root"]: d for d, f in files}
    gone: set[tuple[str, str]] = set()
    with Roots(dirs, create=False) as roots:
        for _, f in files:
            if f["root"] not in roots.fds:
                continue
            try:
                with roots.parent(f["root"], f["path"], create=False) as dfd:
                    os.unlink(f["path"].rpartition("/")[2], dir_fd=dfd)
            except (OSError, NeffcacheError):
                continue
            gone.add((f["root"], f["path"]))
    forget_paths(dirs, gone)
    return len(gone)
