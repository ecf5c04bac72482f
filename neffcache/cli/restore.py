"""``neffcache restore``: fetch a matrix's entries for this host's fingerprint into cache dirs."""

from __future__ import annotations

import os
import shlex
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from neffcache.cli._common import (
    emit_json,
    human_bytes,
    json_option,
    progress,
    python_option,
    settings_from,
    store_option,
)
from neffcache.cli._process import tuned_for_restore
from neffcache.config import Settings
from neffcache.errors import (
    EXIT_CODE_HELP,
    DeadlineExceededError,
    NeffcacheError,
    UnavailableError,
    UsageError,
    exit_code_for,
)

# A boot must never wait long for a dashboard: the report gets this long, then is dropped.
REPORT_TIMEOUT = 2.0
LATE_REPORT_TIMEOUT = 0.2  # ... and this long once the deadline has passed
# How long after the deadline the restore is waited for (its workers get thread_pool.GRACE).
OVERRUN = 0.3


@click.command("restore", epilog=EXIT_CODE_HELP)
@click.argument("matrix", metavar="MATRIX", type=click.Path(dir_okay=False))
@click.option("--to", "to", required=True, metavar="DIR", type=click.Path(file_okay=False),
              help="Base directory: each cache root R is restored into DIR/R.")
@click.option("--cells", "patterns", multiple=True, metavar="GLOB",
              help="Only cells whose id matches GLOB (repeatable), e.g. 'flux2-klein/*/1024x*'.")
@click.option("--deadline", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              default=None, help="Stop starting new work SECONDS after the process started; "
              "transfers in flight stop at their next chunk, what is done stays, the rest is "
              "reported (exit 3). Every store wait (connect, read, retries) is clipped to it: "
              "the command returns within SECONDS + 1 s whatever the server does.")
@click.option("--print-env", is_flag=True,
              help="Print `export VAR=...` lines for the backend's cache dirs on stdout, for "
                   "`eval` (also creates the lock/scratch dirs).")
@click.option("--workers", type=click.IntRange(1, 256), default=None, metavar="N",
              help="Parallel transfers [default: 4 per CPU, at most 16].")
@click.option("--from-bundle", "bundle", metavar="FILE", default=None,
              type=click.Path(dir_okay=False),
              help="Restore from a bundle file (`neffcache bundle export`) instead of the "
                   "store: no store, no index, no network.")
@click.option("--expect-sha256", "expect", metavar="DIGEST", default=None,
              help="With --from-bundle: refuse the bundle (exit 4) unless its digest is DIGEST.")
@python_option
@click.option("--report-to", "report_to", metavar="store|none|DIR", default=None,
              help="Where to write this run's restore report: `store` (one object under the "
                   "store's reports/ prefix), `none`, or a local directory "
                   "[env NEFFCACHE_REPORTS; default store].")
@store_option
@click.option("--index", "index", metavar="URL", default=None, hidden=True,
              help="Ignored (restore never opens the index); kept so old boot hooks still run.")
@click.option("--dry-run", is_flag=True,
              help="Only print the plan: what would be fetched (files, bytes, which packs and "
                   "blobs, how many requests) and what is already in place. Reads manifests "
                   "from the store; fetches no blob, writes nothing, sends no report.")
