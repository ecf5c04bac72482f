"""Store maintenance commands: ``neffcache verify`` (integrity, of a store or a restored tree) and
``neffcache gc`` (delete blobs and packs no manifest references)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from neffcache.cli._common import (
    emit_json,
    human_bytes,
    json_option,
    progress,
    settings_from,
    store_option,
)
from neffcache.errors import EXIT_CODE_HELP, UsageError


@click.command("verify", epilog=EXIT_CODE_HELP)
@click.option("--quick", is_flag=True,
              help="Only check that every referenced blob exists (no download).")
@click.option("--workers", type=click.IntRange(1, 256), default=8, show_default=True,
              help="Parallel reads.")
@click.option("--local", "local", metavar="DIR", default=None, type=click.Path(file_okay=False),
              help="Instead of the store: re-hash the files restored into DIR against the "
                   "manifests restore kept there.")
@store_option
@json_option
def verify(quick: bool, workers: int, local: str | None, store: str | None,
           as_json: bool) -> None:
    """Check that every manifest in the store decodes and every blob it references exists
    and streams to exactly its recorded size and sha256 (and, for a large file, to the
    per-part digests its manifest records, which restores verify it by). Packs are checked
    too: present, and each member's bytes matching its sha256.

    Blobs shared by several entries are checked once. Any problem (a manifest that does not
    decode or is hostile, part digests that do not match their blob, a missing, truncated or
    corrupt blob or pack) is listed and the command exits 4; a store that cannot be read
    exits 6.

    --json prints: ok, manifests, blobs, packs, bytes_checked, quick, problems (key, kind,
    error), problem_count, seconds.

    With --local DIR it checks a restored directory instead, with no store: every file of
    every entry restored there (DIR/.neffcache-entries/) is re-hashed against its manifest,
    which finds damage a restore's stat-based "already in place" check cannot (a flipped bit
    keeps size and mtime). A damaged file is listed (kind: missing, type, size, sha256, mode,
    manifest), forgotten by the state file so the next `neffcache restore` fetches it again,
    and the command exits 4. --json prints: ok, target, entries, files, bytes_checked,
    problems (path, kind, error), problem_count, seconds.

    \b
    Examples:
      neffcache verify
      neffcache verify --quick --store s3://bucket/neff
      neffcache verify --json | jq '.problems[]'
      neffcache verify --local /var/cache/neffcache
    """
    if local is not None:
        _verify_local(Path(local), workers, as_json)
        return
    from neffcache.lifecycle.verify import verify_store
    from neffcache.store import open_store

    s = open_store(settings_from(store).store_url)
    s.check()
    tty = sys.stderr.isatty()

    def show(done: int, total: int) -> None:
        if tty and (done == total or done % 50 == 0):
            sys.stderr.write(f"\rverify: {done}/{total} blobs\x1b[K" + ("\n" if done == total
                                                                           else ""))
            sys.stderr.flush()

    report = verify_store(s, quick=quick, workers=workers, progress=show)
    if as_json:
        emit_json(report.to_json())
    else:
        what = "exist" if quick else f"match their sha256 ({human_bytes(report.bytes_checked)})"
        if report.problems:
            for p in report.problems:
                click.echo(f"{p.kind}: {p.message}")
            progress(f"{len(report.problems)} problem(s) in {report.manifests} manifests, "
                     f"{report.blobs} blobs")
        else:
            click.echo(f"ok: {report.manifests} manifests decode, {report.blobs} blobs {what}")
    err = report.error()
    if err is not None:
        raise err


def _verify_local(target: Path, workers: int, as_json: bool) -> None:
    from neffcache.lifecycle.verify_local import verify_local

    report = verify_local(target, workers=min(workers, 8))
    if as_json:
        emit_json(report.to_json())
    elif report.problems:
        for p in report.problems:
            click.echo(f"{p.kind}: {p.message}")
        progress(f"{len(report.problems)} problem(s) in {report.files} files of "
                 f"{report.entries} entries")
    else:
        click.echo(f"ok: {report.files} files of {report.entries} entries in {report.target} "
                   f"match their sha256 ({human_bytes(report.bytes_checked)})")
    err = report.error()
    if err is not None:
        raise err


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
    from neffcache.lifecycle import gc as gc_mod
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
