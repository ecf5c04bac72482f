"""``neffcache push`` and ``neffcache capture`` (its back-fill): publish an entry, render."""

from __future__ import annotations

from typing import Any

import click

from neffcache.cli._common import finish, human_bytes, progress
from neffcache.cli._options import ranged, shared, workers_option
from neffcache.errors import EXIT_CODE_HELP


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
@click.option("--backend", "backend", metavar="NAME", default=None,
              help="inductor or neuron [default: the matrix's, or the cell JSON's `backend`].")
@click.option("--compile-seconds", type=ranged("PushRequest", "compile_seconds"),
              default=None, metavar="S",
              help="How long the warm-up took (recorded in the manifest).")
@workers_option("PushRequest", 32, "Parallel uploads (hashing runs on at most 2 threads per "
                "CPU).")
@shared("python", "signing_key", "allow_missing_packages", "store", "index", "json")
def push(as_json: bool, **params: Any) -> None:
    """Publish the files under each --root as the entry of one cell on this host's fingerprint.

    Every regular file under each root is hashed (locks, temp files, dotfiles and symlinks are
    skipped); only blobs the store does not hold are uploaded, each checked while streaming so
    a file that changes mid-upload is never stored under the wrong sha256. The manifest is
    written last and only if absent: the first writer of an entry wins, and a second push of
    the same cell and fingerprint leaves it unchanged (created: false). The entry is then
    recorded in the index; if that fails the store still holds it (`neffcache reindex`).

    --json prints: entry_key, cell_id, fingerprint_key, created, files, total_bytes,
    blobs_uploaded, blobs_skipped, bytes_uploaded, indexed, store.

    \b
    Examples:
      neffcache push --matrix matrix.toml --cell 'flux2-klein/compile/1024x1024/b1/tp1' \\
          --root neff=/tmp/neff_cache --root hlo=/tmp/neuron_hlo_cache --compile-seconds 812
      neffcache push --cell-json cell.json --backend inductor --root inductor=/tmp/ind --json
      neffcache push --matrix matrix.toml --cell 'flux2-klein/compile/768x1360/b1/tp1' \\
          --root neff=/var/cache/neffcache/neff --python /opt/venv/bin/python
    """
    from neffcache.precompile import PushRequest
    from neffcache.precompile import push as push_cell

    result = push_cell(PushRequest(**params, notice=progress))
    finish(result, as_json, lambda: render_push(result.to_json()))


def render_push(doc: dict[str, Any]) -> str:
    verb = "published" if doc["created"] else "already present, unchanged:"
    return (f"{verb} entry {doc['entry_key']} for {doc['cell_id']} "
            f"[fingerprint {doc['fingerprint_key'][:12]}]\n"
            f"  {doc['files']} files, {human_bytes(doc['total_bytes'])}; uploaded "
            f"{doc['blobs_uploaded']} blobs ({human_bytes(doc['bytes_uploaded'])}), "
            f"{doc['blobs_skipped']} already in the store")


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
@workers_option("CaptureRequest", 8, "Parallel hashing and uploads.")
@shared("python", "signing_key", "allow_missing_packages", "store", "index", "json")
def capture(as_json: bool, **params: Any) -> None:
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
    boot hook does). `neffcache warm` shows which cells compiled. --allow-missing-packages
    applies to a dry run too.

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
    from neffcache.precompile import CaptureRequest, capture_entry

    result = capture_entry(CaptureRequest(**params, notice=progress))
    finish(result, as_json, lambda: _summary(result.to_json()))


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
