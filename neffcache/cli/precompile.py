"""``neffcache precompile`` and ``neffcache warm`` (the boot check): warm cells, render."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import IO, TYPE_CHECKING, Any

import click

from neffcache.backends import neuron_env
from neffcache.cli._common import emit_json, finish, format_table, human_bytes, jsonl_line, progress
from neffcache.cli._options import ranged, shared, workers_option
from neffcache.cli._process import stop_on_signals
from neffcache.errors import EXIT_CODE_HELP

if TYPE_CHECKING:
    from neffcache.precompile import CellBeat, Event, PrecompileReport

# the phase a progress event's cell is in after it (a JSON line's "phase")
EVENT_PHASES = {"start": "starting", "claim": "claimed", "verify": "verifying",
                "done": "done", "failed": "failed", "cancel": "cancelled", "skip": "skipped",
                "refused": "refused", "wait": "waiting"}


def human_elapsed(seconds: float) -> str:
    """``45s``, ``2m05s``, ``1h02m``: elapsed time for a log line. Pure."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def heartbeat_line(beat: CellBeat) -> str:
    return (f"{'beat':>7}  {beat.cell_id}  {human_elapsed(beat.elapsed)} {beat.phase}  "
            f"log: {beat.line or '-'}")


class ProgressDisplay:
    """Events and heartbeats on stderr, as text (on a terminal under a live status line, off
    one with heartbeat lines) or as JSON lines."""

    def __init__(self, total: int = 0, stream: IO[str] | None = None,
                 log_format: str = "text") -> None:
        self.stream = stream or sys.stderr
        self.jsonl = log_format == "jsonl"
        self.tty = self.stream.isatty() and not self.jsonl
        self.total = total
        self.running: dict[str, float] = {}
        self.phases: dict[str, str] = {}
        self.finished = 0
        self.failed = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def __enter__(self) -> ProgressDisplay:
        if self.tty:
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._ticker:
            self._ticker.join()
        with self._lock:
            self._clear()

    def set_total(self, total: int) -> None:
        with self._lock:
            self.total = total

    def __call__(self, event: Event) -> None:
        kind, cell_id, message = event
        with self._lock:
            started = self.running.get(cell_id)
            if kind == "start":
                self.running[cell_id] = started = time.monotonic()
            elif kind in ("done", "failed", "cancel"):
                self.running.pop(cell_id, None)
                self.phases.pop(cell_id, None)
                self.finished += 1
                self.failed += kind == "failed"
            if self.jsonl:
                elapsed = None if started is None else time.monotonic() - started
                self._write(jsonl_line(kind, cell_id, message, elapsed=elapsed,
                                       phase=EVENT_PHASES.get(kind)))
            else:
                self._write(f"{kind:>7}  {cell_id}  {message}")

    def beat(self, beat: CellBeat) -> None:
        with self._lock:
            self.phases[beat.cell_id] = beat.phase
            if self.jsonl:
                self._write(jsonl_line("heartbeat", beat.cell_id, beat.line,
                                       elapsed=beat.elapsed, phase=beat.phase))
            elif not self.tty:
                self._write(heartbeat_line(beat))

    def notice(self, message: str) -> None:
        with self._lock:
            self._write(jsonl_line("notice", None, message) if self.jsonl else message)

    def _write(self, line: str) -> None:
        self._clear()
        self.stream.write(line + "\n")
        self._status()

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                self._clear()
                self._status()

    def _clear(self) -> None:
        if self.tty:
            self.stream.write("\r\x1b[K")
            self.stream.flush()

    def _status(self) -> None:
        if not self.tty or not self.running:
            self.stream.flush()
            return
        now = time.monotonic()
        busy = ", ".join(f"{c} {now - t:.0f}s" + (f" {self.phases[c]}" if c in self.phases
                                                  else "")
                         for c, t in sorted(self.running.items()))
        line = f"[{self.finished}/{self.total}] failed {self.failed} | running: {busy}"
        self.stream.write(line[: max(20, _columns() - 1)])
        self.stream.flush()


def _columns() -> int:
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns or 100
    except (OSError, ValueError):
        return 100


