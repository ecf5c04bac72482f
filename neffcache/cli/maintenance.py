"""Store maintenance: ``neffcache verify`` (a store or a restored tree), ``gc`` and ``repair``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from neffcache.cli._common import ask, counter, finish, human_bytes, progress
from neffcache.cli._options import ranged, shared, workers_option, yes_option
from neffcache.errors import EXIT_CODE_HELP

if TYPE_CHECKING:
    from neffcache.lifecycle import (
        CollectGarbageResult,
        RepairResult,
        VerifyLocalDirResult,
        VerifyStoreResult,
    )


@click.command("verify", epilog=EXIT_CODE_HELP)
@click.option("--quick", is_flag=True,
              help="Only check that every referenced blob exists (no download).")
@workers_option("VerifyStoreRequest", 8, "Parallel reads.")
@click.option("--local", "local", metavar="DIR", default=None, type=click.Path(file_okay=False),
              help="Instead of the store: re-hash the files restored into DIR against the "
                   "manifests restore kept there.")
@click.option("--quarantine", is_flag=True,
              help="Mark each damaged blob or pack under damaged/ in the store, so push, copy "
                   "and bundle import rewrite it instead of skipping it.")
@shared("trust", "store", "json")
def verify(as_json: bool, local: str | None, quick: bool, quarantine: bool, store: str | None,
           **params: Any) -> None:
    """Check that every manifest in the store decodes and every blob it references exists
    and streams to exactly its recorded size and sha256 (and, for a large file, to the
    per-part digests its manifest records, which restores verify it by). Packs are checked
    too: present, and each member's bytes matching its sha256.

    Blobs shared by several entries are checked once. Any problem (a manifest that does not
    decode or is hostile, part digests that do not match their blob, a missing, truncated or
    corrupt blob or pack) is listed and the command exits 4; a store that cannot be read
    exits 6. With --trusted-key an entry none of those keys signed is listed too (kind
    untrusted): what a restore trusting them would refuse.

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
    from neffcache.lifecycle import (
        VerifyLocalDirRequest,
        VerifyStoreRequest,
        verify_local_dir,
        verify_store,
    )

    result: VerifyStoreResult | VerifyLocalDirResult
    if local is not None:
        result = verify_local_dir(VerifyLocalDirRequest(local, **params))
    else:
        result = verify_store(VerifyStoreRequest(
            store=store, quick=quick, quarantine=quarantine,
            progress=counter("verify", "blobs", 50), **params))
    finish(result, as_json, lambda: _verify_text(result))


def _verify_text(result: VerifyStoreResult | VerifyLocalDirResult) -> str:
    """One line per problem (the count goes to stderr), or the one "ok" line."""
    from neffcache.lifecycle import VerifyStoreResult

    lines = [f"{p.kind}: {p.message}" for p in result.problems]
    if isinstance(result, VerifyStoreResult):
        what = ("exist" if result.quick
                else f"match their sha256 ({human_bytes(result.bytes_checked)})")
        if result.problems:
            progress(f"{len(result.problems)} problem(s) in {result.manifests} manifests, "
                     f"{result.blobs} blobs")
        else:
            lines.append(f"ok: {result.manifests} manifests decode, {result.blobs} blobs {what}")
        if result.temps:
            progress(f"warning: {len(result.temps)} stale temp file(s) of killed writers "
                     f"({human_bytes(sum(t.size for t in result.temps))}); neffcache gc "
                     "removes them")
    elif result.problems:
        progress(f"{len(result.problems)} problem(s) in {result.files} files of "
                 f"{result.entries} entries")
    else:
        lines.append(f"ok: {result.files} files of {result.entries} entries in "
                     f"{result.target} match their sha256 ({human_bytes(result.bytes_checked)})")
    return "\n".join(lines)


@click.command("gc", epilog=EXIT_CODE_HELP)
@click.option("--dry-run", is_flag=True, help="Only list what would be deleted or aborted.")
@yes_option("Delete")
@click.option("--grace", type=ranged("CollectGarbageRequest", "grace"),
              default=3600.0, show_default=True,
              metavar="SECONDS", help="Spare blobs named by a publish in progress (its note is "
              "renewed every 150 s) or by entries retired less than SECONDS ago; abort "
              "multipart uploads started more than SECONDS ago.")
@click.option("--force", is_flag=True,
              help="Accept a --grace below the 600 s floor (only when no publish, copy or "
                   "retire can be running).")
