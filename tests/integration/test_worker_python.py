"""``warm --python X`` and ``precompile --python X`` run their workers under X, an interpreter
without neffcache (a wrapper that records each call, then execs the system Python, else this
one, with -S: no site-packages, so no neffcache, click or torch), and fingerprint X, not the
interpreter running neffcache. The ``test-sleep`` TEST BACKEND stands in for torch. Also: the
worker's import chain is the standard library and neffcache alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from neffcache.cli import run
from neffcache.fingerprint import collect_fingerprint
from tests.support.sleep_backend import NAME, cell_ids, register, write_sleep_matrix

ROOT = Path(__file__).resolve().parents[2]
CELL = cell_ids(1)[0]


@pytest.fixture(autouse=True)
def _test_backend() -> None:
    register()


@pytest.fixture
def inference_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """X: records its argv and PYTHONPATH, then runs the system Python (else this one) without
    site-packages.
    PYTHONPATH holds only a link to tests/ (the test worker's module), and the cwd is not the
    checkout, so the workers can import neffcache only through what the launcher adds."""
    only_tests = tmp_path / "only-tests"
    only_tests.mkdir()
    (only_tests / "tests").symlink_to(ROOT / "tests", target_is_directory=True)
    monkeypatch.setenv("PYTHONPATH", str(only_tests))
    monkeypatch.chdir(tmp_path)
    x = tmp_path / "inference" / "bin" / "python"
    x.parent.mkdir(parents=True)
    x.write_text("#!/bin/sh\n"
                 "first=${PYTHONPATH%%:*}\n"
                 "link=$( (readlink \"$first/neffcache\"; ls -A \"$first\") | tr '\\n' ' ')\n"
                 f"printf '%s\\n' \"$* LINK=$link PYTHONPATH=${{PYTHONPATH:-}}\""
                 f" >> {tmp_path}/calls\n"
                 f"exec {_base_python()} -S \"$@\"\n", encoding="utf-8")
    x.chmod(0o755)
    return x


def _base_python() -> str:
    """The system Python when there is one (so even the Python version may differ from
    neffcache's), else this one."""
    system = Path("/usr/bin/python3")
    return str(system) if system.is_file() and os.access(system, os.X_OK) else sys.executable


def _calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "calls").read_text(encoding="utf-8").splitlines()


def _worker_calls(tmp_path: Path) -> list[str]:
    calls = [c for c in _calls(tmp_path) if "-m tests.support.sleep_worker --spec" in c]
    assert calls, _calls(tmp_path)
    for call in calls:
        link = call.split(" LINK=", 1)[1].split(" PYTHONPATH=", 1)[0].split()
        shim, rest = call.split(" PYTHONPATH=", 1)[1].split(os.pathsep, 1)
        assert shim.endswith("/import")
        # its only entry is a link to this neffcache package
        assert link == [str(ROOT / "neffcache"), "neffcache"]
        assert rest == os.environ["PYTHONPATH"]  # the inherited entries kept, after it
    return calls


def _fingerprint_keys(x: Path) -> tuple[str, str]:
    """(X's fingerprint key, this interpreter's): X sees no torch, this venv has it."""
    env = dict(os.environ)
    return (collect_fingerprint(NAME, env, python=str(x)).key,
            collect_fingerprint(NAME, env).key)


def test_precompile_python_runs_the_workers_under_it_and_fingerprints_it(
        tmp_path: Path, inference_python: Path, capsys: pytest.CaptureFixture[str]) -> None:
    matrix = write_sleep_matrix(tmp_path, {CELL: 0.05})
    store = tmp_path / "store"
    code = run(["precompile", str(matrix), "--store", str(store), "--python",
                str(inference_python), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc
    assert [c["status"] for c in doc["cells"]] == ["published"]
    assert len(_worker_calls(tmp_path)) == 1
    theirs, ours = _fingerprint_keys(inference_python)
    assert theirs != ours
    assert doc["fingerprint_key"] == theirs


def test_warm_python_runs_the_workers_under_it_and_fingerprints_it(
        tmp_path: Path, inference_python: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    matrix = write_sleep_matrix(tmp_path, {CELL: 0.05})
    cache = tmp_path / "cache"
    (cache / "neff").mkdir(parents=True)
    monkeypatch.setenv("NEFFCACHE_PYTHON", str(inference_python))  # as neffcache.env sets it
    code = run(["warm", str(matrix), "--cache", str(cache), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc
    assert [c["status"] for c in doc["cells"]] != ["failed"], doc
    assert len(_worker_calls(tmp_path)) == 1
    theirs, ours = _fingerprint_keys(inference_python)
    assert doc["fingerprint_key"] == theirs != ours

    monkeypatch.setenv("NEFFCACHE_PYTHON", str(tmp_path / "nonexistent"))
    assert run(["warm", str(matrix), "--cache", str(cache), "--python", str(inference_python),
                "--json"]) == 0  # --python wins over NEFFCACHE_PYTHON
    capsys.readouterr()
    assert len(_worker_calls(tmp_path)) == 2


def test_without_python_the_worker_runs_under_this_interpreter(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get(
        "PYTHONPATH", "")]).rstrip(os.pathsep))
    matrix = write_sleep_matrix(tmp_path, {CELL: 0.05})
    cache = tmp_path / "cache"
    (cache / "neff").mkdir(parents=True)
    assert run(["warm", str(matrix), "--cache", str(cache), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["fingerprint_key"] == collect_fingerprint(NAME, dict(os.environ)).key


def test_the_worker_imports_only_the_standard_library_and_neffcache(tmp_path: Path) -> None:
    """Under -S (no site-packages: no click, sqlalchemy, obstore) with only neffcache on the
    path, the worker module imports, and nothing outside the standard library is loaded."""
    shim = tmp_path / "import"
    shim.mkdir()
    (shim / "neffcache").symlink_to(ROOT / "neffcache", target_is_directory=True)
    script = ("import sys, neffcache.precompile.worker, neffcache.backends\n"
              "print(sorted({m.split('.')[0] for m in sys.modules}"
              " - set(sys.stdlib_module_names) - {'__main__'}))\n")
    proc = subprocess.run([sys.executable, "-S", "-c", script], cwd=tmp_path,
                          env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(shim)},
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['neffcache']"
