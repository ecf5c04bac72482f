"""Process-wide settings made at the CLI edge: open-file limit, cyclic GC, signals, process exit."""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

_FREEZE_REGISTERED = False


def raise_open_file_limit() -> int:
    """Raise the soft open-file limit to the hard one (as Go does); the limit in force. 1,024 is
    common, and 193 pack threads of 32 files each need ~6,000."""
    import resource

    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return 1024
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1 << 16) if soft != resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(OSError, ValueError):  # not permitted: live within the soft one
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    return soft


def without_cyclic_gc(fn: Callable[..., None]) -> Callable[..., None]:
    """The command with the cyclic GC off (it cost a 20,000-row coverage ~14% of the CPU, a large
    restore ~5%), what exists at exit frozen (the final collection skips it, ~0.1 s)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        global _FREEZE_REGISTERED
        enabled = gc.isenabled()
        gc.disable()
        if not _FREEZE_REGISTERED:
            atexit.register(gc.freeze)
            _FREEZE_REGISTERED = True
        try:
            fn(*args, **kwargs)
        finally:
            if enabled:
                gc.enable()

    return wrapper


class stop_on_signals:  # noqa: N801 - used as a context manager, named like one
    """SIGTERM and SIGINT set ``stop.event`` (a library call's ``stop``) instead of ending the
    process; a second one ends it at once. Main thread only (elsewhere does nothing)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> stop_on_signals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    @property
    def signal_name(self) -> str | None:
        return signal.Signals(self.signum).name if self.signum is not None else None

    @property
    def exit_code(self) -> int | None:
        return 128 + self.signum if self.signum is not None else None

    def _handle(self, signum: int, frame: object) -> None:
        if self.signum is not None:  # asked twice: stop waiting for a graceful end
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.signum = signum
        self.event.set()  # only flags: the main thread never waits on this event's lock


def exit_process(code: int) -> None:
    """``sys.exit``, or ``os._exit`` after a flush while a non-daemon thread runs (a worker's
    store call hung past the deadline), so a --deadline holds whatever the server does."""
    import sys
    import time

    waiting = [t for t in threading.enumerate()
               if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    until = time.monotonic() + 0.05  # idle pool threads end at once; a hung one does not
    for t in waiting:
        t.join(max(0.0, until - time.monotonic()))
    if any(t.is_alive() for t in waiting):
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)
    sys.exit(code)
