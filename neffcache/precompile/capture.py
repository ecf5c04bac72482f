"""Which files in a backend's cache roots belong in an entry, and their state (I/O edge)."""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

from neffcache.backends import Backend
from neffcache.precompile.hit_check import FileState


def walk_captured(backend: Backend, root: str, top: Path
                  ) -> Iterator[tuple[str, Path, os.stat_result]]:
    """(rel, path, lstat) of each regular file under ``top`` that ``root`` captures, sorted;
    symlinks are never followed, and a directory no capture glob can reach is not walked."""
    globs = [g.split("/") for g in backend.root(root).capture]
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        rel_dir = Path(dirpath).relative_to(top).as_posix()
        prefix = "" if rel_dir == "." else f"{rel_dir}/"
        dirnames[:] = sorted(d for d in dirnames if not backend.is_ignored(d)
                             and _may_hold_captures(globs, f"{prefix}{d}".split("/")))
        for fname in sorted(filenames):
            rel = f"{prefix}{fname}"
            if not backend.captures(root, rel):
                continue
            path = Path(dirpath, fname)
            try:
                st = path.lstat()
            except FileNotFoundError:
                continue  # removed while we looked (a temp file renamed away)
            if stat.S_ISREG(st.st_mode):  # symlinks, sockets, fifos are never captured
                yield rel, path, st


def _may_hold_captures(globs: list[list[str]], dir_parts: list[str]) -> bool:
    """Whether a directory could hold a file a capture glob matches, so a root such as TMPDIR
    is not walked beyond the compiler's own subtree."""
    return not globs or any(
        all(fnmatch.fnmatchcase(dir_parts[i], g[i])
            for i in range(min(len(dir_parts), len(g) - 1))) for g in globs)


def scan_roots(backend: Backend, dirs: Mapping[str, str | Path]) -> tuple[FileState, ...]:
    """Every capturable regular file under each root that is a directory, sorted."""
    return tuple(FileState(name, rel, st.st_size, st.st_mtime_ns)
                 for name, top in sorted(dirs.items()) if Path(top).is_dir()
                 for rel, _, st in walk_captured(backend, name, Path(top)))
