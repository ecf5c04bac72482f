"""The restore use case as one call (``restore``) and its dry run (``preview_restore``)."""

from __future__ import annotations

import fnmatch
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, wait
from contextlib import ExitStack, contextmanager, nullcontext, suppress
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from neffcache.backends import Backend, cache_environment, get_backend, root_dirs
from neffcache.config import REPORTS_OFF, Settings, read_settings
from neffcache.errors import (
    DeadlineExceededError,
    NeffcacheError,
    UnavailableError,
    UsageError,
    exit_code_for,
)
from neffcache.fingerprint import (
    Fingerprint,
    check_usable,
    collect_fingerprint,
    described_interpreter,
)
from neffcache.manifest import entry_key
from neffcache.matrix import Cell, Matrix, select_cells
from neffcache.matrix_io import load_matrix
from neffcache.report_send import SPOOL_DIR, send_report
from neffcache.reports import build_report
from neffcache.request_rules import checked_request
from neffcache.restore.apply import Progress
from neffcache.restore.fs import lock_destination
from neffcache.restore.local import LOCAL_ENTRIES, restore_local
from neffcache.restore.outcome import Notice, RestoreJob, RestoreResult
from neffcache.restore.plan import Conflict
from neffcache.restore.pruning import evict_untrusted
from neffcache.restore.ready import Announcer, marker_entry, remove_markers
from neffcache.restore.run import RestorePreview, preview_cells, run_job
from neffcache.signing import PublicKey
from neffcache.store import (
    BundleStore,
    MirroredStore,
    Store,
    describe_store,
    open_store,
    side_environ,
)
from neffcache.thread_pool import usable_cpus
from neffcache.trust import TrustPolicy, load_trust
from neffcache.version import __version__

# A boot must never wait long for a dashboard: the report gets this long, then is dropped.
REPORT_TIMEOUT = 2.0
LATE_REPORT_TIMEOUT = 0.2  # ... and this long once the deadline has passed
# How long after the deadline the restore is waited for (its workers get thread_pool.GRACE).
OVERRUN = 0.3
BUNDLE_WORKERS = 4  # a local file: a few readers are enough
# Fewer than default_workers: on 2 CPUs, 4 threads spent 10-15 % less CPU than 8 (issue 22).
TRANSFERS_PER_CPU = 2


@checked_request
class RestoreRequest:
    """What to restore, where, and within what (the flags of ``neffcache restore``).

    matrix         a TOML file's path, or a loaded ``Matrix``
    to             base directory: each cache root R is restored into ``to/R``
    cells          glob patterns of cell ids (``--cells``); empty: every cell
    deadline       seconds after ``started`` at which no new work starts; what is done stays,
                   the rest is reported (exit 3); every store wait is clipped to it
    started        when the clock started (``time.monotonic()``); None: when the call starts
    workers        parallel transfers; None: 2 per CPU for blobs and parts, 4 per CPU for
                   manifest reads and local checks, at most 16 (4 from a bundle)
    bundle         restore from this bundle file (no store, no network, no report);
                   ``expect_sha256``: refuse it unless its digest is that; ``bundle_max_bytes``:
                   the most a gzip bundle may decompress to (default: the expected digest's
                   bundle, else 16 x its compressed size + 16 MiB)
    python         the interpreter the fingerprint describes; None: NEFFCACHE_PYTHON, config,
                   else the running one
    report_to      ``store``, ``none`` or a directory; None: NEFFCACHE_REPORTS, config, store
    store          the store URL; None: NEFFCACHE_STORE, the config file, the default
    notice         gets each warning and log line; None: dropped
    progress       gets (files done, files total, bytes fetched) while fetching from a store
    on_environment gets the cache environment (variable -> directory) once the scratch
                   directories exist, before the store, bundle or interpreter is touched (a
                   NeffcacheError raised once the matrix is read carries it: ``exc.environment``)
    first          glob patterns of cell ids (``--first``) restored first, in this order; the
                   other cells follow in matrix order (each glob must match a cell)
    on_cell_ready  gets each cell id the moment every file of it is verified and in place, on a
                   restore thread (keep it short); also marked in ``to/.neffcache-entries/ready/``
    fingerprint    restore the entries built for this one; None: this host's, read with ``python``
    mirrors        store URLs (or bundle:FILE) read in order after the store for an object
                   missing or failing verification; one unreachable is passed over; the N-th is
                   configured by NEFFCACHE_MIRROR_<N>_*; empty: NEFFCACHE_MIRRORS, config, none
    trusted_keys   public keys (``ed25519:<base64>``) or files of them: every entry must be
                   signed by one (else that cell fails, exit 4), and files of entries restored
                   before that none signed are removed; empty: NEFFCACHE_TRUSTED_KEYS, config,
                   none (nothing checked: a notice names the keys that signed)
    require_signatures  fail closed (exit 2) when no trusted key is configured (also
                   NEFFCACHE_REQUIRE_SIGNATURES, config ``require_signatures``)
    """

    matrix: str | Path | Matrix
    to: str | Path
    cells: Sequence[str] = ()
    deadline: float | None = None
    started: float | None = None
    workers: int | None = None
    bundle: str | Path | None = None
    expect_sha256: str | None = None
    bundle_max_bytes: int | None = None
    python: str | None = None
    report_to: str | None = None
    store: str | None = None
    notice: Notice | None = None
    progress: Progress | None = None
    on_environment: Callable[[Mapping[str, str]], None] | None = None
    fingerprint: Fingerprint | None = None
    mirrors: Sequence[str] = ()
    trusted_keys: Sequence[str] = ()
    require_signatures: bool = False
    first: Sequence[str] = ()
    on_cell_ready: Callable[[str], None] | None = None


