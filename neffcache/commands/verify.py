"""``neffcache verify``: check the store's integrity (manifests decode, blobs match)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from neffcache.cli import EXIT_CODE_HELP
from neffcache.commands._common import (
    emit_json,
    human_bytes,
    json_option,
    progress,
    settings_from,
    store_option,
)


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
    from neffcache.store import open_store
    from neffcache.verify import verify_store

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
    from neffcache.verify_local import verify_local

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
