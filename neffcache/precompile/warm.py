"""``check_warm(WarmRequest)``, behind ``neffcache warm``: first calls on restored caches."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neffcache.backends import Backend, get_backend
from neffcache.config import Settings
from neffcache.errors import (
    CacheMissError,
    ExitRule,
    NeffcacheError,
    ReportError,
    UsageError,
    WorkerError,
)
from neffcache.manifest import entry_key
from neffcache.matrix import Cell, Matrix
from neffcache.precompile.launch import WorkerOutcome, run_worker
from neffcache.precompile.plan import COMPILED, FAILED, HIT, Event, resolve_model
from neffcache.precompile.worker import WorkerSpec
from neffcache.report_send import SPOOL_DIR, discard, keep, load, pending
from neffcache.reports import Verdicts, make_report_id
from neffcache.request_rules import checked_request
from neffcache.restore import LOCAL_ENTRIES

if TYPE_CHECKING:
    from neffcache.index import Index

REPORT_SCHEMA = 1
# A boot must not wait for a dashboard: the index gets this long, then the verdicts are spooled.
INDEX_REPORT_TIMEOUT = 2.0


@dataclass(frozen=True, slots=True)
class WarmCell:
    """One cell's first call against the restored directory."""

    cell_id: str
    cell_key: str
    entry_key: str  # this cell's entry for the fingerprint (it may not exist)
    status: str  # hit | compiled | failed
    seconds: float | None  # the first call (compile + run)
    wall_seconds: float
    verdict: Mapping[str, Any] | None = None  # neffcache.hit_check.Verdict.to_json()
    error: str | None = None
    log_tail: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"cell_id": self.cell_id, "cell_key": self.cell_key, "entry_key": self.entry_key,
                "status": self.status, "seconds": self.seconds,
                "wall_seconds": round(self.wall_seconds, 3), "compiled": self.verdict,
                "error": self.error, "log_tail": self.log_tail}


@dataclass(frozen=True, slots=True)
class WarmReport:
    matrix: str
    backend: str
    fingerprint_key: str
    cache_dir: str
    cells: tuple[WarmCell, ...]
    seconds: float

    def with_status(self, status: str) -> tuple[WarmCell, ...]:
        return tuple(c for c in self.cells if c.status == status)

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": REPORT_SCHEMA, "matrix": self.matrix, "backend": self.backend,
                "fingerprint_key": self.fingerprint_key, "cache_dir": self.cache_dir,
                "seconds": round(self.seconds, 3),
                "counts": {s: len(self.with_status(s)) for s in (HIT, COMPILED, FAILED)},
                "cells": [c.to_json() for c in self.cells]}

    def error(self, strict: bool) -> NeffcacheError | None:
        """A failed warm-up is always an error (exit 1); a cell that compiled is one only
        with ``strict`` (exit 3, a cache miss)."""
        failed, compiled = self.with_status(FAILED), self.with_status(COMPILED)
        if failed:
            ids = ", ".join(c.cell_id for c in failed[:3])
            return WorkerError(f"{len(failed)} of {len(self.cells)} cells failed to warm ({ids}); "
                               f"first: {failed[0].error}",
                               hint="neffcache warm MATRIX --cache DIR --json shows each log tail")
        if strict and compiled:
            ids = ", ".join(c.cell_id for c in compiled[:3])
            return CacheMissError(
                f"{len(compiled)} of {len(self.cells)} cells compiled against {self.cache_dir} "
                f"(a cache miss): {ids}",
                hint=f"neffcache capture MATRIX --cache {self.cache_dir} (back-fill what "
                     f"compiled), or neffcache restore MATRIX --to {self.cache_dir}")
        return None


def judge_outcome(cell: Cell, key: str, outcome: WorkerOutcome) -> WarmCell:
    """A worker's outcome as hit, compiled or failed. Pure."""
    verdict = outcome.verdict()
    if verdict is None:
        return WarmCell(cell.id, cell.key, key, FAILED, outcome.seconds, outcome.wall_seconds,
                        error=outcome.error, log_tail=outcome.log_tail[-2000:])
    return WarmCell(cell.id, cell.key, key, COMPILED if verdict.compiled else HIT,
                    outcome.seconds, outcome.wall_seconds, verdict=verdict.to_json())


