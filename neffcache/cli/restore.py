"""``neffcache restore``: parse, call ``neffcache.restore`` (restore or preview_restore), render."""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Mapping
from typing import Any

import click

from neffcache.cli._common import finish, human_bytes, jsonl_line, progress
from neffcache.cli._options import ranged, shared, workers_option
from neffcache.cli._process import raise_open_file_limit, without_cyclic_gc
from neffcache.errors import EXIT_CODE_HELP, UsageError, restore_exit_rules

RESTORE_HELP = """Fetch the entries of MATRIX built for this host's fingerprint into DIR.

For each cell (or each cell matching --cells) the entry key is derived from the cell and
this host's fingerprint and read from the store alone (no index needed). Every file is
streamed from its blob into a temp file beside its final path, checked against its size
and sha256 and renamed into place: nothing half-written is ever installed. Each new file
is fdatasynced (only ours, never the whole file system) before the state file vouches for it.
Files already present and valid are skipped, so a rerun fetches only what is missing.
When every requested cell is already in place — judged from the local copies of the
entries' manifests (DIR/.neffcache-entries/) and the state file, in one stat pass — the
store is not contacted at all.

The exit code follows the first rule that applies: {exit_rules}

Each run (also one that fails once the fingerprint is known, e.g. store unreachable)
writes a restore report: one small JSON
object `reports/<YYYY-MM-DD>/<host>-<UTC time>-<random>.json` in the store (create-only;
an IAM policy can allow PutObject on that prefix alone), or a file in --report-to DIR.
Restore never opens the index: `neffcache reindex`, `neffcache reports ingest` and
`neffcache serve` read reports into it. Writing the report gets at most 2 s (less when
the deadline is nearer); a failure is one warning line on stderr and never changes the
exit code. A report that could not be written is kept in DIR/.neffcache-entries/report-spool
(or $NEFFCACHE_REPORT_SPOOL; at most 100 files, the oldest dropped) and the next restore
sends it first, within the same 2 s.

--json prints one document: status, exit_code, fingerprint_key, cells_restored,
cells_missing, cells_incomplete, cells_failed, cells_elsewhere, entries,
files_fetched, files_skipped, files_failed, bytes_fetched, deadline_hit, seconds,
environment, conflicts, stale_temps_removed, files_unsynced (files in place whose sync to
disk the deadline cut short: still pending, vouched for only once synced),
fingerprint_python (the interpreter the fingerprint describes).
Progress goes to stderr when it is a terminal.

One restore per DIR: a restore holds DIR/.neffcache-entries/lock while it runs; a second
one into the same DIR waits for it (a line on stderr says so) — without --deadline for as
long as the first runs, with --deadline until then (exit 3). Temp files a killed restore
left (.neffcache-*.tmp) are removed and counted (stale_temps_removed). A symlink at a
cache root (DIR/neff, ...) or at DIR/.neffcache-entries is refused (exit 2), never
followed out of DIR.

When two entries want different bytes at one path (compile outputs are not always
byte-reproducible), the first cell in matrix order wins that path; `conflicts` counts
such paths and a warning on stderr names a few.

Cells are installed in the order the service needs them: those matching --first GLOB
(repeatable, in order) first, then the others in matrix order. Each cell is announced the
moment every file it needs is verified and renamed into place (cells already in place at
once): a line on stderr (`  ready  CELL  SECONDS s`; with --log-format jsonl a JSON object,
event "ready", elapsed: seconds since the process started), and a marker
DIR/.neffcache-entries/ready/<cell id, percent-encoded> holding the entry key, which a service
polls (`neffcache.cell_ready(DIR, CELL)` in Python). A restore removes the markers
of the cells it is about to change before it installs anything; an evicted, refused or
incomplete cell never has one. --json adds cells_ready: [{cell, seconds}] in announcement
order.

--dry-run prints the plan instead (--json: dry_run, status, exit_code, cells_missing,
cells_failed, cells_elsewhere, entries, files_to_fetch, files_present, blobs_to_fetch,
bytes_to_fetch, requests, pack_runs, blob_gets, blob_parts, packs, fetch — one record
per planned request: kind pack|blob|part, the pack or blob sha256, start, bytes — and
conflicts); its exit code is the one the restore would end with if every fetch
succeeded (3 some cells have no entry, 5, 4, 6 as above).

With --from-bundle the bundle's structure (and, with --expect-sha256, its digest) is checked
first; before anything is installed every member is hashed against its table of contents,
so a truncated, tampered or foreign bundle is exit 4 with nothing installed.

\b
Examples:
  neffcache restore matrix.toml --to /var/cache/neffcache
  eval "$(neffcache restore matrix.toml --to /var/cache/neffcache --print-env)"
  neffcache restore matrix.toml --to /mnt/cache --cells 'flux2-klein/*' --deadline 60
  NEFFCACHE_STORE=s3://bucket/neff neffcache restore matrix.toml --to /mnt/c --json
  neffcache restore matrix.toml --to /var/cache/neffcache --python /opt/venv/bin/python
  neffcache restore matrix.toml --to /mnt/c --report-to /var/log/neffcache/reports
  neffcache restore matrix.toml --from-bundle neff.bundle --to /var/cache/neffcache
  neffcache restore matrix.toml --to /var/cache/neffcache --dry-run --json
  neffcache restore matrix.toml --to /mnt/c --first '*/1024x1024/*' --log-format jsonl
""".replace("{exit_rules}", restore_exit_rules())