def render_precompile(report: PrecompileReport) -> str:
    rows = [[c.cell_id, c.status if c.status != "failed" else f"failed({c.exit_status})",
             "-" if c.seconds is None else f"{c.seconds:.1f}",
             "-" if c.files is None else c.files,
             "-" if c.total_bytes is None else human_bytes(c.total_bytes),
             c.verify.status if c.verify else "-"] for c in report.cells]
    table = format_table(["CELL", "STATUS", "FIRST CALL S", "FILES", "SIZE", "VERIFY"], rows)
    counts = ", ".join(f"{report.count(s)} {s}" for s in ("published", "exists", "skipped",
                                                          "failed", "refused", "cancelled")
                       if s not in ("refused", "cancelled") or report.count(s))
    refused = [c for c in report.cells if c.status == "refused"]
    if refused:
        table += "\n\n" + "\n".join(f"refused {c.cell_id}: {c.error}" for c in refused)
    return (f"{table}\n\n{counts} in {report.seconds:.1f} s "
            f"(fingerprint {report.fingerprint_key[:12]}, store {report.store_url})")


PRECOMPILE_HELP = """\
Warm every cell of MATRIX not yet cached for this host's fingerprint, and publish.

Each cell is warmed in its own worker process with fresh, empty cache roots and the
backend's cache variables set before torch is imported: the declared pipeline is loaded
with from_pretrained, moved to the device, compiled per mode and called once at the
cell's shape and batch. The files it left in the cache roots (never locks or temp files)
are published as an entry and indexed. A failed, crashed or timed-out warm-up is recorded
as a failed cell with its exit status and log tail, and nothing is published for it.
Cells whose entry already exists are skipped, so a rerun does nothing.

A tensor-parallel cell (tp > 1, neuron) is warmed by tp ranks under `torchrun
--standalone --nproc_per_node=TP`, sharing one cache dir and lock dir, so each graph is
compiled once; it yields one entry.

With --claim, every worker started with the same command on the same index (a CI
matrix, a Kubernetes Indexed Job, a SLURM array: see tools/launch/) takes the next cell
nobody has an entry or a live lease for, holds a lease with heartbeats while compiling,
and releases it when the entry is published or the cell failed (retried up to --retries
times across the fleet). A worker whose own cells are done waits while other cells are
still leased, and re-claims any whose lease expires (its holder died); it exits when
nothing is left. --shard splits cells statically instead; the two do not mix.

SIGTERM or SIGINT (a cancelled CI job, a deleted pod, a preempted SLURM job, Ctrl-C) stops
the run: every compile process group is ended, the cells are reported cancelled, --claim
leases are released as cancelled (no retry spent: the cell is claimable at once), and the
command exits 143 (SIGTERM) or 130 (SIGINT) after a one-line summary on stderr. A second
signal ends it at once. Compile processes never outlive their runner, a SIGKILLed one
included (Linux).

Progress goes to stderr, the result table (or JSON) to stdout. On a terminal a live
status line shows each running cell's elapsed time and phase. Off a terminal (a CI log,
kubectl logs, a SLURM output file) each running cell gets a heartbeat line every
--heartbeat seconds (default 30): elapsed time, phase (starting, importing, loading,
compiling, publishing, verifying) and the worker's last log line, trimmed; with --claim a
worker waiting for a lease says so as often ("waiting for a lease: N cell(s) held by other
runners"). --log-format jsonl writes every event and heartbeat as one JSON object per line
instead.

Exits 1 if any cell failed (after trying every other cell), or if --verify found a
restored entry that still compiled; 5 if this host's fingerprint cannot be used (neuron
target unknown: give --target or set the target variable); 2 if the interpreter lacks what
the backend needs, unless --allow-missing-packages (not --force: that one re-warms cells
that have an entry).

MATRIX is registered in the index under its `name` (coverage and the dashboard follow the
registered matrix). An edited copy that kept the `name` of a registered matrix with other
content is refused (exit 2, naming the matrix, its registered digest and the file) before
any cell is warmed, unless --replace-matrix makes it the new current version.

\b
Examples:
  neffcache precompile matrix.toml
  neffcache precompile matrix.toml --cells 'flux2-klein/compile/*' --workers 2
  neffcache precompile matrix.toml --shard 0/4 --timeout 3600   # CI job 1 of 4
  neffcache precompile matrix.toml --claim --timeout 3600       # any number of workers
  neffcache precompile matrix.toml --claim --heartbeat 60 --log-format jsonl 2> log.jsonl
  neffcache precompile matrix.toml --compile-only --target trn2  # no Trainium here
  neffcache precompile matrix.toml --python /opt/venv/bin/python  # torch lives there
  neffcache precompile matrix.toml --verify --json | jq '.cells[] | {cell_id, status}'
  neffcache precompile matrix-v2.toml --replace-matrix  # same `name`, edited: version 2

JSON output: {"matrix", "backend", "fingerprint_key", "store", "run_id", "seconds",
"counts": {"published", "exists", "skipped", "failed", "refused"}, "stopped": null |
{"running", "cancelled", "released"}, "cells": [{"cell_id", "cell_key", "entry_key",
"status" (published, exists, skipped, failed, refused, cancelled), "seconds",
"wall_seconds", "files", "total_bytes", "bytes_uploaded", "exit_status", "error",
"log_tail", "verify": null | {"status" (hit, compiled, verify-failed), "seconds",
"restore_seconds", "error", "compiled"}}]}.
"""