@json_option
@tuned_for_restore
def restore(matrix: str, to: str, patterns: tuple[str, ...], deadline: float | None,
            print_env: bool, workers: int | None, bundle: str | None, expect: str | None,
            python: str | None, report_to: str | None, store: str | None,
            index: str | None, dry_run: bool, as_json: bool) -> None:
    """Fetch the entries of MATRIX built for this host's fingerprint into DIR.

    For each cell (or each cell matching --cells) the entry key is derived from the cell and
    this host's fingerprint and read from the store alone (no index needed). Every file is
    streamed from its blob into a temp file beside its final path, checked against its size
    and sha256 and renamed into place: nothing half-written is ever installed. One syncfs at
    the end puts everything on disk before the state file vouches for it.
    Files already present and valid are skipped, so a rerun fetches only what is missing.
    When every requested cell is already in place — judged from the local copies of the
    entries' manifests (DIR/.neffcache-entries/) and the state file, in one stat pass — the
    store is not contacted at all.

    The exit code follows the first rule that applies: 4 a manifest was rejected or a blob
    was missing, corrupt or truncated (that file is never installed); 1 a file could not be
    written locally; 6 the store could not be reached; 3 the deadline stopped the restore;
    5 no requested cell could be restored and some missing cells were built for another
    fingerprint (see `neffcache fingerprint --explain`); 3 some cells have no entry; 0 every
    requested cell is in place.

    Each run (also one that fails once the fingerprint is known, e.g. store unreachable)
    writes a restore report: one small JSON
    object `reports/<YYYY-MM-DD>/<host>-<UTC time>-<random>.json` in the store (create-only;
    an IAM policy can allow PutObject on that prefix alone), or a file in --report-to DIR.
    Restore never opens the index: `neffcache reindex`, `neffcache reports ingest` and
    `neffcache serve` read reports into it. Writing the report gets at most 2 s (less when
    the deadline is nearer); a failure is one warning line on stderr and never changes the
    exit code.

    --json prints one document: status, exit_code, fingerprint_key, cells_restored,
    cells_missing, cells_incomplete, cells_failed, cells_elsewhere, entries,
    files_fetched, files_skipped, files_failed, bytes_fetched, deadline_hit, seconds,
    environment, conflicts, stale_temps_removed, fingerprint_python (the interpreter the
    fingerprint describes).
    Progress goes to stderr when it is a terminal.

    The fingerprint's package versions (torch, diffusers, transformers, the Neuron SDK) and
    Python version are those of the interpreter that will run inference: --python PATH (or
    NEFFCACHE_PYTHON, or the config key `python`), read by running it once; by default the
    interpreter running neffcache.

    One restore per DIR: a restore holds DIR/.neffcache-entries/lock while it runs; a second
    one into the same DIR waits for it (a line on stderr says so) — without --deadline for as
    long as the first runs, with --deadline until then (exit 3). Temp files a killed restore
    left (.neffcache-*.tmp) are removed and counted (stale_temps_removed). A symlink at a
    cache root (DIR/neff, ...) or at DIR/.neffcache-entries is refused (exit 2), never
    followed out of DIR.

    When two entries want different bytes at one path (compile outputs are not always
    byte-reproducible), the first cell in matrix order wins that path; `conflicts` counts
    such paths and a warning on stderr names a few.

    --dry-run prints the plan instead (--json: dry_run, status, exit_code, cells_missing,
    cells_failed, cells_elsewhere, entries, files_to_fetch, files_present, blobs_to_fetch,
    bytes_to_fetch, requests, pack_runs, blob_gets, blob_parts, packs, fetch — one record
    per planned request: kind pack|blob|part, the pack or blob sha256, start, bytes — and
    conflicts); its exit code is the one the restore would end with if every fetch
    succeeded (3 some cells have no entry, 5, 4, 6 as above).

    With --from-bundle FILE the entries come from a bundle instead of the store, and no
    index is contacted. The bundle's structure (and, with --expect-sha256, its digest) is
    checked first; before anything is installed every member is hashed against its table
    of contents, so a truncated, tampered or foreign bundle is exit 4 with nothing installed.

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
    """
    started = _process_start()
    until = started + deadline if deadline is not None else None
    _check_flags(print_env=print_env, as_json=as_json, dry_run=dry_run, bundle=bundle)
    from neffcache.backends import cache_environment, get_backend
    from neffcache.fingerprint import check_usable, collect_fingerprint, described_interpreter
    from neffcache.matrix import select_cells
    from neffcache.matrix_io import load_matrix
    from neffcache.restore.local import restore_local
    from neffcache.store import describe_store

    settings = _settings(store, index, python, report_to)
    m = load_matrix(matrix)
    cells = select_cells(m.cells, patterns)
    if not cells:
        raise UsageError(f"--cells {' '.join(patterns)}: matches no cell of {matrix}")
    backend = get_backend(m.backend)
    target = Path(to).expanduser().absolute()
    if dry_run:
        _dry_run(settings, cells, backend, target, workers=workers, as_json=as_json)
        return
    _make_scratch_dirs(backend, target)
    if print_env:  # first, so `eval` sets the cache dirs even if the store is unreachable
        for var, value in sorted(cache_environment(backend, str(target)).items()):
            sys.stdout.write(f"export {var}={shlex.quote(value)}\n")
        sys.stdout.flush()
    source = _open_bundle(bundle, expect)  # None without --from-bundle
    fingerprint = collect_fingerprint(backend.name, os.environ, python=settings.python)
    try:
        # An unknown neuron target matches nothing: refuse (exit 5) rather than miss quietly.
        check_usable(fingerprint)
        if source is not None:
            result = _restore_from_bundle(source, cells, backend, fingerprint, target,
                                          workers=workers, until=until)
        else:  # everything already in place (local manifest copies + state file): no store
            result = restore_local(cells, backend, fingerprint, target,
                                   store_url=describe_store(settings.store_url)) or \
                _before(until, lambda: _restore_from_store(
                    settings, cells, backend, fingerprint, target, workers=workers,
                    until=until, show_progress=sys.stderr.isatty() and not print_env))
    except NeffcacheError as exc:
        # A boot restore that stops early is exactly what the dashboard must show: report it
        # (a bundle restore is for hosts with no store and no index: it reports nothing).
        if source is None:
            _send_report(settings, _failure_doc(fingerprint, target, cells, exc), fingerprint,
                         m.name or matrix, _report_timeout(until))
        raise
    if result.conflicts:
        progress(_conflict_warning(result.conflicts))
    if result.stale_temps_removed:
        progress(f"restore: removed {result.stale_temps_removed} stale temp file(s) "
                 f"(.neffcache-*.tmp) left by an interrupted restore")
    doc = dict(result.to_json(), fingerprint_python=described_interpreter(settings.python))
    _show(doc, as_json, print_env)
    if source is None:
        _send_report(settings, doc, fingerprint, m.name or matrix, _report_timeout(until))
    err = result.error()
    if err is not None:
        raise err


