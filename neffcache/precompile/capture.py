"""Which files in a backend's cache roots belong in an entry, and their state (I/O edge).

Used by the worker (before/after scans that prove whether anything compiled) and by the
parent that publishes a warm-up: locks, temp files and anything outside a root's capture
globs are never captured (``Backend.captures``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

from neffcache.backends import Backend
from neffcache.manifest import FileRecord
from neffcache.precompile.hit_check import FileState


def scan_roots(backend: Backend, dirs: Mapping[str, str | Path]) -> tuple[FileState, ...]:
    """Every capturable regular file under each root (symlinks never followed), sorted."""
    out: list[FileState] = []
    for name, top in sorted(dirs.items()):
        top = Path(top)
        if not top.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
            dirnames.sort()
            for fname in sorted(filenames):
                path = Path(dirpath, fname)
                rel = path.relative_to(top).as_posix()
                if not backend.captures(name, rel):
                    continue
                try:
                    st = path.lstat()
                except FileNotFoundError:
                    continue  # removed while we looked (a temp file renamed away)
                if stat.S_ISREG(st.st_mode):
                    out.append(FileState(name, rel, st.st_size, st.st_mtime_ns))
    return tuple(out)


def captured_records(backend: Backend, records: Iterable[FileRecord]) -> tuple[FileRecord, ...]:
    """The records a publish should keep: those ``Backend.captures`` accepts."""
    return tuple(r for r in records if backend.captures(r.root, r.path))
