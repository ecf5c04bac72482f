"""Probing an interpreter for real: this one answers like the in-process collection; one that
crashes, answers garbage or hangs is a usage error (exit 2) naming it, within the time bound."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from neffcache.errors import ConfigError, exit_code_for
from neffcache.fingerprint import collect_fingerprint, interpreter_distributions
from neffcache.interpreter import probe_interpreter


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "python"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("backend", ["inductor", "neuron"])
def test_probing_this_interpreter_gives_the_in_process_fingerprint(backend: str) -> None:
    env = {"NEFFCACHE_INSTANCE_TYPE": "trn2.48xlarge", "OMP_NUM_THREADS": "1"}
    assert collect_fingerprint(backend, env, python=sys.executable) == \
        collect_fingerprint(backend, env)


def test_a_bare_name_is_looked_up_on_path(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin")
    facts = probe_interpreter(Path(sys.executable).name, interpreter_distributions("inductor"))
    assert facts.path == sys.executable
    with pytest.raises(ConfigError, match="'no-such-python-here': not found on PATH"):
        probe_interpreter("no-such-python-here", ())


@pytest.mark.parametrize("body, needle", [
    ("echo 'Traceback (most recent call last):' >&2\n"
     "echo \"ModuleNotFoundError: No module named 'importlib.metadata'\" >&2\nexit 1",
     "exited with 1 while reading package versions: ModuleNotFoundError: No module named "
     "'importlib.metadata'"),
    ("echo 'about to fail' >&2\nkill -SEGV $$", "killed by signal 11"),
    ("echo 'Python 2.7.18'", "did not answer like Python 3.8 or later"),
    ("echo 'neffcache-probe:{\"versions\": 3}'", "did not answer like Python 3.8 or later"),
])
def test_a_broken_interpreter_is_a_usage_error(tmp_path: Path, body: str, needle: str) -> None:
    path = _script(tmp_path, body)
    with pytest.raises(ConfigError) as info:
        probe_interpreter(str(path), ("torch",))
    assert str(info.value).startswith(f"python interpreter {path}: ")
    assert needle in str(info.value)
    assert exit_code_for(info.value) == 2
    assert "\n" not in str(info.value)


def test_a_hanging_interpreter_is_stopped_at_the_time_bound(tmp_path: Path) -> None:
    path = _script(tmp_path, "exec sleep 30")
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"no answer within 0.5 s"):
        probe_interpreter(str(path), ("torch",), timeout=0.5)
    assert time.monotonic() - started < 5