def _report_timeout(until: float | None) -> float:
    """The report's time budget: 2 s, less when the deadline is nearer, 0.2 s past it."""
    if until is None:
        return REPORT_TIMEOUT
    return min(REPORT_TIMEOUT, max(LATE_REPORT_TIMEOUT, until - time.monotonic()))


def _before(until: float | None, work: Callable[[], Any]) -> Any:
    """``work()``, waited for until a moment after the deadline (or after now, when it has
    passed already) at most: the store calls
    inside already stop by then (their timeouts and retries are clipped to the deadline,
    and the fetch workers are not waited for), so this only catches a call that hangs
    anyway (e.g. the store check): DeadlineExceededError, exit 3. ``work`` then runs on in a
    daemon thread until the process ends."""
    if until is None:
        return work()
    done: list[Any] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(work())
        except BaseException as exc:  # noqa: BLE001 - re-raised on the calling thread
            failed.append(exc)

    worker = threading.Thread(target=run, name="neffcache-restore-main", daemon=True)
    worker.start()
    worker.join(max(0.0, until - time.monotonic()) + OVERRUN)
    if failed:
        if isinstance(failed[0], UnavailableError) and time.monotonic() >= until:
            raise DeadlineExceededError(f"{failed[0]}; the deadline passed first (the store "
                                        "client's waits end at the deadline)") from None
        raise failed[0]
    if done:
        return done[0]
    raise DeadlineExceededError("the store did not answer before the deadline; nothing more "
                                "was installed (a rerun fetches what is missing)")


def _settings(store: str | None, index: str | None, python: str | None,
              report_to: str | None) -> Settings:
    if index is not None:
        progress("warning: --index is ignored: restore writes its report to the store "
                 "(see --report-to); neffcache reindex or serve reads reports into the index")
    return settings_from(store, python=python, reports=report_to)


def _check_flags(*, print_env: bool, as_json: bool, dry_run: bool, bundle: str | None) -> None:
    if print_env and as_json:
        raise UsageError("--print-env and --json both write to stdout; choose one "
                         "(the JSON report has an `environment` field)")
    if dry_run and (print_env or bundle):
        raise UsageError("--dry-run goes with a store, without --print-env or --from-bundle")


