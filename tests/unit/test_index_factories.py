"""Builders for index tests (cells, fingerprints, manifests), and a check that they differ."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from neffcache.fingerprint import Fingerprint, build_fingerprint
from neffcache.manifest import FileRecord, Manifest
from neffcache.matrix import Cell


def make_cell(n: int = 0, *, pipeline: str = "flux2-klein", mode: str = "compile",
              batch: int = 1) -> Cell:
    """Cell n has a distinct shape: height 64 + 8 * (n // 100), width 64 + 8 * (n % 100)."""
    components = ("transformer",) if mode != "eager" else ()
    return Cell(pipeline, "diffusers:Flux2KleinPipeline", "/models/tiny", "main", "bfloat16",
                mode, components, 64 + 8 * (n // 100), 64 + 8 * (n % 100), batch, 1)


def make_fingerprint(n: int = 0, *, backend: str = "inductor") -> Fingerprint:
    return build_fingerprint(backend, {"version.torch": f"2.{n}.0", "cpu.arch": "x86_64"})


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def make_manifest(cell: Cell, fingerprint: Fingerprint, *,
                  files: Sequence[tuple[str, str, int, str]] | None = None,
                  compile_seconds: float | None = 12.5,
                  created_at: str = "2026-03-01T10:00:00+00:00") -> Manifest:
    """``files`` are (root, path, size, content-label); the label's sha256 is the digest."""
    if files is None:
        files = [("inductor", f"fx/{cell.key[:8]}.bin", 100, cell.key),
                 ("inductor", "shared/header.h", 10, "shared")]
    records = tuple(sorted((FileRecord(r, p, n, sha(label)) for r, p, n, label in files),
                           key=lambda f: (f.root, f.path)))
    return Manifest(cell=cell, fingerprint=fingerprint, files=records,
                    producer=(("host", "ci-1"),), compile_seconds=compile_seconds,
                    created_at=created_at)


def test_factories_make_distinct_cells_and_entries() -> None:
    cells = [make_cell(n) for n in range(300)]
    assert len({c.key for c in cells}) == len({c.id for c in cells}) == 300
    fps = [make_fingerprint(n) for n in range(3)]
    keys = {make_manifest(c, fp).entry_key for c in cells[:10] for fp in fps}
    assert len(keys) == 30
