"""``neffcache capture MATRIX --cache DIR``: back-fill what an instance compiled at run time
as the entry of the cell it served (see neffcache.precompile.backfill)."""

from __future__ import annotations

import os
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
from neffcache.errors import EXIT_CODE_HELP, UsageError


@click.command("capture", epilog=EXIT_CODE_HELP)
@click.argument("matrix", metavar="MATRIX", type=click.Path(dir_okay=False))
@click.option("--cache", "cache", required=True, metavar="DIR",
              type=click.Path(file_okay=False),
              help="The restored cache directory the service compiled into (each cache root R "
                   "is DIR/R).")
@click.option("--cell", "cell_id", metavar="ID", default=None,
              help="The cell the runtime-compiled files belong to [default: the only cell of "
                   "MATRIX without an entry for this fingerprint].")
@click.option("--dry-run", is_flag=True, help="Say what would be published; upload nothing.")
@click.option("--workers", type=click.IntRange(1, 64), default=8, show_default=True,
              help="Parallel hashing and uploads.")
@python_option
@store_option
@index_option
@json_option
def capture(matrix: str, cache: str, cell_id: str | None, dry_run: bool, workers: int,
            python: str | None, store: str | None, index: str | None, as_json: bool) -> None:
    """Upload the files an instance compiled at run time, as the entry of one cell.

    A file in DIR's cache roots is runtime-compiled when no entry of MATRIX for this host's
    fingerprint lists it, i.e. `neffcache restore` did not put it there. Locks, `.tmp` files
    and dotfiles (restore's state file too) are never captured.

    Attribution: the runtime-compiled files become the entry of ONE cell that has no entry
    for this fingerprint yet: the one named with --cell, or else the only such cell of
    MATRIX. Restore then fetches that entry like any other, so the next instance boots warm.
    Entries are immutable and the first writer wins: when the cell already has an entry
    (say, another instance back-filled it first) nothing is published and the files stay
    local. Several cells without an entry and no --cell is a usage error (exit 2), since
    files cannot be told apart by cell. A back-filled entry holds only what was new on top
    of the restored entries, so restore it together with them (the whole matrix, as the
    boot hook does). `neffcache warm` shows which cells compiled.

    --json prints: action (publish, exists, nothing), cell_id, entry_key, new_files,
    new_bytes, restored_files, reason, fingerprint_key, and when published: created,
    files, total_bytes, blobs_uploaded, bytes_uploaded, indexed.

    \b
    Examples:
      neffcache capture matrix.toml --cache /var/cache/neffcache --dry-run
      neffcache capture matrix.toml --cache /var/cache/neffcache \\
          --cell 'flux2-klein/compile/768x1360/b1/tp1'
      NEFFCACHE_STORE=s3://bucket/neff neffcache capture matrix.toml --cache /mnt/c --json
      neffcache capture matrix.toml --cache /var/cache/neffcache --python /opt/venv/bin/python
    """
    from neffcache.backends import get_backend, root_dirs
    from neffcache.fingerprint import check_usable, collect_fingerprint
    from neffcache.matrix_io import load_matrix
    from neffcache.precompile.backfill import apply_backfill, plan_backfill, read_entries
    from neffcache.precompile.capture import scan_roots
    from neffcache.store import open_store

    m = load_matrix(matrix)
    backend = get_backend(m.backend)
    target = Path(cache).expanduser().absolute()
    dirs = root_dirs(backend, str(target))
    if not any(Path(d).is_dir() for d in dirs.values()):
        raise UsageError(f"--cache {target}: no cache root in it ({', '.join(dirs.values())})")
    settings = settings_from(store, index, python)
    fingerprint = collect_fingerprint(backend.name, os.environ, python=settings.python)
    check_usable(fingerprint)
    s = open_store(settings.store_url, create=True)
    s.check()
    entries = read_entries(s, m.cells, fingerprint, backend)
    present = scan_roots(backend, {k: v for k, v in dirs.items() if Path(v).is_dir()})
    plan = plan_backfill(present, m.cells, fingerprint, entries, cell_id)
    doc = dict(plan.to_json(), fingerprint_key=fingerprint.key, store=s.url, dry_run=dry_run)
    if not dry_run:
        result = apply_backfill(s, plan, backend, fingerprint, dirs, workers=workers)
        if result is not None:
            doc.update({k: v for k, v in result.to_json().items()
                        if k in ("created", "files", "total_bytes", "blobs_uploaded",
                                 "bytes_uploaded")})
            doc["indexed"] = record_entry_or_warn(settings, result.manifest, s.url)
    if as_json:
        emit_json(doc)
        return
    click.echo(_summary(doc))


def _summary(doc: dict[str, Any]) -> str:
    head = (f"{doc['new_files']} runtime-compiled file(s) ({human_bytes(doc['new_bytes'])}), "
            f"{doc['restored_files']} from restored entries")
    if doc["action"] != "publish":
        return f"{head}: nothing published: {doc['reason']}"
    if doc["dry_run"]:
        return f"{head}: would publish entry {doc['entry_key']} for {doc['cell_id']}"
    verb = "published" if doc.get("created") else "already present (another writer was first):"
    return (f"{head}: {verb} entry {doc['entry_key']} for {doc['cell_id']} "
            f"[fingerprint {str(doc['fingerprint_key'])[:12]}]")