def _dry_run(settings: Settings, cells: Any, backend: Any, target: Path, *,
             workers: int | None, as_json: bool) -> None:
    """Print the plan a restore would run (nothing fetched, nothing written)."""
    from neffcache.fingerprint import check_usable, collect_fingerprint
    from neffcache.restore.preview import preview_restore
    from neffcache.store import open_store
    from neffcache.thread_pool import usable_cpus

    fingerprint = collect_fingerprint(backend.name, os.environ, python=settings.python)
    check_usable(fingerprint)
    s = open_store(settings.store_url)
    s.check()
    preview = preview_restore(s, cells, backend, fingerprint, target,
                              workers=workers or min(16, 4 * usable_cpus()))
    doc = preview.to_json()
    if as_json:
        emit_json(doc)
    else:
        click.echo(_dry_run_text(doc))
    err = preview.error()
    if err is not None:
        raise err


def _dry_run_text(doc: dict[str, Any]) -> str:
    lines = [f"dry run: would fetch {doc['files_to_fetch']} files "
             f"({human_bytes(doc['bytes_to_fetch'])}, {doc['blobs_to_fetch']} blobs) into "
             f"{doc['target']} in {doc['requests']} requests: {doc['pack_runs']} pack reads "
             f"from {len(doc['packs'])} packs, {doc['blob_gets']} blob GETs, "
             f"{doc['blob_parts']} ranged parts; {doc['files_present']} files already in "
             f"place [fingerprint {doc['fingerprint_key'][:12]}]"]
    for u in doc["fetch"][:20]:
        if u["kind"] == "pack":
            lines.append(f"  pack {u['pack'][:12]}  bytes {u['start']}+{u['bytes']}  "
                         f"{u['files']} files")
        elif u["kind"] == "blob":
            lines.append(f"  blob {u['sha256'][:12]}  {u['bytes']} bytes  {u['paths'][0]}")
        else:
            lines.append(f"  blob {u['sha256'][:12]}  part {u['part']}/{u['parts']}  "
                         f"bytes {u['start']}+{u['bytes']}  {u['paths'][0]}")
    if len(doc["fetch"]) > 20:
        lines.append(f"  ... {doc['requests'] - 20} more requests (--json lists them)")
    lines.extend(_details({**doc, "cells_incomplete": [], "files_failed": []}))
    return "\n".join(lines)


def _restore_from_store(settings: Settings, cells: Any, backend: Any,
                        fingerprint: Any, target: Path, *, workers: int | None,
                        until: float | None,
                        show_progress: bool) -> Any:
    from neffcache.restore.run import restore_cells
    from neffcache.store import open_store

    if workers is None:  # threads beyond a few per CPU only contend for the GIL (measured)
        from neffcache.thread_pool import usable_cpus

        workers = min(16, 4 * usable_cpus())
    s = open_store(settings.store_url, deadline=until)
    if until is None or time.monotonic() < until:  # past it, nothing more is asked of the store
        s.check()
    bar = _ProgressLine() if show_progress else None
    result = restore_cells(s, cells, backend, fingerprint, target, workers=workers,
                           deadline=until, progress=bar.update if bar else None,
                           notice=progress)
    if bar:
        bar.close()
    return result


def _show(doc: dict[str, Any], as_json: bool, print_env: bool) -> None:
    if as_json:
        emit_json(doc)
    elif print_env:
        progress(_summary(doc))
    else:
        click.echo(_summary(doc))
        for line in _details(doc):
            click.echo(line)


def _open_bundle(bundle: str | None, expect: str | None) -> Any:
    """The bundle as a read-only store, its structure (and digest) checked; None without one."""
    if bundle is None:
        if expect:
            raise UsageError("--expect-sha256 checks a bundle: use it with --from-bundle FILE")
        return None
    from neffcache.lifecycle.bundle_store import BundleStore

    return BundleStore(bundle, expect_sha256=expect)


def _restore_from_bundle(source: Any, cells: Any, backend: Any, fingerprint: Any,
                         target: Path, *, workers: int | None, until: float | None) -> Any:
    """Hash every member of the bundle against its table of contents (nothing is installed
    from a bad bundle), then restore from it as from a store."""
    from neffcache.restore.local import restore_local
    from neffcache.restore.run import restore_cells

    with source:
        done = restore_local(cells, backend, fingerprint, target, store_url=source.url)
        if done is not None:  # already in place: the bundle's structure was checked, enough
            return done
        source.verify_all()
        return restore_cells(source, cells, backend, fingerprint, target,
                             workers=workers or 4, deadline=until, notice=progress)


