"""``neffcache repair``: rewrite a store's missing or damaged objects from good bytes."""

from __future__ import annotations

import click

from neffcache.cli._common import (
    confirm_or_refuse,
    finish,
    json_option,
    ranged,
    store_option,
    trust_options,
)
from neffcache.errors import EXIT_CODE_HELP
from neffcache.lifecycle import RepairResult

REPAIR_HELP = """Rewrite the store's missing or damaged objects from a source of good bytes.

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

Without --yes it asks for confirmation on a terminal, and refuses otherwise.

--json prints: store, source, dry_run, planned (key, kind, reason, size, sha256), repaired,
good, unavailable, outcomes (key, outcome), remaining (key, kind, error), refused (key,
kind, error), ok.

\b
Examples:
  neffcache repair --dry-run --from s3://neff-eu-west-1/neff --store s3://neff-us-east-1/neff
  neffcache repair --yes --from bundle:/opt/neff/boot.bundle --json
  neffcache repair --yes --from-dir /var/cache/neff
"""


@click.command("repair", help=REPAIR_HELP, epilog=EXIT_CODE_HELP)
@click.option("--from", "source", metavar="URL",
              help="A store with good bytes: PATH, s3://BUCKET/PREFIX or bundle:FILE.")
@click.option("--from-dir", "from_dir", metavar="DIR", type=click.Path(file_okay=False),
              help="A restored directory (neffcache restore --to DIR) as the source.")
@click.option("--dry-run", is_flag=True, help="Only list what would be rewritten.")
@click.option("--yes", "-y", is_flag=True,
              help="Rewrite without asking (required when stdin is not a terminal).")
@click.option("--workers", type=ranged("RepairRequest", "workers"), default=8, show_default=True,
              help="Parallel reads and writes.")
@trust_options
@store_option
@json_option
def repair(source: str | None, from_dir: str | None, dry_run: bool, yes: bool, workers: int,
           store: str | None, as_json: bool, trusted_keys: tuple[str, ...] = (),
           require_signatures: bool = False) -> None:
    from neffcache.lifecycle import RepairRequest, repair_store

    result = repair_store(RepairRequest(store=store, source=source, from_dir=from_dir,
                                        dry_run=dry_run, confirmed=yes, confirm=_ask,
                                        workers=workers, trusted_keys=trusted_keys,
                                        require_signatures=require_signatures))
    finish(result, as_json, lambda: _text(result))


def _ask(preview: RepairResult) -> bool:
    """repair without --yes: a terminal's consent, or a refusal."""
    return confirm_or_refuse(
        f"Rewrite {len(preview.planned)} object(s) in {preview.store} from {preview.source}?",
        f"repair would rewrite {len(preview.planned)} object(s); refusing without --yes when "
        "stdin is not a terminal", hint="neffcache repair --dry-run, then neffcache repair --yes")


def _text(result: RepairResult) -> str:
    if result.dry_run:
        lines = [f"would rewrite {i.key} ({i.kind}: {i.reason})" for i in result.planned]
        return "\n".join([*lines, *_refused(result), f"dry run: {len(result.planned)} object(s) "
                                  f"to rewrite in {result.store} from {result.source}"])
    return "\n".join([*_refused(result), f"{result.store}: {result.count('repaired')} "
            f"object(s) repaired from {result.source}, {result.count('good')} already good, "
            f"{result.count('unavailable')} without good bytes in the source; "
            f"{len(result.remaining)} problem(s) remain"])


def _refused(result: RepairResult) -> list[str]:
    return [f"refused {p.key}: {p.message}" for p in result.refused]