@dataclass(frozen=True, slots=True)
class _Session:
    """What every restore derives from its request before touching the store."""

    request: RestoreRequest
    settings: Settings
    matrix_name: str  # as the report names it
    cells: tuple[Cell, ...]
    backend: Backend
    target: Path
    until: float | None  # the deadline on the time.monotonic() clock
    notice: Notice
    mirrors: tuple[str, ...]
    trusted: tuple[PublicKey, ...]  # entries must be signed by one of these (if any)
    announcer: Announcer  # cells ready: markers, on_cell_ready, their times

    def job(self, fingerprint: Fingerprint, workers: int, transfers: int | None = None,
            progress: Progress | None = None) -> RestoreJob:
        """``workers`` and ``transfers`` are the defaults: a request's ``workers`` sets both."""
        asked = self.request.workers
        return RestoreJob(self.cells, self.backend, fingerprint, self.target,
                          workers=asked or workers, transfers=asked or transfers,
                          deadline=self.until, trusted=self.trusted, notice=self.notice,
                          progress=progress, announcer=self.announcer)


def restore(request: RestoreRequest) -> RestoreResult:
    """Fetch the matrix's entries built for this host's fingerprint into ``request.to``.

    Every requested cell already in place returns at once without the store; otherwise entries are
    read from the store (or the bundle, hashed first) and every file is verified before it is
    renamed into place. A restore report is written where ``report_to`` says (not for a bundle),
    within 2 s; failing to write it is one notice, never an error.

    Returns a ``RestoreResult`` (``exit_code``, ``error()``, ``to_json()``: 0 every cell in place; 3
    some have no entry or the deadline stopped it; 4 integrity; 5 built for another fingerprint
    only; 6 store unavailable; 1 a local write failed). Raises a NeffcacheError when no restore
    could run: bad request or configuration (2), a bad bundle (4), the store unreachable (6) or
    silent past the deadline (3); a failure report is written once the fingerprint is known."""
    s = _session(request)
    with _handing_over(s.backend, s.target):
        _make_scratch_dirs(s.backend, s.target)
        if request.on_environment is not None:  # before anything that can fail on the network
            request.on_environment(cache_environment(s.backend, str(s.target)))
        source = _open_bundle(request)
        opened: list[Store] = []  # the store the restore opened: the report goes through it too
        with source or nullcontext():
            fingerprint = _fingerprint(s)
            result = _restore(s, fingerprint, source, opened)
        if result.conflicts:
            s.notice(conflict_warning(result.conflicts))
        if result.repair_hint:
            s.notice(f"restore: a mirror served objects the store lacked or held damaged; repair "
                     f"the store: {result.repair_hint}")
        if not s.trusted and result.signers:
            s.notice(f"note: entries signed by key(s) {', '.join(result.signers)}; no trusted key "
                     f"is configured, so no signature was checked (--trusted-key, "
                     f"NEFFCACHE_TRUSTED_KEYS)")
        if result.files_unsynced:
            s.notice(f"restore: {result.files_unsynced} file(s) in place were not synced before "
                     f"the deadline; they stay pending (a later restore syncs them)")
        if result.stale_temps_removed:
            s.notice(f"restore: removed {result.stale_temps_removed} stale temp file(s) "
                     f"(.neffcache-*.tmp) left by an interrupted restore")
        result = replace(result, fingerprint_python=described_interpreter(s.settings.python),
                         explain_args=_explain_args(s, result.store_url),
                         ready=tuple(s.announcer.announced.items()))
        if source is None:
            _send_report(s, result.to_json(), fingerprint, opened)
        return result