def _process_start() -> float:
    """When this process started, on the ``time.monotonic()`` clock, so a --deadline also
    counts interpreter start-up and imports (Linux /proc; elsewhere: now)."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        since_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        elapsed = time.clock_gettime(time.CLOCK_BOOTTIME) - since_boot
    except (OSError, ValueError, IndexError, AttributeError):
        return time.monotonic()
    return time.monotonic() - min(max(elapsed, 0.0), 60.0)


def _make_scratch_dirs(backend: Any, target: Path) -> None:
    from neffcache.backends import cache_environment, root_dirs

    dirs = set(root_dirs(backend, str(target)).values())
    scratch = set(cache_environment(backend, str(target)).values()) - dirs
    for d in sorted(scratch):
        try:
            os.makedirs(d, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"{d}: cannot create scratch directory: {exc.strerror}") from None


def _conflict_warning(conflicts: Any, listed: int = 3) -> str:
    """One stderr line: how many paths entries disagreed about, and the first few."""
    some = "; ".join(c.message for c in conflicts[:listed])
    more = f"; and {len(conflicts) - listed} more" if len(conflicts) > listed else ""
    return (f"warning: {len(conflicts)} path(s) are wanted with different bytes by different "
            f"entries; the first cell's file was kept: {some}{more}")


def _failure_doc(fingerprint: Any, target: Path, cells: Any, exc: BaseException) -> dict[str, Any]:
    """A restore report for a run that failed before fetching anything."""
    ids = [c.id for c in cells]
    return {"status": "failed", "exit_code": exit_code_for(exc), "error": str(exc),
            "backend": fingerprint.backend,
            "fingerprint_key": fingerprint.key, "target": str(target), "cells_requested": ids,
            "cells_restored": [], "cells_missing": ids, "files_fetched": 0, "files_skipped": 0,
            "bytes_fetched": 0, "seconds": 0.0}


def _summary(doc: dict[str, Any]) -> str:
    n = len(doc["cells_requested"])
    return (f"restored {len(doc['cells_restored'])}/{n} cells into {doc['target']}: fetched "
            f"{doc['files_fetched']} files ({human_bytes(doc['bytes_fetched'])}), "
            f"{doc['files_skipped']} already in place, in {doc['seconds']:.1f} s "
            f"[fingerprint {doc['fingerprint_key'][:12]}]")


def _details(doc: dict[str, Any]) -> list[str]:
    lines = []
    for label, key in (("missing", "cells_missing"), ("incomplete", "cells_incomplete")):
        if doc[key]:
            lines.append(f"{label}: {', '.join(doc[key])}")
    for cid, fps in doc["cells_elsewhere"].items():
        lines.append(f"built elsewhere: {cid} (fingerprints {', '.join(f[:12] for f in fps)})")
    for f in doc["cells_failed"]:
        lines.append(f"failed: {f['cell']}: {f['error']}")
    lines.extend(f"file failed: {f['error']}" for f in doc["files_failed"][:10])
    return lines


class _ProgressLine:
    """A single self-overwriting progress line on a terminal's stderr, at most ~10 updates/s."""

    def __init__(self) -> None:
        self._last = 0.0
        self._shown = False

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
            sys.stderr.write("\n")
            sys.stderr.flush()


def _send_report(settings: Settings, doc: dict[str, Any], fingerprint: Any, matrix: str,
                 timeout: float) -> None:
    """Write this run's restore report where the settings say (never to the index)."""
    from datetime import datetime, timezone

    from neffcache import __version__
    from neffcache.report_send import send_report
    from neffcache.reports import build_report
    from neffcache.store import describe_store

    if settings.reports_to == "none":
        return
    doc = dict(doc)
    doc.setdefault("store", describe_store(settings.store_url))
    report = build_report(doc, fingerprint=fingerprint, host=socket.gethostname(),
                          matrix=matrix, now=datetime.now(timezone.utc),
                          nonce=os.urandom(4).hex(), version=__version__)
    send_report(report, settings.reports_to, settings.store_url, timeout, progress)
