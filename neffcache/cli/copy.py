"""``neffcache copy`` and ``neffcache bundle``: carry entries to another store, or in one file."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from neffcache.cli._common import counter, finish, human_bytes
from neffcache.cli._options import Group, ranged, shared, workers_option
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


FORMAT_HELP = """\b
A bundle is a tar file: first neffcache-bundle.json, a table of contents listing every other
member (manifests/, cells/, blobs/sha256/, packs/ keys of a store, each blob once) with its
size and sha256; the bundle's digest is the sha256 of that table, printed on export. Reading
a bundle never extracts it: members are read by offset and checked against the table.
"""


def _read_options(f: Any) -> Any:
    """--expect-sha256 and --max-bytes: how import and show take a bundle."""
    f = click.option("--max-bytes", "max_bytes", type=ranged("ImportBundleRequest", "max_bytes"),
                     default=None, metavar="BYTES",
                     help="Refuse (exit 4) a gzip bundle that decompresses to more than BYTES. "
                          "Without it an unauthenticated gzip bundle may expand to 16x its "
                          "size (+16 MiB); with --expect-sha256 to what its table of contents "
                          "lists.")(f)
    return click.option("--expect-sha256", "expect_sha256", metavar="DIGEST", default=None,
                        help="Refuse the bundle (exit 4) unless its digest, printed by `bundle "
                             "export`, is DIGEST.")(f)


@click.group("bundle", cls=Group, epilog=EXIT_CODE_HELP)
def bundle() -> None:
    """Carry entries to hosts and regions without the store: one self-describing file.

    `export` writes the entries of a matrix (or all) into a bundle; `import` publishes a
    bundle's entries into a store; `neffcache restore MATRIX --from-bundle FILE --to DIR`
    restores from a bundle with no store, no index and no network (an AMI bake, an
    air-gapped host). A truncated, tampered or foreign bundle is refused with exit 4 and
    nothing is installed.
    """


@bundle.command("export", epilog=FORMAT_HELP)
@click.argument("matrix", metavar="[MATRIX]", required=False, type=click.Path(dir_okay=False))
@click.option("-o", "--output", "output", required=True, metavar="FILE",
              type=click.Path(dir_okay=False), help="The bundle file to write.")
@click.option("--all", "all_entries", is_flag=True, help="Every entry of the store.")
@shared("matrix_cells", "fingerprint")
@click.option("--gzip", "gzip", is_flag=True,
              help="Compress with gzip (smaller; readers decompress it to a temp file first).")
@shared("store", "json")
def export(as_json: bool, **params: Any) -> None:
    """Write the entries of MATRIX (every fingerprint built for its cells, or only
    --fingerprint KEY; or --all) into one bundle FILE.

    Every blob is checked against its sha256 as it is written; the file is written under a
    temp name and renamed, so a failed export leaves nothing at FILE. Prints the bundle's
    digest: publish it, and check it on the other side with --expect-sha256.

    --json prints: file, sha256, entries (entry_key, cell_id, fingerprint_key, backend),
    members, bytes (the members' total), file_bytes.

    \b
    Examples:
      neffcache bundle export matrix.toml -o neff.bundle
      neffcache bundle export matrix.toml --fingerprint 3f2a9c41 --gzip -o neff.bundle.gz
      neffcache bundle export --all --store s3://bucket/neff -o all.bundle --json
    """
    from neffcache.lifecycle import ExportBundleRequest, export_bundle

    result = export_bundle(ExportBundleRequest(**params,
                                               progress=counter("export", "objects", 50)))
    toc = result.toc
    finish(result, as_json, lambda: f"wrote {result.file}: {len(toc.entries)} entries, "
           f"{len(toc.members)} objects, {human_bytes(result.file_bytes)}\nsha256 {result.sha256}")


@bundle.command("import", epilog=FORMAT_HELP)
@click.argument("file", metavar="FILE", type=click.Path(dir_okay=False))
@_read_options
@workers_option("ImportBundleRequest", 8, "Parallel uploads.")
@shared("trust", "store", "json")
def import_(as_json: bool, **params: Any) -> None:
    """Publish every entry of bundle FILE into the store.

    The whole bundle is checked first (structure, then every member against its sha256 in
    the table of contents; with --expect-sha256, the table itself): a truncated, tampered or
    foreign bundle is refused with exit 4 before anything is written. Then blobs and packs
    the store lacks are uploaded, each verified again while streaming, and manifests and
    pointers last; an entry the store already has stands unchanged (first writer wins).
    Rerunning an interrupted import uploads only what is missing. Each entry passes the trust
    gate as in `neffcache copy` (a refused one is listed, not imported: exit 4).

    --json prints: file, sha256, source, target, entries, entries_copied, entries_present,
    blobs_copied, blobs_skipped, bytes_copied, packs_copied, packs_skipped, refused.

    \b
    Examples:
      neffcache bundle import neff.bundle
      neffcache bundle import neff.bundle --store s3://bucket/neff --expect-sha256 5be93...
    """
    from neffcache.lifecycle import ImportBundleRequest, import_bundle

    result = import_bundle(ImportBundleRequest(**params))
    finish(result, as_json, lambda: copied_text(result.copy, "published", "uploaded", packs=False))


@bundle.command("show", epilog=FORMAT_HELP)
@click.argument("file", metavar="FILE", type=click.Path(dir_okay=False))
@_read_options
@click.option("--verify", "verify", is_flag=True, help="Also hash every member.")
@shared("json")
def show(as_json: bool, **params: Any) -> None:
    """List a bundle's entries and print its digest (its structure is always checked;
    --verify also hashes every member). A bad bundle exits 4.

    --json prints: file, sha256, created_at, producer, entries, members, bytes, verified.

    \b
    Examples:
      neffcache bundle show neff.bundle
      neffcache bundle show neff.bundle --verify --expect-sha256 5be93...
    """
    from neffcache.lifecycle import ShowBundleRequest, show_bundle

    result = show_bundle(ShowBundleRequest(**params))
    toc = result.toc
    finish(result, as_json, lambda: "\n".join([
        f"{result.file}: {len(toc.entries)} entries, {len(toc.members)} objects, "
        f"{human_bytes(toc.total_bytes)}, created {toc.created_at}",
        f"sha256 {result.sha256}" + (" (every member verified)" if result.verified else ""),
        *(f"  {e.entry_key[:12]}  {e.backend:8}  {e.fingerprint_key[:12]}  {e.cell_id}"
          for e in toc.entries)]),
        [] if toc.entries or as_json else ["warning: the bundle carries no entries"])
