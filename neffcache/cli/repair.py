"""``neffcache repair``: rewrite a store's missing or damaged objects from good bytes."""

from __future__ import annotations

from typing import Any

import click

from neffcache.cli._common import ask, finish
from neffcache.cli._options import shared, workers_option, yes_option
from neffcache.errors import EXIT_CODE_HELP
from neffcache.lifecycle import RepairResult


@click.command("repair", epilog=EXIT_CODE_HELP)
@click.option("--from", "source", metavar="URL",
              help="A store with good bytes: PATH, s3://BUCKET/PREFIX or bundle:FILE.")
@click.option("--from-dir", "from_dir", metavar="DIR", type=click.Path(file_okay=False),
              help="A restored directory (neffcache restore --to DIR) as the source.")
@click.option("--dry-run", is_flag=True, help="Only list what would be rewritten.")
@yes_option("Rewrite")
@workers_option("RepairRequest", 8, "Parallel reads and writes.")
@shared("trust", "store", "json")
def repair(as_json: bool, **params: Any) -> None:
    """Rewrite the store's missing or damaged objects from a source of good bytes.

    Verifies the store (every manifest, blob, pack and large-file part, as `neffcache verify`),
    also counts a manifest a cell pointer names but the store lacks, and plans one rewrite per bad
    object. The source is another store or a bundle (--from STORE, --from bundle:FILE) or a
    restored directory whose files verify against its manifest copies (--from-dir DIR). A source
    store has its own endpoint, keys or profile: NEFFCACHE_FROM_S3_ENDPOINT, NEFFCACHE_FROM_AWS_*
    (e.g. NEFFCACHE_FROM_AWS_PROFILE), as for `neffcache copy`. A bundle source is refused
    (exit 4) when one member does not match its table of contents (as `bundle show --verify`),
    and a gzip one is capped as `bundle import` caps it (NEFFCACHE_FROM_BUNDLE_MAX_BYTES). An object
    is rewritten only when it is still bad right before the write, and only with bytes whose size
    and sha256 match the manifest: a good object is never overwritten. A manifest is replaced only
    by one that passes the trust gate: the digest its publisher pinned in the cell pointer, and a
    trusted key's signature when keys are configured (--trusted-key, NEFFCACHE_TRUSTED_KEYS);
    without keys, a manifest with no pin is unrepairable from any source (listed as refused,
    nothing written). The store is verified once; what --dry-run lists is what the run rewrites,
    and each rewrite is checked as it is made. Exit 0 when nothing remains bad, 4 otherwise.

    --json prints: store, source, dry_run, planned (key, kind, reason, size, sha256), repaired,
    good, unavailable, outcomes (key, outcome), remaining (key, kind, error), refused (key,
    kind, error), ok.

    \b
    Examples:
      neffcache repair --dry-run --from s3://neff-eu-west-1/neff --store s3://neff-us-east-1/neff
      neffcache repair --yes --from bundle:/opt/neff/boot.bundle --json
      neffcache repair --yes --from-dir /var/cache/neff
    """
    from neffcache.lifecycle import RepairRequest, repair_store

    result = repair_store(RepairRequest(**params, confirm=_ask))
    finish(result, as_json, lambda: _text(result))


def _ask(preview: RepairResult) -> bool:
    n = len(preview.planned)
    return ask(f"Rewrite {n} object(s) in {preview.store} from {preview.source}?",
               f"repair would rewrite {n} object(s)",
               hint="neffcache repair --dry-run, then neffcache repair --yes")


def _text(result: RepairResult) -> str:
    refused = [f"refused {p.key}: {p.message}" for p in result.refused]
    if result.dry_run:
        lines = [f"would rewrite {i.key} ({i.kind}: {i.reason})" for i in result.planned]
        return "\n".join([*lines, *refused, f"dry run: {len(result.planned)} object(s) "
                                            f"to rewrite in {result.store} from {result.source}"])
    return "\n".join([*refused, f"{result.store}: {result.count('repaired')} "
            f"object(s) repaired from {result.source}, {result.count('good')} already good, "
            f"{result.count('unavailable')} without good bytes in the source; "
            f"{len(result.remaining)} problem(s) remain"])