@contextmanager
def _handing_over(backend: Backend, target: Path) -> Iterator[None]:
    """A NeffcacheError raised in the block carries the cache environment (``exc.environment``)."""
    try:
        yield
    except NeffcacheError as exc:
        exc.environment = cache_environment(backend, str(target))
        raise


def preview_restore(request: RestoreRequest) -> RestorePreview:
    """The plan ``restore(request)`` would run (``--dry-run``): manifests are read, nothing is
    fetched, created, written or reported; raises as ``restore`` does (a ``bundle``: exit 2)."""
    if request.bundle is not None:
        raise UsageError("--dry-run goes with a store, without --print-env or --from-bundle")
    s = _session(request)
    fingerprint = _fingerprint(s)
    check_usable(fingerprint)
    with ExitStack() as stack:
        store = _mirrored(s, open_store(s.settings.store_url), stack)  # as the restore reads it
        store.check()
        preview = preview_cells(store, s.job(fingerprint, default_workers()))
    return replace(preview, judged=replace(preview.judged,
                                           explain_args=_explain_args(s, store.url)))


def default_workers() -> int:
    """Parallel manifest reads and local checks (more only contend for the GIL: measured)."""
    return min(16, 4 * usable_cpus())


def conflict_warning(conflicts: Sequence[Conflict], listed: int = 3) -> str:
    some = "; ".join(c.message for c in conflicts[:listed])
    more = f"; and {len(conflicts) - listed} more" if len(conflicts) > listed else ""
    return (f"warning: {len(conflicts)} path(s) are wanted with different bytes by different "
            f"entries; the first cell's file was kept: {some}{more}")


def _session(request: RestoreRequest) -> _Session:
    started = time.monotonic() if request.started is None else request.started
    until = None if request.deadline is None else started + request.deadline
    settings = read_settings(os.environ, store=request.store, python=request.python,
                             reports=request.report_to)
    m = request.matrix if isinstance(request.matrix, Matrix) else load_matrix(request.matrix)
    label = m.source if m is request.matrix else str(request.matrix)
    backend = get_backend(m.backend)
    target = Path(request.to).expanduser().absolute()
    with _handing_over(backend, target):
        cells = select_cells(m.cells, request.cells)
        if not cells:
            raise UsageError(f"--cells {' '.join(request.cells)}: matches no cell of {label}")
        cells = prioritized(cells, request.first)
        trusted = load_trust(settings, request).keys
    return _Session(request=request, settings=settings, matrix_name=m.name or label,
                    cells=cells, backend=backend, target=target, until=until,
                    notice=request.notice or (lambda message: None),
                    mirrors=tuple(request.mirrors) or settings.mirrors, trusted=trusted,
                    announcer=Announcer(target, started, request.on_cell_ready))


def prioritized(cells: Sequence[Cell], first: Sequence[str]) -> tuple[Cell, ...]:
    """``cells`` matching ``first[0]`` first, then ``first[1]``, ..., then the rest, each in matrix
    order; a glob that matches no cell is a UsageError."""
    for glob in first:
        if not any(fnmatch.fnmatchcase(c.id, glob) for c in cells):
            raise UsageError(f"--first {glob}: matches no selected cell")
    return tuple(sorted(cells, key=lambda c: next(  # stable: matrix order within a rank
        (i for i, g in enumerate(first) if fnmatch.fnmatchcase(c.id, g)), len(first))))