def describe(result: WarmCell) -> str:
    if result.status == FAILED:
        return result.error or "failed"
    seconds = "-" if result.seconds is None else f"{result.seconds:.1f} s"
    if result.status == HIT:
        return f"first call {seconds}, nothing compiled"
    reasons = (result.verdict or {}).get("reasons") or ["compiled"]
    return f"first call {seconds}, COMPILED: {reasons[0]}"


def warm_restored(matrix: Matrix, cell: Cell, backend: Backend, base: Path, workdir: Path, *,
                  environ: Mapping[str, str], timeout: float | None = None,
                  python: str | None = None) -> WorkerOutcome:
    """Warm ``cell`` in a fresh process against the cache roots under ``base`` (restored into,
    or empty for a precompile)."""
    pipeline = matrix.pipeline(cell.pipeline)
    spec = WorkerSpec(cell=cell, backend=matrix.backend,
                      model=resolve_model(cell.model, matrix.source), base=str(base),
                      result_path=str(workdir / "result.json"),
                      warmup_steps=pipeline.warmup_steps, call_kwargs=pipeline.call_kwargs)
    return run_worker(spec, backend, workdir, environ=environ, timeout=timeout, python=python)


@checked_request
class WarmRequest:
    """What ``neffcache warm`` is asked to check; each field is the flag of that name.

    ``cache``: the directory ``neffcache restore --to`` filled, warmed in place. ``cells``:
    globs of cell ids (none: all). ``strict``: a cell that compiled is an error (exit 3).
    ``python``: the interpreter the warm-ups run under and the fingerprint describes.
    ``index``, ``python``: None resolves them as the CLI does, from ``environ`` (None: the
    process's; also the workers' environment). ``notice``: warnings. ``progress``: each event.
    """

    matrix: str | Path
    cache: str | Path
    cells: Sequence[str] = ()
    strict: bool = False
    timeout: float | None = None
    index: str | None = None
    environ: Mapping[str, str] | None = None
    notice: Callable[[str], None] | None = None
    progress: Callable[[Event], None] | None = None
    python: str | None = None


@dataclass(frozen=True, slots=True)
class WarmResult(ExitRule):
    """Each cell's first call against the restored cache: hit, compiled or failed. ``to_json()``
    is the ``--json`` document; ``error()`` a WorkerError (exit 1) for a failed warm-up, with
    ``strict`` a CacheMissError (3) for a cell that compiled."""

    report: WarmReport
    strict: bool = False

    def to_json(self) -> dict[str, Any]:
        return self.report.to_json()

    def error(self) -> NeffcacheError | None:
        return self.report.error(self.strict)


def check_warm(request: WarmRequest) -> WarmResult:
    """Warm each selected cell in turn, in a fresh process against the restored directory
    itself, judge whether it compiled (``neffcache warm --help``), then mark each judged
    entry verified in the index within 2 seconds, else spool the verdicts for the next warm.

    Raises UsageError (2) when no cell matches or the directory holds no cache root,
    MatrixError (2), FingerprintMismatchError (5). A cell that failed or compiled is in the
    result, not raised.
    """
    from neffcache.backends import root_dirs
    from neffcache.config import read_settings
    from neffcache.fingerprint import check_usable, collect_fingerprint, described_interpreter
    from neffcache.matrix import select_cells
    from neffcache.matrix_io import load_matrix

    environ = os.environ if request.environ is None else request.environ
    matrix = str(request.matrix)
    m = load_matrix(request.matrix)
    cells = select_cells(m.cells, request.cells)
    if not cells:
        raise UsageError(f"--cells {' '.join(request.cells)}: matches no cell of {matrix}")
    backend = get_backend(m.backend)
    target = Path(request.cache).expanduser().absolute()
    missing = [d for d in root_dirs(backend, str(target)).values() if not Path(d).is_dir()]
    if len(missing) == len(backend.roots):
        raise UsageError(f"--cache {target}: no cache root in it ({', '.join(missing)}); "
                         f"restore into it first: neffcache restore {matrix} --to {target}")
    settings = read_settings(environ, index=request.index, python=request.python)
    fingerprint = collect_fingerprint(backend.name, environ, python=settings.python)
    check_usable(fingerprint)
    python = None if settings.python is None else described_interpreter(settings.python)
    # In turn, not at once: cells share the directory, and a concurrent cell's new files
    # would be blamed on its neighbour.
    started = time.monotonic()
    emit = request.progress or (lambda event: None)
    results = []
    with tempfile.TemporaryDirectory(prefix="neffcache-warm-", ignore_cleanup_errors=True) as tmp:
        for n, cell in enumerate(cells, 1):
            emit(("start", cell.id, f"first call against {target}"))
            outcome = warm_restored(m, cell, backend, target, Path(tmp, f"{n:03d}"),
                                    environ=environ, timeout=request.timeout, python=python)
            result = judge_outcome(cell, entry_key(cell, fingerprint), outcome)
            emit((result.status, cell.id, describe(result)))
            results.append(result)
    report = WarmReport(matrix=m.source, backend=backend.name, fingerprint_key=fingerprint.key,
                        cache_dir=str(target), cells=tuple(results),
                        seconds=time.monotonic() - started)
    _record_verdicts(settings, target, report, request.notice)
    return WarmResult(report, request.strict)


