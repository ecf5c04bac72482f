"""How the CLI process ends (``neffcache.cli._process.exit_process``): normally through
``sys.exit``; with a non-daemon thread still blocked (a restore worker whose store call hangs,
left behind at the deadline) at once, its output flushed, instead of waiting for the thread."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROGRAM = """
import atexit, sys, threading
from neffcache.cli._process import exit_process
atexit.register(lambda: print("atexit ran"))
release = threading.Event()
if {hang}:
    threading.Thread(target=release.wait, name="blocked", daemon=False).start()
sys.stdout.write("the report")  # no newline: only a flush gets it out
exit_process(3)
"""


@pytest.mark.parametrize("hang", [False, True], ids=["no-thread", "hung-thread"])
def test_exit_code_and_output_survive_a_hung_thread(hang: bool) -> None:
    # Without exit_process ending the process, the hung thread would block exit forever:
    # the subprocess timeout turns that into a failure instead of a hung test run.
    proc = subprocess.run([sys.executable, "-c", PROGRAM.format(hang=hang)],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 3
    assert proc.stdout.startswith("the report")
    # sys.exit runs atexit handlers; ending at once (only when a thread hangs) does not.
    assert ("atexit ran" in proc.stdout) is (not hang)
