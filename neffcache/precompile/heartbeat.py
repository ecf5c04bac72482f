"""Heartbeats: what each running cell is doing, told at an interval by a thread of the run."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from neffcache.precompile.launch import tail
from neffcache.precompile.worker import PHASE_MARK

STARTING, PUBLISHING, VERIFYING = "starting", "publishing", "verifying"
LINE_CHARS = 200  # a beat's log line is trimmed to this many characters
_TAIL_BYTES = 8192  # what a beat reads of the log's end
_T = TypeVar("_T", bound="Ticker")


class Ticker:
    """Calls ``tick`` every ``interval`` seconds on a daemon thread, from ``start`` until
    ``stop`` or until ``tick`` returns False: the one loop of leases, intents and beats."""

    def __init__(self, interval: float, name: str) -> None:
        self.tick_interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def tick(self) -> bool:
        raise NotImplementedError

    def start(self) -> None:
        if self._thread.ident is None:  # once: IntentHolder starts itself on construction
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def __enter__(self: _T) -> _T:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.wait(self.tick_interval):
            if not self.tick():
                return


@dataclass(frozen=True, slots=True)
class CellBeat:
    """One heartbeat of a running cell."""

    cell_id: str
    elapsed: float  # seconds since its worker started
    phase: str
    line: str  # the worker's last non-empty log line ("" before the first)

    def to_json(self) -> dict[str, object]:
        return {"cell_id": self.cell_id, "elapsed": round(self.elapsed, 1),
                "phase": self.phase, "line": self.line}


def worker_phase(log_text: str) -> str | None:
    """The latest phase a worker announced in this log text (None: none yet). Pure."""
    _, found, after = log_text.rpartition(PHASE_MARK)
    return (after.split("\n", 1)[0].strip() or None) if found else None


def last_log_line(log_text: str, limit: int = LINE_CHARS) -> str:
    """The last non-empty line (carriage-return progress bars: its last segment), trimmed
    to ``limit`` characters with an ellipsis. Pure."""
    for raw in reversed(log_text.splitlines()):
        line = raw.rsplit("\r", 1)[-1].strip()
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


@dataclass(slots=True)
class _Watched:
    started: float
    log: Path
    phase: str
    due: float  # when its next beat is due (monotonic)


class Beats(Ticker):
    """The running cells of one run and the thread that tells their heartbeats. Inert (no
    thread, nothing told) when ``interval`` is 0 or ``tell`` is None."""

    def __init__(self, interval: float, tell: Callable[[CellBeat], None] | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval if tell is not None else 0.0
        super().__init__(max(0.05, min(1.0, self.interval / 4)), "neffcache-beats")
        self._tell = tell or (lambda beat: None)
        self._clock = clock
        self._cells: dict[str, _Watched] = {}
        self._lock = threading.Lock()

    def watch(self, cell_id: str, log: Path) -> None:
        now = self._clock()
        with self._lock:
            self._cells[cell_id] = _Watched(now, log, STARTING, now + self.interval)

    def phase(self, cell_id: str, phase: str, log: Path | None = None) -> None:
        """The run's own phase of a cell (and, say for a verify run, another log to read)."""
        with self._lock:
            if (w := self._cells.get(cell_id)) is not None:
                w.phase, w.log = phase, log or w.log

    def forget(self, cell_id: str) -> None:
        with self._lock:
            self._cells.pop(cell_id, None)

    def due(self) -> list[CellBeat]:
        """The beats due now (each cell's next one moves an interval on)."""
        if self.interval <= 0:
            return []
        now = self._clock()
        with self._lock:
            ready = [(cid, w, w.phase, w.log) for cid, w in self._cells.items() if w.due <= now]
            for _, w, _, _ in ready:
                w.due += self.interval * max(1, int((now - w.due) // self.interval) + 1)
        beats = []
        for cid, w, phase, log in ready:
            text = tail(log, _TAIL_BYTES)
            if phase == STARTING:
                phase = worker_phase(text) or STARTING
            beats.append(CellBeat(cid, now - w.started, phase, last_log_line(text)))
        return beats

    def start(self) -> None:  # inert without an interval
        if self.interval > 0:
            super().start()

    def tick(self) -> bool:
        try:
            for beat in self.due():
                self._tell(beat)
        except Exception:  # noqa: BLE001 - say, stderr closed: the run goes on, untold
            return False
        return True
