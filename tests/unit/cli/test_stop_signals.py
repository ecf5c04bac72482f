"""``stop_on_signals``: SIGTERM and SIGINT set the stop event instead of ending the process, the
exit code is 128 + the signal, and the previous handlers come back."""

from __future__ import annotations

import os
import signal

import pytest

from neffcache.cli._process import stop_on_signals


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_sets_the_event_and_the_handlers_come_back(sig: signal.Signals,
                                                            code: int) -> None:
    before = signal.getsignal(sig)
    with stop_on_signals() as stop:
        assert stop.exit_code is None and not stop.event.is_set()
        os.kill(os.getpid(), sig)
        assert stop.event.wait(10)
    assert stop.exit_code == code and stop.signal_name == sig.name
    assert signal.getsignal(sig) == before