def _record_verdicts(settings: Settings, target: Path, report: WarmReport,
                     notice: Callable[[str], None] | None) -> None:
    """Record the verdicts earlier warms spooled, then these; spool them if the index does not
    take them in time."""
    judged = tuple((c.entry_key, c.status) for c in report.cells if c.status != FAILED)
    # the restore's report spool for ``target``: one per restored directory
    spool = (Path(settings.report_spool).expanduser() if settings.report_spool
             else target / LOCAL_ENTRIES / SPOOL_DIR)
    waiting: list[tuple[Path | None, Verdicts]] = [  # oldest first: newer ones win
        (s.path, v) for s in pending(spool) if (v := _spooled_verdicts(s.path)) is not None]
    if not judged and not waiting:
        return
    now = datetime.now(timezone.utc)
    mine = Verdicts(make_report_id(socket.gethostname(), now, os.urandom(4).hex()), now, judged)

    def write(idx: Index) -> None:
        for path, verdicts in [*waiting, (None, mine)]:  # each spooled file gone once recorded
            for key, status in verdicts.verdicts:
                idx.record_verification(key, status, verdicts.time)
            if path is not None:
                discard(path)

    say = notice or (lambda message: None)
    if not _written_in_time(settings, write, say) and judged:
        try:
            keep(spool, mine)
        except OSError as exc:
            say(f"warning: warm results not spooled either ({spool}: {exc.strerror or exc})")
            return
        say(f"warm results kept in {spool}; the next neffcache warm that reaches the index "
            f"records them")


def _written_in_time(settings: Settings, write: Callable[[Index], None],
                     say: Callable[[str], None]) -> bool:
    """Run ``write(index)`` in a thread given at most ``INDEX_REPORT_TIMEOUT`` seconds: False
    when it did not end in time or failed (a notice), True when written or without an index."""
    if not settings.has_index:
        return True
    errors: list[BaseException] = []

    def send() -> None:
        try:
            from neffcache.index import open_index

            with open_index(settings.index_url, auto_upgrade=settings.index_is_embedded) as idx:
                write(idx)
        except BaseException as exc:  # noqa: BLE001 - reported as a notice below
            errors.append(exc)

    worker = threading.Thread(target=send, name="neffcache-index-report", daemon=True)
    worker.start()
    worker.join(INDEX_REPORT_TIMEOUT)
    if worker.is_alive():
        say(f"warning: index did not answer within {INDEX_REPORT_TIMEOUT:.1f} s; warm results "
            f"not recorded")
    elif errors:
        say(f"warning: warm results not recorded in the index: "
            f"{' '.join(str(errors[0]).split())}")
    return not (worker.is_alive() or errors)


def _spooled_verdicts(path: Path) -> Verdicts | None:
    """A spooled warm's verdicts (None for a restore report, or a file that is neither)."""
    try:
        doc = load(path)
    except (ReportError, OSError):
        return None  # the restore that sends the spool drops what is no document
    return doc if isinstance(doc, Verdicts) else None
