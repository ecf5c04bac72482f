"""The local state file of each cache root: what neffcache last verified, so reruns skip hashing.

``<root>/.neffcache-state.json`` maps each path to (size, mtime_ns, ctime_ns, inode, sha256,
mode) as neffcache last verified it; a file whose size, times and inode still match needs no
hashing. A restore writes it only after a ``syncfs`` has put those files on disk. Reading a
damaged state file yields an empty state (files get re-hashed); writing one is best effort
(atomic, a failure only costs re-hashing).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neffcache.restore.fs import replace_best_effort
from neffcache.restore.plan import FileId

STATE_FILE = ".neffcache-state.json"
STATE_SCHEMA = 1


@dataclass(frozen=True, slots=True)
class StateRecord:
    """A file as it was when neffcache last verified it; a match means "no need to re-hash"."""

    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    sha256: str
    mode: int

    def matches(self, size: int, mtime_ns: int, ctime_ns: int, inode: int) -> bool:
        return (self.size, self.mtime_ns, self.ctime_ns, self.inode) == \
            (size, mtime_ns, ctime_ns, inode)


def encode_state(records: Mapping[str, StateRecord]) -> bytes:
    files = {p: [r.size, r.mtime_ns, r.ctime_ns, r.inode, r.sha256, r.mode]
             for p, r in sorted(records.items())}
    return json.dumps({"schema_version": STATE_SCHEMA, "files": files},
                      separators=(",", ":")).encode("utf-8")


def decode_state(data: bytes) -> dict[str, StateRecord]:
    """Parse a state file; anything unexpected yields an empty state (files get re-hashed)."""
    try:
        doc: Any = json.loads(data)
        if doc.get("schema_version") != STATE_SCHEMA:
            return {}
        out = {}
        for path, (size, mtime, ctime, inode, sha, mode) in doc["files"].items():
            out[str(path)] = StateRecord(int(size), int(mtime), int(ctime), int(inode),
                                         str(sha), int(mode))
        return out
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}


def state_record(st: os.stat_result, sha256: str) -> StateRecord:
    return StateRecord(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, sha256,
                       stat.S_IMODE(st.st_mode))


def load_state(target_dirs: Mapping[str, str]) -> dict[FileId, StateRecord]:
    out: dict[FileId, StateRecord] = {}
    for root, d in target_dirs.items():
        try:
            data = Path(d, STATE_FILE).read_bytes()
        except OSError:
            continue
        out.update(((root, p), r) for p, r in decode_state(data).items())
    return out


def save_state(target_dirs: Mapping[str, str], records: Mapping[FileId, StateRecord]) -> None:
    """Write each root's state file atomically (best effort: a failure only costs re-hashing)."""
    for root, d in target_dirs.items():
        mine = {p: r for (rt, p), r in records.items() if rt == root}
        if not mine:
            continue
        replace_best_effort(Path(d, STATE_FILE), encode_state(mine))
