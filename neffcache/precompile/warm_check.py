"""``check_warm(WarmRequest) -> WarmResult``: the use case behind ``neffcache warm``, a boot
health check after a restore: each cell's first call against the restored cache (``warm``'s
``apply_warm``), each verdict recorded on its entry in the index when one is at hand."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neffcache.config import Settings
from neffcache.errors import ExitRule, NeffcacheError, UsageError
from neffcache.precompile.indexing import report_to_index
from neffcache.precompile.warm import FAILED, Event, WarmReport, apply_warm

if TYPE_CHECKING:
    from neffcache.index import Index

# A boot must not wait for a dashboard: the index gets this long, then the report is dropped.
INDEX_REPORT_TIMEOUT = 2.0


@dataclass(frozen=True, slots=True)
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
    record the verdicts). ``progress``: each event ``(kind, cell id, message)``.
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
    then mark each judged entry verified (hit or compiled) in the index, within 2 seconds (a
    slow or failing index is only a notice).

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
    _record_verdicts(settings, report, request.notice)
    return WarmResult(report, request.strict)


def _record_verdicts(settings: Settings, report: WarmReport,
                     notice: Callable[[str], None] | None) -> None:
    """Mark each warmed cell's entry verified (hit or compiled) in the index (see
    ``report_to_index``)."""
    judged = [(c.entry_key, c.status) for c in report.cells if c.status != FAILED]
    if not judged:
        return

    def write(idx: Index) -> None:
        for key, status in judged:
            idx.record_verification(key, status)

    report_to_index(settings, "warm results", write, INDEX_REPORT_TIMEOUT, notice)
