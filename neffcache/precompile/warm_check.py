"""``check_warm(WarmRequest) -> WarmResult``: the use case behind ``neffcache warm``, a boot
health check after a restore: each cell's first call against the restored cache (``warm``'s
``apply_warm``), each verdict recorded on its entry in the index when one is at hand."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neffcache.config import Settings
from neffcache.errors import ExitRule, NeffcacheError, ReportError, UsageError
from neffcache.precompile.indexing import report_to_index
from neffcache.precompile.warm import FAILED, Event, WarmReport, apply_warm
from neffcache.report_send import SPOOL_DIR, discard, keep, load, pending
from neffcache.reports import Verdicts, make_report_id
from neffcache.request_rules import checked_request
from neffcache.restore import LOCAL_ENTRIES

if TYPE_CHECKING:
    from neffcache.index import Index

# A boot must not wait for a dashboard: the index gets this long, then the verdicts are spooled.
INDEX_REPORT_TIMEOUT = 2.0


@checked_request
class WarmRequest:
    """What ``neffcache warm`` is asked to check; each field is the flag of that name.

    ``matrix``: the matrix file. ``cache``: the directory ``neffcache restore --to`` filled
    (each cache root R is ``cache/R``), warmed in place. ``cells``: globs of cell ids (none:
    every cell). ``strict``: a cell that compiled is an error (exit 3). ``timeout``: seconds
    per warm-up. ``python``: the interpreter the warm-ups run under and the fingerprint
    describes (the service's: torch, diffusers; it needs no neffcache); None resolves it as
    the CLI does (NEFFCACHE_PYTHON > config key ``python`` > the interpreter running
    neffcache). ``index``: the index URL; None resolves it as the CLI does (NEFFCACHE_INDEX >
    config file > default), from ``environ`` (None: the process's, at call time; also the
    fingerprint's and the workers' environment). ``notice``: warnings (the index did not
    record the verdicts in time: they are spooled). ``progress``: each event ``(kind, cell
    id, message)``.
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
    """Each cell's first call against the restored cache: hit, compiled (a miss) or failed
    (``report``).

    ``to_json()`` is the ``neffcache warm --json`` document. ``error()``: a WorkerError when a
    warm-up failed (``exit_code`` 1); with ``strict``, a CacheMissError when a cell compiled
    (3); else None (0).
    """

    report: WarmReport
    strict: bool = False

    def to_json(self) -> dict[str, Any]:
        return self.report.to_json()

    def error(self) -> NeffcacheError | None:
        return self.report.error(self.strict)


def check_warm(request: WarmRequest) -> WarmResult:
    """Warm each selected cell in turn, in a fresh process whose cache variables point at the
    restored directory itself, and judge whether it compiled (see ``neffcache warm --help``);
    then mark each judged entry verified (hit or compiled) in the index, within 2 seconds,
    after the verdicts earlier warms spooled; a slow or failing index is only a notice, and
    the verdicts wait in the restore's report spool (NEFFCACHE_REPORT_SPOOL, else
    CACHE/.neffcache-entries/report-spool) for the next warm that reaches it.

    Raises UsageError (exit 2) when no cell matches ``cells`` or the directory holds no cache
    root; MatrixError (2) for a bad matrix; FingerprintMismatchError (5) when this host's
    fingerprint cannot be used. A cell that failed or compiled is in the result, not raised.
    """
    from neffcache.backends import get_backend, root_dirs
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
    report = apply_warm(m, cells, fingerprint, target, environ=environ,
                        timeout=request.timeout, progress=request.progress, python=python)
    _record_verdicts(settings, target, report, request.notice)
    return WarmResult(report, request.strict)


def _record_verdicts(settings: Settings, target: Path, report: WarmReport,
                     notice: Callable[[str], None] | None) -> None:
    """Mark each warmed cell's entry verified (hit or compiled) in the index (see
    ``report_to_index``), after the verdicts earlier warms spooled; verdicts the index does
    not take in time are spooled in turn (the restore's report spool), for the next warm."""
    judged = tuple((c.entry_key, c.status) for c in report.cells if c.status != FAILED)
    spool = _spool_dir(target, settings.report_spool)
    waiting = [(s.path, v) for s in pending(spool)  # oldest first: newer ones win
               if (v := _spooled_verdicts(s.path)) is not None]
    if not judged and not waiting:
        return
    now = datetime.now(timezone.utc)
    mine = Verdicts(make_report_id(socket.gethostname(), now, os.urandom(4).hex()), now, judged)

    def write(idx: Index) -> None:
        for path, spooled in waiting:
            _apply(idx, spooled)
            discard(path)
        _apply(idx, mine)

    written = report_to_index(settings, "warm results", write, INDEX_REPORT_TIMEOUT, notice)
    if written is False and judged:
        say = notice or _silent
        try:
            keep(spool, mine)
        except OSError as exc:
            say(f"warning: warm results not spooled either ({spool}: {exc.strerror or exc})")
            return
        say(f"warm results kept in {spool}; the next neffcache warm that reaches the index "
            f"records them")


def _apply(idx: Index, verdicts: Verdicts) -> None:
    for key, status in verdicts.verdicts:
        idx.record_verification(key, status, verdicts.time)


def _spooled_verdicts(path: Path) -> Verdicts | None:
    """A spooled warm's verdicts (None for a restore report, or a file that is neither)."""
    try:
        doc = load(path)
    except (ReportError, OSError):
        return None  # the restore that sends the spool drops what is no document
    return doc if isinstance(doc, Verdicts) else None


def _spool_dir(target: Path, configured: str | None) -> Path:
    """The restore's report spool for ``target`` (NEFFCACHE_REPORT_SPOOL, else
    TARGET/.neffcache-entries/report-spool): one spool per restored directory."""
    return Path(configured).expanduser() if configured else target / LOCAL_ENTRIES / SPOOL_DIR


def _silent(_message: str) -> None:
    pass