@click.command("restore", epilog=EXIT_CODE_HELP, help=RESTORE_HELP)
@click.argument("matrix", metavar="MATRIX", type=click.Path(dir_okay=False))
@click.option("--to", "to", required=True, metavar="DIR", type=click.Path(file_okay=False),
              help="Base directory: each cache root R is restored into DIR/R.")
@shared("cells")
@click.option("--first", "first", multiple=True, metavar="GLOB",
              help="Restore (and announce) the cells matching GLOB first (repeatable, in "
                   "order); the rest follow in matrix order.")
@shared("log_format")
@click.option("--deadline", type=ranged("RestoreRequest", "deadline"), metavar="SECONDS",
              default=None, help="Stop starting new work SECONDS after the process started; "
              "transfers in flight stop at their next chunk, what is done stays, the rest is "
              "reported (exit 3). Every store wait (connect, read, retries) is clipped to it: "
              "the command returns within SECONDS + 1 s whatever the server does.")
@click.option("--print-env", is_flag=True,
              help="Print `export VAR=...` lines for the backend's cache dirs on stdout, for "
                   "`eval` (also creates the lock/scratch dirs).")
@workers_option("RestoreRequest", None, "Parallel transfers [default: 2 per CPU for files, 4 per "
                "CPU for manifest reads and local checks; at most 16].", metavar="N")
@click.option("--from-bundle", "bundle", metavar="FILE", default=None,
              type=click.Path(dir_okay=False),
              help="Restore from a bundle file (`neffcache bundle export`) instead of the "
                   "store: no store, no index, no network.")
@click.option("--expect-sha256", "expect_sha256", metavar="DIGEST", default=None,
              help="With --from-bundle: refuse the bundle unless its digest is DIGEST.")
@click.option("--max-bytes", "bundle_max_bytes",
              type=ranged("RestoreRequest", "bundle_max_bytes"), default=None,
              metavar="BYTES",
              help="With --from-bundle: refuse (exit 4) a gzip bundle that decompresses to "
                   "more than BYTES [default: with --expect-sha256 what its table of "
                   "contents lists, else 16x its size + 16 MiB].")
@click.option("--mirror", "mirrors", multiple=True, metavar="URL",
              help="Another store (PATH, s3://..., bundle:FILE) read after --store, in order; "
                   "an object missing from one or failing verification, or a store that "
                   "cannot be reached, goes to the next. The N-th mirror (from 1) has its own "
                   "endpoint, keys or profile: NEFFCACHE_MIRROR_<N>_S3_ENDPOINT, "
                   "NEFFCACHE_MIRROR_<N>_AWS_* (e.g. _AWS_PROFILE), a bundle's cap "
                   "NEFFCACHE_MIRROR_<N>_BUNDLE_MAX_BYTES. Repeatable [env NEFFCACHE_MIRRORS "
                   "or config `mirrors`, space-separated].")
@shared("trust", "python")
@click.option("--report-to", "report_to", metavar="store|none|DIR", default=None,
              help="Where to write this run's restore report: `store` (one object under the "
                   "store's reports/ prefix), `none`, or a local directory "
                   "[env NEFFCACHE_REPORTS; default store].")
@shared("store")
@click.option("--index", "index", metavar="URL", default=None, hidden=True,
              help="Ignored (restore never opens the index); kept so old boot hooks still run.")
@click.option("--dry-run", is_flag=True,
              help="Only print the plan (see above). Reads manifests from the store; fetches "
                   "no blob, writes nothing, sends no report.")
@shared("json")
@without_cyclic_gc
def restore(as_json: bool, print_env: bool, dry_run: bool, index: str | None, log_format: str,
            **params: Any) -> None:
    started = _process_start()
    raise_open_file_limit()
    if print_env and as_json:
        raise UsageError("--print-env and --json both write to stdout; choose one "
                         "(the JSON report has an `environment` field)")
    if dry_run and (print_env or params["bundle"]):
        raise UsageError("--dry-run goes with a store, without --print-env or --from-bundle")
    if index is not None:
        progress("warning: --index is ignored: restore writes its report to the store "
                 "(see --report-to); neffcache reindex or serve reads reports into the index")
    from neffcache.restore import RestoreRequest, preview_restore
    from neffcache.restore import restore as restore_matrix

    jsonl = log_format == "jsonl"
    log = _Log(jsonl, started)
    bar = sys.stderr.isatty() and not print_env and not dry_run and not jsonl
    request = RestoreRequest(
        **params, started=started, notice=log.notice, on_cell_ready=log.ready,
        progress=log.update if bar else None, on_environment=_print_env if print_env else None)
    if dry_run:
        preview = preview_restore(request)
        finish(preview, as_json, lambda: _dry_run_text(preview.to_json()))
        return
    try:
        result = restore_matrix(request)
    finally:
        log.close()
    finish(result, as_json, lambda: _text(result.to_json(), print_env))


