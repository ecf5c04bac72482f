"""Resolve: read and validate each requested cell's manifest from the store, in parallel."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from neffcache.backends import Backend
from neffcache.errors import ManifestError, NotFoundError, UnavailableError, UntrustedEntryError
from neffcache.fingerprint import Fingerprint
from neffcache.manifest import Manifest, decode_manifest, entry_key
from neffcache.matrix import Cell
from neffcache.restore.fetch import ATTEMPTS
from neffcache.restore.fs import ENTRIES_DIR, local_manifest_path, tmp_name
from neffcache.signing import PublicKey, check_trusted
from neffcache.store import CELLS, Store, manifest_key, pointer_parts
from neffcache.thread_pool import map_in_threads


@dataclass(frozen=True, slots=True)
class CellFailure:
    cell_id: str
    kind: str  # integrity | unavailable
    message: str


@dataclass(frozen=True, slots=True)
class Resolution:
    """Which requested cells have an entry for this fingerprint, and which do not."""

    found: tuple[Manifest, ...]
    missing: tuple[Cell, ...]
    failed: tuple[CellFailure, ...]
    unresolved: tuple[Cell, ...]  # not looked up before the deadline
    elsewhere: tuple[tuple[str, tuple[str, ...]], ...] = ()  # cell id -> other fingerprint keys


_NEW_COPY = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class ManifestCopies:
    """Keeps each manifest's bytes read from the store as its local copy: put aside before decoding,
    renamed once it decoded as that entry's manifest. Best effort, not fsynced."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def aside(self, key: str, data: bytes) -> str | None:
        tmp = os.path.join(self.target, ENTRIES_DIR, tmp_name())
        try:
            fd = os.open(tmp, _NEW_COPY, 0o666)
        except OSError:
            return None
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        except OSError:
            self.settle(key, tmp, False)
            return None
        return tmp

    def settle(self, key: str, tmp: str | None, ok: bool) -> None:
        if tmp is None:
            return
        if ok:
            try:
                os.replace(tmp, local_manifest_path(self.target, key))
                return
            except OSError:
                pass
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def resolve_entries(store: Store, cells: Sequence[Cell], fingerprint: Fingerprint,
                    backend: Backend, *, workers: int = 16,
                    deadline: float | None = None,
                    trusted: Sequence[PublicKey] = (),
                    keep: ManifestCopies | None = None) -> Resolution:
    """Read and validate each cell's manifest for this fingerprint (in parallel)."""

    def one(cell: Cell) -> tuple[Cell, Manifest | CellFailure | str]:
        if deadline is not None and time.monotonic() >= deadline:
            return cell, "unresolved"
        return cell, _read_manifest(store, cell, entry_key(cell, fingerprint), backend,
                                    deadline, trusted, keep)

    found: list[Manifest] = []
    missing: list[Cell] = []
    failed: list[CellFailure] = []
    unresolved: list[Cell] = []
    for cell, outcome in map_in_threads(one, cells, workers, deadline=deadline,
                                        late=lambda c: (c, "unresolved")):
        if isinstance(outcome, Manifest):
            found.append(outcome)
        elif isinstance(outcome, CellFailure):
            failed.append(outcome)
        else:
            (missing if outcome == "missing" else unresolved).append(cell)
    elsewhere = find_elsewhere(store, missing, fingerprint, workers=workers, deadline=deadline)
    return Resolution(tuple(found), tuple(missing), tuple(failed), tuple(unresolved), elsewhere)


def _read_manifest(store: Store, cell: Cell, key: str, backend: Backend,
                   deadline: float | None, trusted: Sequence[PublicKey] = (),
                   keep: ManifestCopies | None = None) -> Manifest | CellFailure | str:
    """The cell's manifest, a failure, "missing", or "unresolved" (the deadline)."""
    for attempt in range(1, ATTEMPTS + 1):
        tmp, ok = None, False
        try:
            box = [store.read(manifest_key(key))]
            tmp = keep.aside(key, box[0]) if keep is not None else None
            # the bytes handed over as a temporary (popped): decoding frees them once parsed
            m = decode_manifest(box.pop(), allowed_roots=backend.root_names,
                                source=f"manifests/{key}.json")
            if m.entry_key != key:
                raise ManifestError(f"manifests/{key}.json describes entry {m.entry_key}")
            check_trusted(m, trusted, f"manifests/{key}.json")
            ok = True
            return m
        except NotFoundError:
            return "missing"
        except UnavailableError as exc:
            if deadline is not None and time.monotonic() >= deadline:
                return "unresolved"  # the deadline cut the client's waits short
            return CellFailure(cell.id, "unavailable", str(exc))
        # damaged on the way or at rest, or untrusted (a mirror may hold the signed one): again
        except (ManifestError, UntrustedEntryError) as exc:
            if attempt == ATTEMPTS or (deadline is not None and time.monotonic() >= deadline):
                return CellFailure(cell.id, "integrity", str(exc))
        finally:
            if keep is not None:
                keep.settle(key, tmp, ok)
    raise AssertionError("unreachable")


def find_elsewhere(store: Store, cells: Sequence[Cell], fingerprint: Fingerprint, *,
                   workers: int = 16, deadline: float | None = None
                   ) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """For cells without an entry: the other fingerprints they were built for (one LIST each)."""

    def one(cell: Cell) -> tuple[str, tuple[str, ...]]:
        if deadline is not None and time.monotonic() >= deadline:
            return cell.id, ()
        prefix = f"{CELLS}{cell.key}/"
        try:
            pointers = [pointer_parts(k) for k in store.list(prefix)]
        except (UnavailableError, NotFoundError):
            return cell.id, ()
        fps = sorted(p[1] for p in pointers if p is not None)
        return cell.id, tuple(f for f in fps if f != fingerprint.key)

    return tuple((cid, fps) for cid, fps in map_in_threads(
        one, cells, workers, deadline=deadline, late=lambda c: (c.id, ())) if fps)
