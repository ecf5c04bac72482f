"""Resolve: read and validate each requested cell's manifest from the store, in parallel."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
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


class ManifestCopies:
    """Keeps each manifest's bytes read from the store as its local copy: put aside before decoding,
    renamed once it decoded as that entry's manifest. Best effort, not fsynced."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def aside(self, key: str, data: bytes) -> str | None:
        tmp = os.path.join(self.target, ENTRIES_DIR, tmp_name())
        try:
            with open(tmp, "xb") as fh:  # exclusive: never through a name already there
                fh.write(data)
        except FileExistsError:
            return None  # not this copy's: left alone
        except OSError:
            self.settle(key, tmp, False)
            return None
        return tmp

    def settle(self, key: str, tmp: str | None, ok: bool) -> None:
        if tmp is None:
            return
        with contextlib.suppress(OSError):
            if ok:
                os.replace(tmp, local_manifest_path(self.target, key))
                return
        with contextlib.suppress(OSError):  # not decoded, or not renamed: no copy
            os.unlink(tmp)


def resolve_entries(store: Store, cells: Sequence[Cell], fingerprint: Fingerprint,
                    backend: Backend, *, workers: int = 16,
                    deadline: float | None = None,
                    trusted: Sequence[PublicKey] = (),
                    keep: ManifestCopies | None = None) -> Resolution:
    """Read and validate each cell's manifest for this fingerprint (in parallel)."""

    def read(cell: Cell) -> Manifest | CellFailure:
        """The cell's manifest, or an integrity failure (the store's errors: ``ask_cells``)."""
        key = entry_key(cell, fingerprint)
        source = f"manifests/{key}.json"
        for attempt in range(1, ATTEMPTS + 1):
            tmp, ok = None, False
            try:
                box = [store.read(manifest_key(key))]
                tmp = keep.aside(key, box[0]) if keep is not None else None
                # the bytes handed over as a temporary (popped): decoding frees them once parsed
                m = decode_manifest(box.pop(), allowed_roots=backend.root_names, source=source)
                if m.entry_key != key:
                    raise ManifestError(f"{source} describes entry {m.entry_key}")
                check_trusted(m, trusted, source)
                ok = True
                return m
            # damaged on the way or at rest, or untrusted (a mirror may hold the signed one): again
            except (ManifestError, UntrustedEntryError) as exc:
                if attempt == ATTEMPTS or (deadline is not None and time.monotonic() >= deadline):
                    return CellFailure(cell.id, "integrity", str(exc))
            finally:
                if keep is not None:
                    keep.settle(key, tmp, ok)
        raise AssertionError("unreachable")

    asked = ask_cells(cells, read, workers, deadline)
    return replace(asked, elsewhere=find_elsewhere(store, asked.missing, fingerprint,
                                                   workers=workers, deadline=deadline))


def ask_cells(cells: Sequence[Cell], ask: Callable[[Cell], Manifest | CellFailure | str],
              workers: int, deadline: float | None) -> Resolution:
    """``ask`` the store about each cell in parallel, the answers sorted: a manifest (found), a
    failure (also: the store unavailable), "missing" (also: NotFoundError), or "unresolved" (not
    asked before the deadline, or unavailable past it); any other answer: none of these."""

    def one(cell: Cell) -> Manifest | CellFailure | str:
        try:
            return ask(cell)
        except NotFoundError:
            return "missing"
        except UnavailableError as exc:
            if deadline is not None and time.monotonic() >= deadline:
                return "unresolved"  # the deadline cut the client's waits short
            return CellFailure(cell.id, "unavailable", str(exc))

    answers = list(zip(cells, map_in_threads(one, cells, workers, deadline=deadline,
                                             late=lambda c: "unresolved"), strict=True))
    return Resolution(tuple(a for _, a in answers if isinstance(a, Manifest)),
                      tuple(c for c, a in answers if a == "missing"),
                      tuple(a for _, a in answers if isinstance(a, CellFailure)),
                      tuple(c for c, a in answers if a == "unresolved"))


def find_elsewhere(store: Store, cells: Sequence[Cell], fingerprint: Fingerprint, *,
                   workers: int = 16, deadline: float | None = None
                   ) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """For cells without an entry: the other fingerprints they were built for (one LIST each)."""

    def others(cell: Cell) -> tuple[str, ...]:
        try:
            pointers = [pointer_parts(k) for k in store.list(f"{CELLS}{cell.key}/")]
        except (UnavailableError, NotFoundError):
            return ()
        return tuple(sorted(p[1] for p in pointers if p is not None and p[1] != fingerprint.key))

    found = map_in_threads(others, cells, workers, deadline=deadline, late=lambda c: ())
    return tuple((c.id, fps) for c, fps in zip(cells, found, strict=True) if fps)