def _print_env(environment: Mapping[str, str]) -> None:
    """Flushed at once, before the store is contacted: the dirs are set even if it is down."""
    for var, value in sorted(environment.items()):
        sys.stdout.write(f"export {var}={shlex.quote(value)}\n")
    sys.stdout.flush()


_FETCH_LINES = {  # a planned request in the dry run's text, by its kind
    "pack": "  pack {pack:.12}  bytes {start}+{bytes}  {files} files",
    "blob": "  blob {sha256:.12}  {bytes} bytes  {paths[0]}",
    "part": "  blob {sha256:.12}  part {part}/{parts}  bytes {start}+{bytes}  {paths[0]}",
}


def _dry_run_text(doc: dict[str, Any]) -> str:
    lines = [f"dry run: would fetch {doc['files_to_fetch']} files "
             f"({human_bytes(doc['bytes_to_fetch'])}, {doc['blobs_to_fetch']} blobs) into "
             f"{doc['target']} in {doc['requests']} requests: {doc['pack_runs']} pack reads "
             f"from {len(doc['packs'])} packs, {doc['blob_gets']} blob GETs, "
             f"{doc['blob_parts']} ranged parts; {doc['files_present']} files already in "
             f"place [fingerprint {doc['fingerprint_key'][:12]}]"]
    lines += [_FETCH_LINES[u["kind"]].format_map(u) for u in doc["fetch"][:20]]
    if len(doc["fetch"]) > 20:
        lines.append(f"  ... {doc['requests'] - 20} more requests (--json lists them)")
    lines.extend(_details({**doc, "cells_incomplete": [], "files_failed": []}))
    return "\n".join(lines)


def _text(doc: dict[str, Any], print_env: bool) -> str | None:
    """The summary and what went wrong; with --print-env (stdout is for `eval`) on stderr."""
    if print_env:
        progress(_summary(doc))
        return None
    return "\n".join([_summary(doc), *_details(doc)])


def _summary(doc: dict[str, Any]) -> str:
    n = len(doc["cells_requested"])
    return (f"restored {len(doc['cells_restored'])}/{n} cells into {doc['target']}: fetched "
            f"{doc['files_fetched']} files ({human_bytes(doc['bytes_fetched'])}), "
            f"{doc['files_skipped']} already in place, in {doc['seconds']:.1f} s "
            f"[fingerprint {doc['fingerprint_key'][:12]}]")


def _details(doc: dict[str, Any]) -> list[str]:
    lines = [f"{label}: {', '.join(doc[key])}" for label, key in (
        ("missing", "cells_missing"), ("incomplete", "cells_incomplete")) if doc[key]]
    lines.extend(f"built elsewhere: {cid} (fingerprints {', '.join(f[:12] for f in fps)})"
                 for cid, fps in doc["cells_elsewhere"].items())
    lines.extend(f"failed: {f['cell']}: {f['error']}" for f in doc["cells_failed"])
    lines.extend(f"file failed: {f['error']}" for f in doc["files_failed"][:10])
    lines.extend(f"served by {url}: {n} object(s)" for url, n in doc.get("served_by", {}).items())
    return lines


def _process_start() -> float:
    """The process's start on the monotonic clock, so a --deadline counts start-up (Linux)."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        since_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        elapsed = time.clock_gettime(time.CLOCK_BOOTTIME) - since_boot
    except (OSError, ValueError, IndexError, AttributeError):
        return time.monotonic()
    return time.monotonic() - min(max(elapsed, 0.0), 60.0)


class _Log:
    """stderr's log (text or JSON lines), under a progress line (``update``, <= 10/s)."""

    def __init__(self, jsonl: bool, started: float) -> None:
        self.jsonl, self.started = jsonl, started
        self._last = 0.0
        self._shown = False

    def notice(self, message: str) -> None:
        self._write(jsonl_line("notice", None, message) if self.jsonl else message)

    def ready(self, cell_id: str) -> None:
        elapsed = time.monotonic() - self.started
        self._write(jsonl_line("ready", cell_id, "every file verified and in place",
                               elapsed=elapsed, phase="ready") if self.jsonl
                    else f"{'ready':>7}  {cell_id}  {elapsed:.2f} s")

    def update(self, done: int, total: int, nbytes: int) -> None:
        now = time.monotonic()
        if now - self._last < 0.1 and done < total:
            return
        self._last = now
        self._shown = True
        sys.stderr.write(f"\rrestore: {done}/{total} files, {human_bytes(nbytes)}\x1b[K")
        sys.stderr.flush()

    def close(self) -> None:
        if self._shown:
            self._shown = False
            sys.stderr.write("\n")
            sys.stderr.flush()

    def _write(self, line: str) -> None:
        self.close()
        progress(line)
