"""Start a warm-up worker for one cell and collect its outcome (the parent side of the worker)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neffcache.backends import Backend, cache_environment, root_dirs
from neffcache.precompile.hit_check import (
    CompileActivity,
    FileState,
    Verdict,
    diff_files,
    judge_activity,
)
from neffcache.precompile.worker import WorkerSpec, die_with_parent, launch_command

LOG_TAIL_CHARS = 16_000
WORKER_LOG = "worker.log"  # in the worker's directory
TERMINATED_STATUS = 143  # 128 + SIGTERM: a worker whose runner was already gone
TIMEOUT_STATUS = 124  # what coreutils' timeout(1) reports; the log tail says "timed out"
STOP_GRACE_SECONDS = 40.0  # SIGTERM; torchrun gives its ranks 30 s to stop, then SIGKILLs them
_PACKAGE = Path(__file__).resolve().parent.parent  # this neffcache package's directory
_CHILD_DEFAULTS = {"PYTHONUNBUFFERED": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
# Workers running now (they run in their own sessions, so a Ctrl-C does not reach them).
_RUNNING: set[subprocess.Popen[bytes]] = set()
_RUNNING_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class WorkerOutcome:
    """How one worker run ended. ``ok``: exit 0 and a complete result document."""

    cell_id: str
    ok: bool
    exit_status: int | None
    timed_out: bool
    wall_seconds: float
    result: Mapping[str, Any] | None
    log_tail: str
    base: Path  # where its cache roots are (<base>/<root name>)

    @property
    def seconds(self) -> float | None:
        """The first call's own duration (compile + run)."""
        seconds = (self.result or {}).get("seconds")
        return float(seconds) if isinstance(seconds, (int, float)) else None

    @property
    def error(self) -> str:
        if self.timed_out:
            return f"timed out after {self.wall_seconds:.0f} s"
        if self.result and self.result.get("error"):
            return str(self.result["error"])
        last = [ln for ln in self.log_tail.splitlines() if ln.strip()]
        return last[-1] if last else f"exit status {self.exit_status}"

    def verdict(self) -> Verdict | None:
        """Did this run compile anything? (None when it did not finish.)"""
        return verdict_of(self.result) if self.ok and self.result else None


def verdict_of(result: Mapping[str, Any]) -> Verdict:
    def states(rows: Any) -> list[FileState]:
        return [FileState(str(r[0]), str(r[1]), int(r[2]), int(r[3])) for r in rows or ()]

    files = diff_files(states(result.get("files_before")), states(result.get("files_after")))
    return judge_activity(files, CompileActivity.from_json(result.get("activity") or {}))


def worker_environment(backend: Backend, base: Path, environ: Mapping[str, str],
                       extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Ours, plus extras, with the cache variables pointing at ``base`` (they win)."""
    return {**_CHILD_DEFAULTS, **environ, **(extra or {}), **cache_environment(backend, str(base))}


def import_path(workdir: Path, environ: Mapping[str, str]) -> str:
    """``PYTHONPATH`` for a worker under another interpreter: ``workdir/import`` (only a link to
    this package: site-packages would shadow that interpreter's own), then ``environ``'s."""
    shim = workdir / "import"
    shim.mkdir(parents=True, exist_ok=True)
    link = shim / "neffcache"
    if not link.is_symlink() or link.resolve() != _PACKAGE:
        link.unlink(missing_ok=True)
        link.symlink_to(_PACKAGE, target_is_directory=True)
    inherited = environ.get("PYTHONPATH", "")
    return os.pathsep.join([str(shim), inherited] if inherited else [str(shim)])


def tail(path: Path, limit: int = LOG_TAIL_CHARS) -> str:
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - limit))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def run_worker(spec: WorkerSpec, backend: Backend, workdir: Path, *,
               environ: Mapping[str, str], timeout: float | None = None,
               python: str | None = None) -> WorkerOutcome:
    """Run one worker in its own session to completion (or ``timeout`` seconds, then its
    process group is stopped) and collect its outcome; creates the roots under ``spec.base``
    (empty, unless the caller restored into them); ``workdir`` holds spec, log and result."""
    workdir.mkdir(parents=True, exist_ok=True)
    for d in root_dirs(backend, spec.base).values():
        Path(d).mkdir(parents=True, exist_ok=True)
    spec_path = workdir / "spec.json"
    spec_path.write_text(json.dumps(spec.to_json(), indent=2, sort_keys=True), encoding="utf-8")
    log_path = workdir / WORKER_LOG
    result_path = Path(spec.result_path)
    result_path.unlink(missing_ok=True)
    env = worker_environment(backend, Path(spec.base), environ)
    command = launch_command(spec_path, spec.cell, backend, python=python or sys.executable)
    if python is not None:
        env["PYTHONPATH"] = import_path(workdir, env)
    started = time.monotonic()
    timed_out = False
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, env=env,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_child_guard())
        with _RUNNING_LOCK:
            _RUNNING.add(proc)
        try:
            status: int | None = proc.wait(timeout=timeout)
        except BaseException as exc:  # a timeout, or Ctrl-C: its whole group, then reap it
            _stop_groups([proc], STOP_GRACE_SECONDS)
            proc.wait()
            if not isinstance(exc, subprocess.TimeoutExpired):
                raise
            timed_out, status = True, TIMEOUT_STATUS
        finally:
            with _RUNNING_LOCK:
                _RUNNING.discard(proc)
    wall = time.monotonic() - started
    if timed_out:
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"\nneffcache: worker timed out after {timeout} s and was killed\n")
    result = _read_result(result_path)
    ok = status == 0 and bool(result and result.get("ok"))
    return WorkerOutcome(cell_id=spec.cell.id, ok=ok, exit_status=status, timed_out=timed_out,
                         wall_seconds=wall, result=result, log_tail=tail(log_path),
                         base=Path(spec.base))


def _child_guard() -> Callable[[], None] | None:
    """What the child runs before exec: die with this process (a worker never outlives its
    runner, even a SIGKILLed one), and exit at once if it is already gone. None: no way."""
    if (set_pdeathsig := die_with_parent()) is None:
        return None
    parent = os.getpid()

    def guard() -> None:  # in the forked child: only a libc call and two syscalls
        set_pdeathsig()
        if os.getppid() != parent:  # the runner died before the call above
            os._exit(TERMINATED_STATUS)

    return guard


def kill_running_workers(grace: float = STOP_GRACE_SECONDS) -> int:
    """End the process group of every worker this process started that still runs; how
    many there were."""
    with _RUNNING_LOCK:
        procs = list(_RUNNING)
    _stop_groups(procs, grace)
    return len(procs)


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _stop_groups(procs: list[subprocess.Popen[bytes]], grace: float) -> None:
    """SIGTERM each group; SIGKILL the groups whose leader has not exited after ``grace``."""
    for proc in procs:
        _signal_group(proc, signal.SIGTERM)
    until = time.monotonic() + grace
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.0, until - time.monotonic()))
        _signal_group(proc, signal.SIGKILL)  # stragglers in the group, or the leader itself


def _read_result(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None
