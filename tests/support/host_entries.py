"""Entries published for this host's fingerprint, as a build host would publish them, so a test
can restore them through the public API (``neffcache.restore``) without naming internals."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from neffcache.backends import get_backend
from neffcache.fingerprint import collect_fingerprint
from neffcache.matrix_io import load_matrix
from neffcache.precompile.publish import publish_entry
from neffcache.store import BLOBS, CELLS, MANIFESTS, PACKS, BundleStore, Store
from tests.support.lifecycle import bundle_with
from tests.support.synthetic import make_neff_cache

# A neuron matrix of two cells; NEFFCACHE_INSTANCE_TYPE gives the host a known target.
MATRIX = """\
backend = "neuron"
name = "api"
[[pipelines]]
name = "tiny"
class = "diffusers:Flux2KleinPipeline"
model = "/models/tiny-flux2-klein"
mode = "compile"
shapes = ["64x64", "128x128"]
"""
INSTANCE_TYPE = ("NEFFCACHE_INSTANCE_TYPE", "trn2.48xlarge")


@dataclass(frozen=True, slots=True)
class Published:
    """One cell's entry: its id, the files it carries (relative path -> bytes), and the
    sha256 of its largest file (a blob of its own, never in a pack)."""

    cell_id: str
    files: dict[str, bytes]
    large_sha256: str


def publish_for_this_host(store: Store, matrix: Path, work: Path, cell_ids: list[str], *,
                          seed: int = 1, count: int = 8) -> list[Published]:
    """Publish a synthetic neff cache (one large file, the rest small) for each of
    ``cell_ids`` of ``matrix``, under the fingerprint ``neffcache restore`` would collect here
    (with the environment as it is now)."""
    m = load_matrix(matrix)
    backend = get_backend(m.backend)
    fingerprint = collect_fingerprint(backend.name, os.environ)
    out = []
    for i, cell in enumerate(c for c in m.cells if c.id in cell_ids):
        cache = make_neff_cache(work / f"cache-{i}", seed=seed + i, count=count, large=1,
                                large_size=(256 << 10, 512 << 10), duplicate_ratio=0,
                                droppings=False)
        result = publish_entry(store, cell, fingerprint, backend, {"neff": cache.root})
        large = max(result.manifest.files, key=lambda f: f.size)
        out.append(Published(cell.id, cache.files, large.sha256))
    return out


def bundle_of_directory(store_dir: Path, path: Path) -> str:
    """A bundle at ``path`` of every manifest, pointer, blob and pack of the local store in
    ``store_dir`` (written by hand, not by ``neffcache bundle export``); its digest."""
    objects = [(key, p.read_bytes()) for p in sorted(store_dir.rglob("*")) if p.is_file()
               and (key := p.relative_to(store_dir).as_posix()).startswith(
                   (MANIFESTS, CELLS, BLOBS, PACKS))]
    bundle_with(path, objects)
    with BundleStore(path) as bundle:
        return bundle.digest