@click.option("--uploads", "uploads_only", is_flag=True,
              help="Only abort stale multipart uploads (S3); leave blobs and packs alone.")
@workers_option("CollectGarbageRequest", 16, "Parallel reads and deletes.")
@shared("store", "json")
def gc(as_json: bool, **params: Any) -> None:
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
    warns and goes on, gc --uploads fails (exit 6). On a local store, temp files a killed
    writer left (.tmp-<pid>-*, the PID gone or older than an hour) are removed.

    --json prints: manifests, blobs, referenced, delete, spared, stale_intents, unknown,
    packs, delete_packs, spared_packs, deleted, deleted_count, deleted_packs,
    kept_on_recheck, dry_run, store, uploads (null on a local store; else listed, abort,
    spared, unknown, aborted: lists of key, upload_id, initiated) and, when uploads could not
    be listed, uploads_error; temp_files, temp_files_removed. With --uploads: store, dry_run,
    uploads.

    \b
    Examples:
      neffcache gc --dry-run
      neffcache gc --yes --store s3://bucket/neff
      neffcache gc --yes --grace 7200 --json
      neffcache gc --uploads --yes --store s3://bucket/neff
    """
    from neffcache.lifecycle import CollectGarbageRequest, collect_garbage

    result = collect_garbage(CollectGarbageRequest(**params, confirm=_ask, notice=progress))
    finish(result, as_json, lambda: _gc_text(result))


def _ask(preview: CollectGarbageResult) -> bool:
    return ask(f"Delete or abort {preview.pending} in {preview.store}?",
               f"gc would delete or abort {preview.pending}",
               hint="neffcache gc --dry-run, then neffcache gc --yes")


def _gc_text(result: CollectGarbageResult) -> str:
    dry = "dry run: " if result.dry_run else ""
    if result.gc is None:
        return _uploads_text(result, dry)
    plan = result.gc.plan
    lines = [f"would delete {key}" for key in (*plan.delete, *plan.delete_packs)
             if result.dry_run]
    d = result.counts()
    lines.append(f"{dry}{d['manifests']} manifests reference "
                 f"{d['referenced']} blobs; {d['blobs']} blobs stored, {d['unreferenced']} "
                 f"unreferenced ({d['spared']} spared for a publish in progress); deleted "
                 f"{d['deleted']}; {d['packs']} packs stored, {d['unreferenced_packs']} "
                 f"unreferenced, deleted {d['deleted_packs']}")
    if result.temps:
        lines.append(f"{'would remove' if result.dry_run else 'removed'} "
                     f"{len(result.temps)} stale temp file(s)")
    if result.uploads is not None:
        lines.append(_uploads_text(result, dry))
    return "\n".join(lines)


def _uploads_text(result: CollectGarbageResult, dry: str) -> str:
    plan = result.uploads
    if plan is None:
        return f"{result.store}: a local store has no multipart uploads; nothing to abort"
    lines = [f"would abort the multipart upload of {u.key}" for u in plan.abort
             if result.dry_run]
    lines.append(f"{dry}{plan.listed} multipart upload(s) in "
                 f"progress, {len(plan.abort) + len(plan.spared)} started more than "
                 f"{result.grace:g} s ago ({len(plan.spared)} spared for a publish in progress); "
                 f"aborted {len(result.aborted)}")
    return "\n".join(lines)


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

    result = repair_store(RepairRequest(**params, confirm=_ask_repair))
    finish(result, as_json, lambda: _repair_text(result))


def _ask_repair(preview: RepairResult) -> bool:
    n = len(preview.planned)
    return ask(f"Rewrite {n} object(s) in {preview.store} from {preview.source}?",
               f"repair would rewrite {n} object(s)",
               hint="neffcache repair --dry-run, then neffcache repair --yes")


def _repair_text(result: RepairResult) -> str:
    refused = [f"refused {p.key}: {p.message}" for p in result.refused]
    if result.dry_run:
        lines = [f"would rewrite {i.key} ({i.kind}: {i.reason})" for i in result.planned]
        return "\n".join([*lines, *refused, f"dry run: {len(result.planned)} object(s) "
                                            f"to rewrite in {result.store} from {result.source}"])
    return "\n".join([*refused, f"{result.store}: {result.count('repaired')} "
            f"object(s) repaired from {result.source}, {result.count('good')} already good, "
            f"{result.count('unavailable')} without good bytes in the source; "
            f"{len(result.remaining)} problem(s) remain"])