@click.command("precompile", help=PRECOMPILE_HELP)
@click.argument("matrix", type=click.Path(dir_okay=False))
@shared("cells")
@workers_option("PrecompileRequest", 1, "Cells warmed at the same time, each in its own process.")
@click.option("--shard", metavar="I/N", default=None,
              help="Only shard I of N (0 <= I < N; cells sorted by id, round-robin), for CI "
                   "matrix jobs.")
@click.option("--claim", is_flag=True,
              help="Take cells one at a time from the index's claim queue, so each cell is "
                   "compiled once (see above). Needs a shared index (Postgres; SQLite for "
                   "workers on one host).")
@click.option("--lease", "lease_seconds", type=ranged("PrecompileRequest", "lease_seconds"),
              default=300.0, show_default=True, metavar="SECONDS",
              help="--claim: a lease not renewed for this long (database clock) expires; "
                   "heartbeats renew it every third of it while the cell compiles.")
@click.option("--retries", type=ranged("PrecompileRequest", "retries"),
              default=2, show_default=True,
              help="--claim: a failed cell is retried at most this often across all workers, "
                   "then left failed with its log tail.")
@click.option("--force", is_flag=True, help="Warm cells even if their entry already exists.")
@click.option("--timeout", type=ranged("PrecompileRequest", "timeout"),
              default=None, metavar="SECONDS",
              help="Kill a cell's warm-up after this long and record it as failed.")
@click.option("--verify", is_flag=True,
              help="Restore each new entry into a new directory and warm it again in a fresh "
                   "process; it must compile nothing (recorded in the index).")
@click.option("--target", type=click.Choice(list(neuron_env.TARGETS)), default=None,
              help=f"neuron: compile for this target ({neuron_env.PLATFORM_TARGET}); it also "
                   f"enters the fingerprint.")
@click.option("--compile-only", is_flag=True,
              help=f"neuron: compile without running on a NeuronCore "
                   f"({neuron_env.COMPILE_ONLY}={neuron_env.COMPILE_ONLY_ON}), on a host without "
                   f"Trainium; needs --target. Eager cells are refused (their NEFFs only exist "
                   f"once ops run on a device) and reported as such; if every selected cell is "
                   f"refused the command exits 2.")
@click.option("--workdir", type=click.Path(file_okay=False), default=None,
              help="Where the per-cell cache roots and logs go (default: a temp directory).")
@click.option("--keep-workdir", is_flag=True, help="Keep cache roots and logs after the run.")
@shared("allow_missing_packages", "python", "signing_key")
@click.option("--replace-matrix", is_flag=True,
              help="Register MATRIX as the current version of its `name` even when the index "
                   "holds other content under that name (see above).")
@click.option("--heartbeat", "heartbeat_seconds",
              type=ranged("PrecompileRequest", "heartbeat_seconds"), default=30.0,
              show_default=True, metavar="SECONDS",
              help="How often a heartbeat line is written per running cell (see above). "
                   "0: none.")
