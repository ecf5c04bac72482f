"""``neffcache copy``: copy entries between stores, blobs once, verified, resumable."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from neffcache.cli._common import counter, finish, human_bytes
from neffcache.cli._options import shared, workers_option
from neffcache.errors import EXIT_CODE_HELP

if TYPE_CHECKING:
    from neffcache.lifecycle import CopyEntriesResult


@click.command("copy", epilog=EXIT_CODE_HELP)
@click.argument("matrix", metavar="[MATRIX]", required=False, type=click.Path(dir_okay=False))
@click.option("--from", "source", required=True, metavar="URL",
              help="Source store: PATH, file://PATH or s3://BUCKET/PREFIX.")
@click.option("--to", "target", required=True, metavar="URL",
              help="Target store: PATH, file://PATH or s3://BUCKET/PREFIX.")
@click.option("--from-profile", "source_profile", metavar="NAME",
              help="AWS profile of the source store (else NEFFCACHE_FROM_AWS_* or AWS_*).")
@click.option("--to-profile", "target_profile", metavar="NAME",
              help="AWS profile of the target store (else NEFFCACHE_TO_AWS_* or AWS_*).")
@click.option("--all", "all_entries", is_flag=True, help="Every entry of the source store.")
@shared("matrix_cells", "fingerprint")
@workers_option("CopyEntriesRequest", 8, "Parallel transfers.")
@shared("trust", "json")
def copy(as_json: bool, **params: Any) -> None:
    """Copy entries from one store to another: another region, a local mirror.

    Selects the entries built for the cells of MATRIX (every fingerprint, or those named with
    --fingerprint), or every entry with --all. Each blob and pack the target lacks is streamed
    from the source and checked against its size and sha256 on the way (a mismatch is exit 4
    and nothing of it is kept); each is copied once, however many entries share it. Manifests
    and cell pointers are written last, first writer wins, so an entry appears in the target
    only when everything it references is there. A copy that is interrupted can simply be run
    again: what the target already holds is skipped, nothing is copied twice. A publish-style
    pending/ note protects the copied blobs from a concurrent `neffcache gc` on the target.

    Two S3 stores with their own endpoint, region or keys: each side reads AWS_* as usual,
    overridden by NEFFCACHE_FROM_AWS_* / NEFFCACHE_TO_AWS_* (e.g. NEFFCACHE_TO_AWS_REGION),
    NEFFCACHE_FROM_S3_ENDPOINT / NEFFCACHE_TO_S3_ENDPOINT, and --from-profile / --to-profile.

    Every entry the target lacks passes the trust gate first (neffcache.trust): with trusted
    keys configured it must be signed by one of them, and where the target's cell pointer
    already names it (its manifest lost or damaged) it must match the digest pinned there;
    a refused entry is listed, nothing of it is written, and the copy exits 4.

    --json prints: source, target, entries, entries_copied, entries_present, blobs_copied,
    blobs_skipped, bytes_copied, packs_copied, packs_skipped, refused (entry_key, error).

    \b
    Examples:
      neffcache copy matrix.toml --from s3://neff-us-east-1/neff --to s3://neff-eu-west-1/neff
      neffcache copy --all --from s3://bucket/neff --to /srv/neff-mirror --json
      neffcache copy matrix.toml --fingerprint 3f2a9c41 --from /srv/a --to s3://bucket/neff
      neffcache copy --all --from s3://a/neff --to s3://b/neff --from-profile us --to-profile eu
    """
    from neffcache.lifecycle import CopyEntriesRequest, copy_entries

    result = copy_entries(CopyEntriesRequest(**params, progress=counter("copy", "blobs")))
    finish(result, as_json, lambda: copied_text(result, "copied", "copied", packs=True),
           [] if result.entries else ["warning: no entries selected"])


def copied_text(c: CopyEntriesResult, entries: str, blobs: str, packs: bool) -> str:
    """What copy (or bundle import) wrote: refused entries, then the counts."""
    tail = (f"; packs: {c.packs_copied} copied, {c.packs_skipped} already there"
            if packs else "")
    return "\n".join([
        *(f"refused {k}: {why}" for k, why in c.refused),
        f"{len(c.entries)} entries: {c.entries_copied} {entries}, {c.entries_present} already "
        f"in {c.target}; blobs: {c.blobs_copied} {blobs} ({human_bytes(c.bytes_copied)}), "
        f"{c.blobs_skipped} already there{tail}"])
