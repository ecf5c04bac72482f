"""``neffcache push``: publish the cache dirs of one warmed cell as an entry."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from neffcache.cli._common import (
    emit_json,
    human_bytes,
    index_option,
    json_option,
    python_option,
    record_entry_or_warn,
    settings_from,
    store_option,
)
from neffcache.errors import EXIT_CODE_HELP, MatrixError, UsageError


@click.command("push", epilog=EXIT_CODE_HELP)
@click.option("--cell-json", "cell_json", metavar="FILE", default=None,
              help="The cell as JSON (a cell's to_json; may carry a `backend` key); `-` reads "
                   "stdin.")
@click.option("--matrix", "matrix", metavar="MATRIX", default=None,
              type=click.Path(dir_okay=False), help="Matrix file that declares the cell.")
@click.option("--cell", "cell_id", metavar="ID", default=None,
              help="Cell id in --matrix, e.g. flux2-klein/compile/1024x1024/b1/tp1.")
@click.option("--root", "roots", multiple=True, required=True, metavar="NAME=DIR",
              help="A cache root and the directory holding it (repeatable), e.g. "
                   "neff=/tmp/neff_cache.")
@click.option("--backend", "backend_name", metavar="NAME", default=None,
              help="inductor or neuron [default: the matrix's, or the cell JSON's `backend`].")
@click.option("--compile-seconds", type=click.FloatRange(min=0), default=None, metavar="S",
              help="How long the warm-up took (recorded in the manifest).")
@click.option("--workers", type=click.IntRange(1, 64), default=8, show_default=True,
              help="Parallel uploads.")
@python_option
@store_option
@index_option
@json_option
def push(cell_json: str | None, matrix: str | None, cell_id: str | None,
         roots: tuple[str, ...], backend_name: str | None, compile_seconds: float | None,
         workers: int, python: str | None, store: str | None, index: str | None,
         as_json: bool) -> None:
    """Publish the files under each --root as the entry of one cell on this host's fingerprint.

    Every regular file under each root is hashed (locks, temp files, dotfiles and symlinks are
    skipped); only blobs the store does not hold are uploaded, each checked while streaming so
    a file that changes mid-upload is never stored under the wrong sha256. The manifest is
    written last and only if absent: the first writer of an entry wins, and a second push of
    the same cell and fingerprint leaves it unchanged (created: false). The entry is then
    recorded in the index; if that fails the store still holds it (`neffcache reindex`).

    --json prints: entry_key, cell_id, fingerprint_key, created, files, total_bytes,
    blobs_uploaded, blobs_skipped, bytes_uploaded, indexed.

    \b
    Examples:
      neffcache push --matrix matrix.toml --cell 'flux2-klein/compile/1024x1024/b1/tp1' \\
          --root neff=/tmp/neff_cache --root hlo=/tmp/neuron_hlo_cache --compile-seconds 812
      neffcache push --cell-json cell.json --backend inductor --root inductor=/tmp/ind --json
      neffcache push --matrix matrix.toml --cell 'flux2-klein/compile/768x1360/b1/tp1' \\
          --root neff=/var/cache/neffcache/neff --python /opt/venv/bin/python
    """
    from neffcache.backends import get_backend
    from neffcache.fingerprint import check_usable, collect_fingerprint
    from neffcache.precompile.publish import publish_entry
    from neffcache.store import open_store

    cell, default_backend = _load_cell(cell_json, matrix, cell_id)
    name = backend_name or default_backend
    if not name:
        raise UsageError("--backend: required with a --cell-json that has no `backend` key")
    backend = get_backend(name)
    root_map = _parse_roots(roots, backend)
    settings = settings_from(store, index, python)
    s = open_store(settings.store_url, create=True)
    s.check()
    fingerprint = collect_fingerprint(backend.name, os.environ, python=settings.python)
    check_usable(fingerprint)  # an unknown neuron target never matches: never publish under it
    result = publish_entry(s, cell, fingerprint, backend, root_map,
                           compile_seconds=compile_seconds, workers=workers)
    indexed = record_entry_or_warn(settings, result.manifest, s.url)
    doc: dict[str, Any] = dict(result.to_json(), indexed=indexed, store=s.url)
    if as_json:
        emit_json(doc)
        return
    verb = "published" if result.created else "already present, unchanged:"
    click.echo(f"{verb} entry {doc['entry_key']} for {doc['cell_id']} "
               f"[fingerprint {doc['fingerprint_key'][:12]}]")
    click.echo(f"  {doc['files']} files, {human_bytes(doc['total_bytes'])}; uploaded "
               f"{doc['blobs_uploaded']} blobs ({human_bytes(doc['bytes_uploaded'])}), "
               f"{doc['blobs_skipped']} already in the store")


def _load_cell(cell_json: str | None, matrix: str | None, cell_id: str | None
               ) -> tuple[Any, str | None]:
    from neffcache.matrix import Cell

    if cell_json and (matrix or cell_id):
        raise UsageError("give either --cell-json or --matrix with --cell, not both")
    if cell_json:
        try:
            text = sys.stdin.read() if cell_json == "-" else Path(cell_json).read_text("utf-8")
            data = json.loads(text)
        except OSError as exc:
            raise UsageError(f"{cell_json}: cannot read: {exc.strerror}") from None
        except ValueError as exc:
            raise UsageError(f"{cell_json}: not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise UsageError(f"{cell_json}: expected a JSON object (a cell)")
        data = data.get("cell", data)
        try:
            return Cell.from_json(data), data.get("backend")
        except MatrixError as exc:
            raise UsageError(f"{cell_json}: {exc}") from None
    if not (matrix and cell_id):
        raise UsageError("name the cell: --cell-json FILE, or --matrix MATRIX --cell ID")
    from neffcache.matrix_io import load_matrix

    m = load_matrix(matrix)
    for c in m.cells:
        if c.id == cell_id:
            return c, m.backend
    some = ", ".join(c.id for c in m.cells[:3])
    raise UsageError(f"--cell {cell_id!r}: no such cell in {matrix} (cells look like {some})")


def _parse_roots(specs: tuple[str, ...], backend: Any) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for spec in specs:
        name, sep, directory = spec.partition("=")
        if not sep or not name or not directory:
            raise UsageError(f"--root {spec!r}: expected NAME=DIR, e.g. "
                             f"{backend.root_names[0]}=/tmp/cache")
        backend.root(name)
        if name in out:
            raise UsageError(f"--root {name}: given twice")
        out[name] = Path(directory).expanduser()
    return out