def _explain_args(s: _Session, store_url: str) -> tuple[str, ...]:
    """The flags `neffcache fingerprint --explain` needs for the same fingerprint and store."""
    python = s.settings.python
    args = ("--python", described_interpreter(python)) if python is not None else ()
    return (*args, "--store", store_url)


def _fingerprint(s: _Session) -> Fingerprint:
    return s.request.fingerprint or collect_fingerprint(s.backend.name, os.environ,
                                                        python=s.settings.python)


def _open_bundle(request: RestoreRequest) -> BundleStore | None:
    """The bundle as a read-only store, its structure (and digest) checked."""
    if request.bundle is None:
        if request.expect_sha256:
            raise UsageError("--expect-sha256 checks a bundle: use it with --from-bundle FILE")
        if request.bundle_max_bytes is not None:
            raise UsageError("--max-bytes caps a gzip bundle: use it with --from-bundle FILE")
        return None
    return BundleStore(request.bundle, expect_sha256=request.expect_sha256,
                       max_bytes=request.bundle_max_bytes)


def _restore(s: _Session, fingerprint: Fingerprint, source: BundleStore | None,
             opened: list[Store]) -> RestoreResult:
    try:
        # An unknown neuron target matches nothing: refuse (exit 5) rather than miss quietly.
        check_usable(fingerprint)
        evicted = _evict(s)
        # Everything already in place (local manifest copies + state file): no store, and a
        # bundle's structure was checked, enough.
        url = describe_store(s.settings.store_url) if source is None else source.url
        result = _in_place(s, fingerprint, url)
        if result is None and source is not None:
            source.verify_all()  # every member hashed: nothing is installed from a bad bundle
            result = run_job(source, s.job(fingerprint, BUNDLE_WORKERS))
        elif result is None:
            result = _before(s.until, lambda: _from_store(s, fingerprint, opened))
        return replace(result, signatures_checked=bool(s.trusted), evicted=evicted[0],
                       evicted_files=evicted[1])
    except NeffcacheError as exc:
        # A boot restore that stops early is exactly what the dashboard must show.
        if source is None:
            _send_report(s, _failure_doc(s, fingerprint, exc), fingerprint, opened)
        raise


def _evict(s: _Session) -> tuple[tuple[str, ...], int]:
    """With trusted keys: entries restored here that none signed leave; (entry keys, files)."""
    done = evict_untrusted(s.target, s.backend, TrustPolicy(s.trusted).vouches_for_copy,
                           deadline=s.until) if s.trusted else None
    if done is None:
        return (), 0
    keys = tuple(p.entry_key for p in done.pruned)
    s.notice(f"restore: removed {done.removed} file(s) of {len(keys)} entr(ies) restored here "
             f"before that no trusted key signed ({', '.join(k[:12] for k in keys[:3])})")
    return keys, done.removed


def _from_store(s: _Session, fingerprint: Fingerprint, opened: list[Store]) -> RestoreResult:
    """The restore from the store, then each mirror; the store opened is appended to ``opened``."""
    primary = open_store(s.settings.store_url, deadline=s.until)
    opened.append(primary)
    job = s.job(fingerprint, default_workers(), min(16, TRANSFERS_PER_CPU * usable_cpus()),
                s.request.progress)
    with ExitStack() as stack:
        store = _mirrored(s, primary, stack)
        if s.until is None or time.monotonic() < s.until:  # past it, nothing more is asked of it
            store.check()
        result = run_job(store, job)
        if isinstance(store, MirroredStore):
            result = replace(result, served_by=tuple(store.served().items()))
        return result


def _mirrored(s: _Session, primary: Store, stack: ExitStack) -> Store:
    """The primary, then the mirrors (the N-th configured from NEFFCACHE_MIRROR_<N>_*), if any."""
    if not s.mirrors:
        return primary
    mirrors = [open_store(url, deadline=s.until, environ=side_environ(os.environ, f"MIRROR_{n}"))
               for n, url in enumerate(s.mirrors, 1)]
    for m in mirrors:
        if isinstance(m, BundleStore):
            stack.enter_context(m)
    return MirroredStore([primary, *mirrors], notice=s.notice)