@shared("log_format", "store", "index", "json")
def precompile(as_json: bool, log_format: str, **params: Any) -> None:
    from neffcache.precompile import PrecompileRequest
    from neffcache.precompile import precompile as run_precompile

    display = ProgressDisplay(log_format=log_format)
    with stop_on_signals() as stop, display:
        result = run_precompile(PrecompileRequest(
            **params, notice=display.notice, progress=display, selected=display.set_total,
            stop=stop.event, heartbeat=display.beat))
    if as_json:
        emit_json(result.to_json())
    else:
        click.echo(render_precompile(result.report))
    if stop.signal_name is not None and stop.exit_code is not None:
        s = result.report.stopped
        running, cancelled, released = (s.running, s.cancelled, s.released) if s else (0, 0, 0)
        display.notice(f"neffcache: stopped by {stop.signal_name}: {running} cell(s) running, "
                       f"{cancelled} cancelled, {released} lease(s) released")
        raise click.exceptions.Exit(stop.exit_code)
    err = result.error()
    if err is not None:
        if display.jsonl:  # the "Error:" line that follows is text, as for every command
            display.notice(f"error: {err}")
        raise err


@click.command("warm", epilog=EXIT_CODE_HELP)
@click.argument("matrix", metavar="MATRIX", type=click.Path(dir_okay=False))
@click.option("--cache", "cache", required=True, metavar="DIR",
              type=click.Path(file_okay=False),
              help="The directory `neffcache restore --to DIR` filled: each cache root R is "
                   "DIR/R. Warmed in place, never copied.")
@shared("cells")
@click.option("--strict", is_flag=True,
              help="Exit 3 when any cell compiled (a cache miss), for health checks.")
@click.option("--timeout", type=ranged("WarmRequest", "timeout"), default=None, metavar="SECONDS",
              help="Kill a cell's warm-up after this long (reported as failed).")
@shared("python", "index", "json")
def warm(as_json: bool, **params: Any) -> None:
    """Run each declared cell's first call against the restored cache in DIR and report any
    cell that compiled.

    Meant for an instance right after `neffcache restore MATRIX --to DIR`: each cell (or
    each cell matching --cells) is warmed in turn in a fresh worker process whose cache
    variables point at DIR itself, exactly as the inference service will see it: the
    pipeline is loaded, compiled per mode and called once at the cell's shape and batch. A
    cell that left new or rewritten files in the cache roots, or moved a compile counter,
    compiled: its entry is missing, incomplete or built for another environment. What it
    compiled stays in DIR (the service benefits), and `neffcache capture` can back-fill it.
    Cells run one at a time, since they share DIR.

    Without --strict a cell that compiled is reported and the exit is 0; with --strict it
    exits 3. A cell whose warm-up failed, crashed or timed out always exits 1. When an index
    is configured (or the embedded one exists) each cell's result is recorded on its entry
    (verified: hit or compiled) within 2 seconds; an index error is only a warning, and the
    results wait in the report spool (DIR/.neffcache-entries/report-spool, or
    NEFFCACHE_REPORT_SPOOL) until the next warm that reaches the index records them.

    --json prints: matrix, backend, fingerprint_key, cache_dir, seconds, counts {hit,
    compiled, failed}, cells [{cell_id, cell_key, entry_key, status, seconds, wall_seconds,
    compiled (the evidence: reasons, new_files, ...), error, log_tail}].

    \b
    Examples:
      neffcache restore matrix.toml --to /var/cache/neffcache
      neffcache warm matrix.toml --cache /var/cache/neffcache --strict
      neffcache warm matrix.toml --cache /var/cache/neffcache --python /opt/venv/bin/python
      neffcache warm matrix.toml --cache /var/cache/neffcache --cells 'flux2-klein/*' --json
    """
    from neffcache.precompile import WarmRequest, check_warm

    result = check_warm(WarmRequest(**params, notice=progress,
                                    progress=lambda e: progress(f"{e[0]:>8}  {e[1]}  {e[2]}")))
    finish(result, as_json, lambda: render_warm(result.to_json()))


def render_warm(doc: dict[str, Any]) -> str:
    rows = [[c["cell_id"], c["status"].upper() if c["status"] != "hit" else "hit",
             "-" if c["seconds"] is None else f"{c['seconds']:.1f}",
             c["error"] or "; ".join((c["compiled"] or {}).get("reasons") or []) or "-"]
            for c in doc["cells"]]
    counts = doc["counts"]
    return (format_table(["CELL", "RESULT", "FIRST CALL S", "DETAIL"], rows) + "\n\n"
            f"{counts['hit']} hit, {counts['compiled']} compiled, {counts['failed']} failed "
            f"against {doc['cache_dir']} [fingerprint {doc['fingerprint_key'][:12]}]")
