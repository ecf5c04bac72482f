"""Ready markers (``DIR/.neffcache-entries/ready/<cell id>``), for the service only."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path
from urllib.parse import quote

from neffcache.restore.fs import ENTRIES_DIR, local_manifest_path, tmp_name

READY_DIR = "ready"  # in ENTRIES_DIR


def marker_path(target: str | Path, cell_id: str) -> Path:
    return Path(target, ENTRIES_DIR, READY_DIR, quote(cell_id, safe=""))


def cell_ready(target: str | Path, cell_id: str) -> bool:
    """Whether cell ``cell_id`` was announced ready in restore destination ``target`` (every file
    verified and renamed into place) and its entry is still there. Never reads the store."""
    key = marker_entry(target, cell_id)
    return key is not None and local_manifest_path(target, key).is_file()


def marker_entry(target: str | Path, cell_id: str) -> str | None:
    """The entry key cell ``cell_id``'s marker names, or None."""
    try:
        doc = json.loads(marker_path(target, cell_id).read_bytes())
        key = doc["entry_key"]
        plausible = doc["cell"] == cell_id and isinstance(key, str) and key.isalnum()
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return key if plausible else None


def write_marker(target: str | Path, cell_id: str, key: str) -> None:
    """Cell ``cell_id``'s marker, written whole (best effort)."""
    final = marker_path(target, cell_id)
    tmp = Path(target, ENTRIES_DIR, tmp_name())
    try:
        final.parent.mkdir(exist_ok=True)
        tmp.write_bytes(json.dumps({"cell": cell_id, "entry_key": key}).encode())
        os.replace(tmp, final)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


def remove_markers(target: str | Path, cell_ids: Iterable[str]) -> None:
    for cid in cell_ids:
        with contextlib.suppress(OSError):
            marker_path(target, cid).unlink()


def remove_markers_of(target: str | Path, keys: Collection[str]) -> None:
    if not keys:
        return
    d = Path(target, ENTRIES_DIR, READY_DIR)
    with contextlib.suppress(OSError):
        for name in os.listdir(d):
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                if json.loads((d / name).read_bytes())["entry_key"] in keys:
                    (d / name).unlink()


class Announcer:
    """Announces cells ready, each once: marker first, then ``on_ready(cell_id)``. Thread-safe."""

    def __init__(self, target: str | Path, started: float,
                 on_ready: Callable[[str], None] | None = None) -> None:
        self.target, self.started, self.on_ready = Path(target), started, on_ready
        self.announced: dict[str, float] = {}  # cell id -> seconds since ``started``, in order
        self._lock = threading.Lock()

    def reset(self, ready: Sequence[tuple[str, str]], waiting: Iterable[str]) -> None:
        """Before any install: unmark ``waiting``, announce ``ready`` (writing a marker that is
        missing or names another entry: only under DIR's lock)."""
        remove_markers(self.target, waiting)
        for cid, key in ready:
            self.ready(cid, key, rewrite=False)

    def ready(self, cell_id: str, key: str, *, rewrite: bool = True) -> None:
        """Announce ``cell_id`` (once); ``rewrite=False`` leaves a marker that names ``key``."""
        with self._lock:
            if cell_id in self.announced:
                return
            if rewrite or marker_entry(self.target, cell_id) != key:
                write_marker(self.target, cell_id, key)
            self.announced[cell_id] = time.monotonic() - self.started
            if self.on_ready is not None:
                self.on_ready(cell_id)
