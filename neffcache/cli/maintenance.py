"""Store maintenance commands: ``neffcache verify`` (integrity, of a store or a restored tree) and
``neffcache gc`` (delete blobs and packs no manifest references, abort stale multipart uploads)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from neffcache.cli._common import (
    emit_json,
    human_bytes,
    json_option,
    progress,
    settings_from,
    store_option,
)
from neffcache.errors import EXIT_CODE_HELP, UnavailableError, UsageError


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
@click.option("--dry-run", is_flag=True, help="Only list what would be deleted or aborted.")
@click.option("--yes", "-y", is_flag=True,
              help="Delete without asking (required when stdin is not a terminal).")
@click.option("--grace", type=click.FloatRange(min=0), default=3600.0, show_default=True,
              metavar="SECONDS", help="Spare blobs named by a publish in progress (its note is "
              "renewed every 150 s) or by entries retired less than SECONDS ago; abort "
              "multipart uploads started more than SECONDS ago. At least 600 unless --force.")
@click.option("--force", is_flag=True,
              help="Accept a --grace below the 600 s floor (only when no publish, copy or "
                   "retire can be running).")
@click.option("--uploads", "uploads_only", is_flag=True,
              help="Only abort stale multipart uploads (S3); leave blobs and packs alone.")
@click.option("--workers", type=click.IntRange(1, 256), default=16, show_default=True,
              help="Parallel reads and deletes.")
@store_option
@json_option
def gc(dry_run: bool, yes: bool, grace: float, force: bool, uploads_only: bool, workers: int,
       store: str | None, as_json: bool) -> None:
    """Delete blobs and packs that no manifest references, and abort multipart uploads that
    killed publishes left behind.

    Manifests are never deleted. gc lists blobs first, then reads every manifest; a blob
    named by a publish in progress (its pending/ note, renewed every 150 s while the publish
    runs, is younger than --grace) is spared, and manifests and notes that appear while gc
    runs are read again before each batch of deletions, so a concurrent publish is safe.
    --grace below 600 s is refused (exit 2) unless --force: a shorter grace could outrun the
    renewal. Blobs and packs of entries retired less than --grace ago (`neffcache retire`)
    are spared too, so a restore that read a manifest just before it was retired still finds
    every blob. Unreferenced packs (small files stored together for restore speed; every
    member is also a blob) are deleted only when no publish is in progress. A manifest gc
    cannot read stops it (exit 4).

    On S3, incomplete multipart uploads of blobs and packs started more than --grace ago are
    aborted (their parts are billed until then), except those a publish in progress names;
    --uploads does only that. A local store has none. Listing them needs
    s3:ListBucketMultipartUploads (and aborting s3:AbortMultipartUpload): without it, plain gc
    warns and goes on, gc --uploads fails (exit 6).
    Without --yes it asks for confirmation on a terminal, and refuses otherwise.

    --json prints: manifests, blobs, referenced, delete, spared, stale_intents, unknown,
    packs, delete_packs, spared_packs, deleted, deleted_count, deleted_packs,
    kept_on_recheck, dry_run, store, uploads (null on a local store; else listed, abort,
    spared, unknown, aborted: lists of key, upload_id, initiated) and, when uploads could not
    be listed, uploads_error. With --uploads: store, dry_run, uploads.

    \b
    Examples:
      neffcache gc --dry-run
      neffcache gc --yes --store s3://bucket/neff
      neffcache gc --yes --grace 7200 --json
      neffcache gc --uploads --yes --store s3://bucket/neff
    """
    from neffcache.lifecycle import gc as gc_mod
    from neffcache.store import open_store

    gc_mod.check_grace(grace, force=force)
    s = open_store(settings_from(store).store_url)
    s.check()
    now = time.time()
    if uploads_only:
        _gc_uploads(s, dry_run=dry_run, yes=yes, now=now, grace=grace, workers=workers,
                    as_json=as_json)
        return
    plan, seen_m, seen_i = gc_mod.collect_gc(s, now=now, grace=grace, workers=workers)
    uploads_error: str | None = None
    try:
        found = gc_mod.collect_uploads(s, now=now, grace=grace, workers=workers)
    except UnavailableError as exc:
        found, uploads_error = None, str(exc)
        hint = f" (Hint: {exc.hint})" if exc.hint else ""
        progress(f"warning: multipart uploads not checked: {exc}{hint}")
    stale = len(found[0].abort) if found else 0
    doomed = len(plan.delete) + len(plan.delete_packs) + stale
    if not dry_run and (doomed or plan.stale_intents):
        _confirm(yes, f"{len(plan.delete)} blob(s), {len(plan.delete_packs)} pack(s) and "
                      f"{stale} multipart upload(s)", s.url)
    if dry_run:
        result = gc_mod.dry_run(plan)
    else:
        result = gc_mod.apply_gc(s, plan, (seen_m, seen_i), workers=workers)
    aborted = () if dry_run or not found else gc_mod.apply_uploads(s, *found, workers=workers)
    uploads = None if found is None else _uploads_json(found[0], aborted)
    if as_json:
        doc = dict(result.to_json(), store=s.url, uploads=uploads)
        if uploads_error is not None:
            doc["uploads_error"] = uploads_error
        emit_json(doc)
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
    if found is not None:
        _echo_uploads(found[0], aborted, grace, dry_run)


def _confirm(yes: bool, what: str, url: str) -> None:
    """Go on with --yes or a terminal's consent; refuse without a terminal."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise UsageError(f"gc would delete or abort {what}; refusing without --yes when stdin "
                         "is not a terminal",
                         hint="neffcache gc --dry-run, then neffcache gc --yes")
    if not click.confirm(f"Delete or abort {what} in {url}?", err=True):
        raise click.exceptions.Abort()


def _gc_uploads(s: Any, *, dry_run: bool, yes: bool, now: float, grace: float, workers: int,
                as_json: bool) -> None:
    """gc --uploads: only the stale multipart uploads."""
    from neffcache.lifecycle import gc as gc_mod

    found = gc_mod.collect_uploads(s, now=now, grace=grace, workers=workers)
    if found is None:
        if as_json:
            emit_json({"store": s.url, "dry_run": dry_run, "uploads": None})
        else:
            click.echo(f"{s.url}: a local store has no multipart uploads; nothing to abort")
        return
    plan, seen = found
    if not dry_run and plan.abort:
        _confirm(yes, f"{len(plan.abort)} multipart upload(s)", s.url)
    aborted = () if dry_run else gc_mod.apply_uploads(s, plan, seen, workers=workers)
    if as_json:
        emit_json({"store": s.url, "dry_run": dry_run, "uploads": _uploads_json(plan, aborted)})
        return
    _echo_uploads(plan, aborted, grace, dry_run)


def _uploads_json(plan: Any, aborted: tuple[Any, ...]) -> dict[str, Any]:
    from neffcache.lifecycle.gc import upload_json

    return dict(plan.to_json(), aborted=[upload_json(u) for u in aborted])


def _echo_uploads(plan: Any, aborted: tuple[Any, ...], grace: float, dry_run: bool) -> None:
    if dry_run:
        for u in plan.abort:
            click.echo(f"would abort the multipart upload of {u.key}")
    click.echo(f"{'dry run: ' if dry_run else ''}{plan.listed} multipart upload(s) in "
               f"progress, {len(plan.abort) + len(plan.spared)} started more than {grace:g} s "
               f"ago ({len(plan.spared)} spared for a publish in progress); aborted "
               f"{len(aborted)}")
