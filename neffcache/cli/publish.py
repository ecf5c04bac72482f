"""Publishing: ``neffcache push``, ``capture`` (its back-fill) and ``keys`` (what signs entries)."""

from __future__ import annotations

from typing import Any

import click

from neffcache.cli._common import finish, human_bytes, progress
from neffcache.cli._options import Group, ranged, shared, workers_option
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


@click.group("keys", cls=Group, epilog=EXIT_CODE_HELP)
def keys() -> None:
    """Signing keys for entries (Ed25519).

    Publishing (precompile, push, capture) signs each manifest with the key in
    --signing-key FILE (or NEFFCACHE_SIGNING_KEY_FILE); a restore given trusted public keys
    (--trusted-key, NEFFCACHE_TRUSTED_KEYS) refuses an entry that is unsigned or signed by another
    key (exit 4). Trust several keys at once to rotate: publish with the new one, then drop the
    old key once its entries are retired. Give instances that back-fill (`neffcache capture`) a
    key of their own, so a fleet can trust CI's key alone.
    """


@keys.command("generate", epilog=EXIT_CODE_HELP)
@click.option("--out", "out", metavar="FILE", required=True, type=click.Path(dir_okay=False),
              help="The private key file to create (mode 0600; never overwritten). Keep it "
                   "where only the publisher can read it (a CI secret).")
@click.option("--public-out", "public_out", metavar="FILE", default=None,
              type=click.Path(dir_okay=False),
              help="Also write the public key (one ed25519: line) to FILE.")
@shared("json")
def generate(out: str, public_out: str | None, as_json: bool) -> None:
    """Make a new Ed25519 signing key; print its public key and key id.

    --json prints: public_key, key_id, path.

    \b
    Examples:
      neffcache keys generate --out /secure/ci-signing.pem --public-out ci.pub
      neffcache keys generate --out instance.pem --json
    """
    from neffcache.keys import GenerateKeyRequest, generate_key

    result = generate_key(GenerateKeyRequest(out=out, public_out=public_out))
    finish(result, as_json, lambda: f"{result.public_key}\nkey id {result.key_id} "
                                    f"(private key in {result.path})")


@keys.command("show", epilog=EXIT_CODE_HELP)
@click.argument("path", metavar="FILE", type=click.Path(dir_okay=False))
@shared("json")
def show(path: str, as_json: bool) -> None:
    """Print the public key (and key id) of a private key file or a public key file.

    --json prints: public_key, key_id, path.

    \b
    Examples:
      neffcache keys show /secure/ci-signing.pem
      neffcache keys show ci.pub --json
    """
    from neffcache.keys import ShowKeyRequest, show_key

    result = show_key(ShowKeyRequest(path=path))
    finish(result, as_json, lambda: f"{result.public_key}\nkey id {result.key_id}")
