"""``neffcache prune``: parse, call ``neffcache.restore.prune``, render."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from neffcache.cli._common import ask, finish, human_bytes
from neffcache.cli._options import shared, yes_option
from neffcache.errors import EXIT_CODE_HELP

if TYPE_CHECKING:
    from neffcache.restore import PruneResult


@click.command("prune", epilog=EXIT_CODE_HELP)
@click.argument("to", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--matrix", "matrix", required=True, metavar="MATRIX",
              type=click.Path(dir_okay=False), help="The matrix whose entries stay.")
@click.option("--dry-run", is_flag=True, help="Only print what would be removed.")
@yes_option("Remove")
@shared("python", "json")
def prune(as_json: bool, **params: Any) -> None:
    """Remove from DIR the entries MATRIX and this host's fingerprint no longer need.

    A persistent restore destination keeps every entry ever restored into it: restoring
    fingerprint A, then B (a new SDK, other compiler flags) leaves A's files beside B's. An
    entry is kept when it is the entry of a cell of MATRIX for this host's fingerprint (read
    with --python, as restore reads it; an unknown neuron target is refused, exit 5, as restore
    refuses it); every other manifest copy in DIR/.neffcache-entries is
    pruned: its files leave the cache roots (a file a kept entry also wants stays; a file
    changed since its restore, or behind a symlink, is left alone and counted as skipped),
    directories left empty go, the state file stops vouching for the removed paths, and the
    copy goes last (an interrupted prune is safe to rerun).

    Plan first: --dry-run prints what would go, and without --yes a terminal is asked. prune
    holds DIR's restore lock while it removes anything: while a restore runs into DIR it
    refuses (exit 1) and touches nothing.

    --json prints: target, fingerprint_key, dry_run, kept, pruned (entry_key, cell_id,
    fingerprint_key, files, bytes), files_to_remove, bytes_to_remove, files_shared, unreadable,
    removed, bytes_removed, skipped.

    \b
    Examples:
      neffcache prune /var/cache/neffcache --matrix matrix.toml --dry-run
      neffcache prune /var/cache/neffcache --matrix matrix.toml --yes --json
      neffcache prune /mnt/cache --matrix matrix.toml --python /opt/venv/bin/python --yes
    """
    from neffcache.restore import PruneRequest
    from neffcache.restore import prune as call

    result = call(PruneRequest(**params, confirm=_ask))
    finish(result, as_json, lambda: _text(result))


def _ask(preview: PruneResult) -> bool:
    return ask(f"Remove {len(preview.pruned)} entry(ies), {len(preview.remove)} file(s) "
               f"({human_bytes(preview.bytes_to_remove)}) from {preview.target}?",
               f"prune would remove {len(preview.pruned)} entry(ies) and "
               f"{len(preview.remove)} file(s)",
               f"neffcache prune {preview.target} --matrix MATRIX --yes (or --dry-run to look)")


def _text(r: PruneResult) -> str:
    lines = [f"{'would remove' if r.dry_run else 'pruned'} {len(r.pruned)} entry(ies) from "
             f"{r.target}; kept {len(r.kept)} for fingerprint {r.fingerprint_key[:12]}"]
    for p in r.pruned:
        lines.append(f"  {p.cell_id}  {p.fingerprint_key[:12]}  {p.files} file(s), "
                     f"{human_bytes(p.bytes)}")
    if r.dry_run:
        lines.append(f"files: {len(r.remove)} to remove ({human_bytes(r.bytes_to_remove)}), "
                     f"{r.shared} shared with kept entries stay")
    else:
        lines.append(f"files: {r.removed} removed ({human_bytes(r.bytes_removed)}), "
                     f"{r.shared} shared with kept entries kept, {r.skipped} skipped (changed "
                     "or gone)")
    if r.unreadable:
        lines.append(f"left alone: {len(r.unreadable)} manifest copy(ies) that do not read "
                     "as this backend's")
    return "\n".join(lines)
