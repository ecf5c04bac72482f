"""``neffcache gc``: delete blobs and packs that no manifest references."""

from __future__ import annotations

import sys
import time

import click

from neffcache.cli import EXIT_CODE_HELP
from neffcache.commands._common import emit_json, json_option, settings_from, store_option
from neffcache.errors import UsageError


@click.command("gc", epilog=EXIT_CODE_HELP)
@click.option("--dry-run", is_flag=True, help="Only list what would be deleted.")
@click.option("--yes", "-y", is_flag=True,
              help="Delete without asking (required when stdin is not a terminal).")
@click.option("--grace", type=click.FloatRange(min=0), default=3600.0, show_default=True,
              metavar="SECONDS", help="Spare blobs named by a publish in progress that "
              "started, or by entries retired, less than SECONDS ago.")
@click.option("--workers", type=click.IntRange(1, 256), default=16, show_default=True,
              help="Parallel reads and deletes.")
@store_option
@json_option
def gc(dry_run: bool, yes: bool, grace: float, workers: int, store: str | None,
       as_json: bool) -> None:
    """Delete blobs and packs that no manifest references.

    Manifests are never deleted. gc lists blobs first, then reads every manifest; a blob
    named by a publish in progress (its pending/ intent is younger than --grace) is spared,
    and manifests that appear while gc runs are read again before each batch of deletions,
    so a concurrent publish is safe. Blobs and packs of entries retired less than --grace
    ago (`neffcache retire`) are spared too, so a restore that read a manifest just before
    it was retired still finds every blob. Unreferenced packs (small files stored together for
    restore speed; every member is also a blob) are deleted only when no publish is in
    progress. A manifest gc cannot read stops it (exit 4).
    Without --yes it asks for confirmation on a terminal, and refuses otherwise.

    --json prints: manifests, blobs, referenced, delete, spared, stale_intents, unknown,
    packs, delete_packs, spared_packs, deleted, deleted_count, deleted_packs,
    kept_on_recheck, dry_run.

    \b
    Examples:
      neffcache gc --dry-run
      neffcache gc --yes --store s3://bucket/neff
      neffcache gc --yes --grace 7200 --json
    """
    from neffcache import gc as gc_mod
    from neffcache.store import open_store

    s = open_store(settings_from(store).store_url)
    s.check()
    plan, seen_m, seen_i = gc_mod.collect_gc(s, now=time.time(), grace=grace, workers=workers)
    doomed = len(plan.delete) + len(plan.delete_packs)
    if dry_run or not doomed and not plan.stale_intents:
        result = gc_mod.dry_run(plan) if dry_run else gc_mod.apply_gc(s, plan, (seen_m, seen_i))
    else:
        if not yes:
            if not sys.stdin.isatty():
                raise UsageError(f"gc would delete {len(plan.delete)} blob(s) and "
                                 f"{len(plan.delete_packs)} pack(s); refusing without "
                                 f"--yes when stdin is not a terminal",
                                 hint="neffcache gc --dry-run, then neffcache gc --yes")
            if not click.confirm(f"Delete {len(plan.delete)} unreferenced blob(s) and "
                                 f"{len(plan.delete_packs)} pack(s) from {s.url}?", err=True):
                raise click.exceptions.Abort()
        result = gc_mod.apply_gc(s, plan, (seen_m, seen_i), workers=workers)
    if as_json:
        emit_json(dict(result.to_json(), store=s.url))
        return
    if dry_run:
        for key in (*plan.delete, *plan.delete_packs):
            click.echo(f"would delete {key}")
    d = gc_mod.describe(result)
    click.echo(f"{'dry run: ' if dry_run else ''}{d['manifests']} manifests reference "
               f"{d['referenced']} blobs; {d['blobs']} blobs stored, {d['unreferenced']} "
               f"unreferenced ({d['spared']} spared for a publish in progress); deleted "
               f"{d['deleted']}; {d['packs']} packs stored, {d['unreferenced_packs']} "
               f"unreferenced, deleted {d['deleted_packs']}")