def _in_place(s: _Session, fingerprint: Fingerprint, store_url: str) -> RestoreResult | None:
    """``restore_local``; a missing ready marker is written only under DIR's lock, if clean."""
    result = restore_local(s.cells, s.backend, fingerprint, s.target, store_url=store_url,
                           trusted=s.trusted, deadline=s.until)
    if result is None:
        return result
    remove_markers(s.target, [c.id for c in result.resolution.missing])
    keys = {c.id: entry_key(c, fingerprint) for c in s.cells}
    ready = [(cid, keys[cid]) for cid in result.restored]
    if all(marker_entry(s.target, cid) == key for cid, key in ready):
        s.announcer.reset(ready, ())
        return result
    lock = lock_destination(str(s.target), deadline=time.monotonic())
    with suppress(DeadlineExceededError), lock as held:  # raised: a restore runs there, announcing
        if not held.unclean:  # a killed restore's mark stays for the full run's sweep
            s.announcer.reset(ready, ())
            held.finished()
    return result


def _before(until: float | None, work: Callable[[], RestoreResult]) -> RestoreResult:
    """``work()``, waited for until just after the deadline (then DeadlineExceededError; it runs
    on in a daemon thread): store calls stop by then, so this only catches one that hangs."""
    if until is None:
        return work()
    future: Future[RestoreResult] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:  # noqa: BLE001 - re-raised on the calling thread
            future.set_exception(exc)

    threading.Thread(target=run, name="neffcache-restore-main", daemon=True).start()
    wait([future], max(0.0, until - time.monotonic()) + OVERRUN)
    if not future.done():
        raise DeadlineExceededError("the store did not answer before the deadline; nothing more "
                                    "was installed (a rerun fetches what is missing)")
    if isinstance(future.exception(), UnavailableError) and time.monotonic() >= until:
        raise DeadlineExceededError(f"{future.exception()}; the deadline passed first (the store "
                                    "client's waits end at the deadline)") from None
    return future.result()


def _make_scratch_dirs(backend: Backend, target: Path) -> None:
    dirs = set(root_dirs(backend, str(target)).values())
    scratch = set(cache_environment(backend, str(target)).values()) - dirs
    for d in sorted(scratch):
        try:
            os.makedirs(d, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"{d}: cannot create scratch directory: {exc.strerror}") from None


def _failure_doc(s: _Session, fingerprint: Fingerprint, exc: BaseException) -> dict[str, Any]:
    ids = [c.id for c in s.cells]
    return {"status": "failed", "exit_code": exit_code_for(exc), "error": str(exc),
            "backend": fingerprint.backend,
            "fingerprint_key": fingerprint.key, "target": str(s.target), "cells_requested": ids,
            "cells_restored": [], "cells_missing": ids, "files_fetched": 0, "files_skipped": 0,
            "bytes_fetched": 0, "seconds": 0.0}


def _send_report(s: _Session, doc: Mapping[str, Any], fingerprint: Fingerprint,
                 opened: Sequence[Store] = ()) -> None:
    """Write this run's report where the settings say (never to the index), else spool it."""
    if s.settings.reports_to == REPORTS_OFF:
        return
    doc = {"store": describe_store(s.settings.store_url), **doc}  # the doc's own store wins
    report = build_report(doc, fingerprint=fingerprint, host=socket.gethostname(),
                          matrix=s.matrix_name, now=datetime.now(timezone.utc),
                          nonce=os.urandom(4).hex(), version=__version__)
    spooled = s.settings.report_spool
    spool = Path(spooled).expanduser() if spooled else s.target / LOCAL_ENTRIES / SPOOL_DIR
    timeout = REPORT_TIMEOUT if s.until is None else min(
        REPORT_TIMEOUT, max(LATE_REPORT_TIMEOUT, s.until - time.monotonic()))
    send_report(report, s.settings.reports_to, s.settings.store_url, timeout, s.notice,
                spool=spool, store=opened[0] if opened else None)
