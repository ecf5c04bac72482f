"""Which entries a lifecycle command (copy, bundle export, retire) acts on."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from neffcache.backends import BACKENDS
from neffcache.errors import ManifestError, UsageError
from neffcache.hashing import is_key_prefix
from neffcache.manifest import Manifest, decode_manifest, entry_key_for
from neffcache.matrix import Cell, select_cells
from neffcache.matrix_io import load_matrix
from neffcache.store import CELLS, MANIFESTS, Store, entry_key_of, manifest_key, pointer_parts
from neffcache.thread_pool import map_in_threads


def match_fingerprint(key: str, wanted: Sequence[str]) -> bool:
    """Whether ``key`` starts with one of ``wanted`` (everything matches when it is empty)."""
    return not wanted or any(key.startswith(w) for w in wanted)


def select_entry_keys(store: Store, cells: Sequence[Cell] | None,
                      fingerprints: Sequence[str] = (), *, workers: int = 16) -> tuple[str, ...]:
    """Sorted entry keys: all (``cells=None``: of any fingerprint) or those the cells' pointers
    name (of ``fingerprints``)."""
    if cells is None:
        return tuple(sorted({ek for k in store.list(MANIFESTS)
                             if (ek := entry_key_of(k)) is not None}))

    def pointed(cell: Cell) -> list[str]:
        pointers = (pointer_parts(k) for k in store.list(f"{CELLS}{cell.key}/"))
        return [entry_key_for(*p) for p in pointers
                if p is not None and match_fingerprint(p[1], fingerprints)]

    found = {k for ks in map_in_threads(pointed, cells, workers) for k in ks}
    return tuple(sorted(k for k in found if store.has(manifest_key(k))))


def decode_entry(data: bytes, source: str, entry_key: str | None, *,
                 known_backend: bool = False) -> Manifest:
    """The manifest, decoded with its backend's roots; ManifestError unless it describes
    ``entry_key`` (with ``known_backend``: or its backend is unknown)."""
    m = decode_manifest(data, source=source)
    backend = BACKENDS.get(m.fingerprint.backend)
    if backend is None and known_backend:
        raise ManifestError(f"{source}: unknown backend {m.fingerprint.backend!r}")
    if backend is not None:
        m = decode_manifest(data, allowed_roots=backend.root_names, source=source)
    if m.entry_key != entry_key:
        raise ManifestError(f"{source}: describes entry {m.entry_key}")
    return m


def read_manifests(store: Store, keys: Sequence[str], *, workers: int = 16
                   ) -> tuple[Manifest, ...]:
    """The entries' manifests, validated (roots of their backend, entry key); ManifestError."""
    return tuple(map_in_threads(
        lambda k: decode_entry(store.read(manifest_key(k)), manifest_key(k), k), keys, workers))


def select_manifests(store: Store, matrix: str | Path | None, patterns: Sequence[str] = (),
                     fingerprints: Sequence[str] = (), everything: bool = False, *,
                     workers: int = 16) -> tuple[Manifest, ...]:
    """The validated manifests of a command's selection (MATRIX [--cells] | --all, and
    --fingerprint), sorted by entry key; UsageError for a bad selection."""
    if everything == (matrix is not None):
        raise UsageError("give a MATRIX or --all (not both)")
    if everything and patterns:
        raise UsageError("--cells selects cells of a MATRIX; it cannot be used with --all")
    wanted = tuple(w.strip().lower() for w in fingerprints)
    for w in wanted:
        if not is_key_prefix(w):
            raise UsageError(f"--fingerprint {w!r}: expected a fingerprint key or a prefix of "
                             f"at least 6 hex digits")
    cells = None
    if matrix is not None:
        m = load_matrix(matrix)
        cells = select_cells(m.cells, tuple(patterns))
        if not cells:
            raise UsageError(f"--cells {' '.join(patterns)}: matches no cell of {matrix}")
    keys = select_entry_keys(store, cells, wanted, workers=workers)
    return tuple(m for m in read_manifests(store, keys, workers=workers)
                 if match_fingerprint(m.fingerprint.key, wanted))
