"""`--python`: the fingerprint describes the inference service's interpreter (a real second
environment without neffcache), not the one running neffcache; restore matches entries built
under it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import CELL_64, Cli, restored_tree
from tests.support.synthetic import make_neff_cache

# Versions no real environment has, so a match can only come from the service's metadata.
SERVICE_VERSIONS = {"torch": "0.0.1+service", "diffusers": "0.0.2", "transformers": "0.0.3",
                    "torch-neuronx": "0.0.4", "neuronx-cc": "0.0.5"}


def _run(venv_python: str, code: str) -> str:
    return subprocess.run([venv_python, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.fixture
def service_python(tmp_path: Path) -> Path:
    """A venv (no pip, no neffcache) whose site-packages holds fake dist-info METADATA and a
    `torch` package that refuses to be imported. Built from the system Python when there is
    one (so even the Python version differs from neffcache's), else from this one."""
    system = Path("/usr/bin/python3")
    base = str(system) if system.is_file() and os.access(system, os.X_OK) else sys.executable
    venv = tmp_path / "service-venv"
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True,
                   capture_output=True)
    python = venv / "bin" / "python"
    site = Path(_run(str(python), "import sysconfig; print(sysconfig.get_paths()['purelib'])"))
    for name, version in SERVICE_VERSIONS.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\n"
                                       f"Version: {version}\n\n", encoding="utf-8")
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text("raise ImportError('torch was imported')\n")
    bare = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # a checkout's own
    missing = subprocess.run([str(python), "-c", "import neffcache"], capture_output=True,
                             cwd=venv, env=bare)  # not the checkout: -c puts cwd on sys.path
    assert missing.returncode != 0  # the service's interpreter has no neffcache
    return python


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "neffcache.cli", *args],
                          env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)


def test_fingerprint_reports_the_service_interpreters_versions(service_python: Path,
                                                               tmp_path: Path) -> None:
    ours = _cli("fingerprint", "--backend", "inductor", "--json")
    theirs = _cli("fingerprint", "--backend", "inductor", "--python", str(service_python),
                  "--json")
    assert ours.returncode == 0 and theirs.returncode == 0, theirs.stderr
    here, there = json.loads(ours.stdout), json.loads(theirs.stdout)
    fields = there["fields"]
    for name in ("torch", "diffusers", "transformers"):
        assert fields[f"version.{name}"] == SERVICE_VERSIONS[name]
        assert here["fields"][f"version.{name}"] != SERVICE_VERSIONS[name]
    assert fields["version.python"] == _run(str(service_python),
                                            "import platform; print(platform.python_version())")
    site = _run(str(service_python), "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    assert fields["torch.path"] == os.path.realpath(Path(site) / "torch")
    assert here["fields"]["torch.path"] != fields["torch.path"]
    # Host facts stay the host's.
    assert {k: fields[k] for k in ("cpu.arch", "cpu.isa", "cpu.threads")} == \
        {k: here["fields"][k] for k in ("cpu.arch", "cpu.isa", "cpu.threads")}
    assert there["python"] == str(service_python) and here["python"] == sys.executable

    # The same interpreter through the variable and through the config file.
    by_env = _cli("fingerprint", "--backend", "inductor", "--json",
                  env={"NEFFCACHE_PYTHON": str(service_python)})
    config = tmp_path / "config.toml"
    config.write_text(f'python = "{service_python}"\n')
    by_file = _cli("fingerprint", "--backend", "inductor", "--json",
                   env={"NEFFCACHE_CONFIG": str(config)})
    assert json.loads(by_env.stdout)["key"] == json.loads(by_file.stdout)["key"] == there["key"]
    # The flag beats the variable.
    flag = _cli("fingerprint", "--backend", "inductor", "--json", "--python", sys.executable,
                env={"NEFFCACHE_PYTHON": str(service_python)})
    assert json.loads(flag.stdout)["key"] == here["key"]


def test_neuron_fingerprint_takes_the_sdk_versions_from_the_service(service_python: Path
                                                                    ) -> None:
    r = _cli("fingerprint", "--backend", "neuron", "--python", str(service_python), "--json",
             env={"NEFFCACHE_INSTANCE_TYPE": "trn2.48xlarge"})
    assert r.returncode == 0, r.stderr
    fields = json.loads(r.stdout)["fields"]
    assert fields["version.torch-neuronx"] == "0.0.4"
    assert fields["version.neuronx-cc"] == "0.0.5"
    assert fields["version.nki"] == "absent" and fields["target"] == "trn2"


@pytest.mark.parametrize("name, needle", [
    ("missing-python", "no such file"), (".", "is a directory"), ("plain", "not executable"),
])
def test_a_bad_interpreter_is_a_usage_error_naming_it(tmp_path: Path, name: str,
                                                      needle: str) -> None:
    (tmp_path / "plain").write_text("not a program\n")
    path = tmp_path if name == "." else tmp_path / name
    r = _cli("fingerprint", "--python", str(path))
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"Error: python interpreter {path}: {needle}")


@pytest.mark.s3
def test_restore_with_python_matches_an_entry_built_under_that_fingerprint(
        cli: Cli, matrix: Path, service_python: Path, tmp_path: Path) -> None:
    cache = make_neff_cache(tmp_path / "neff", seed=41, count=8, large=0)
    built = cli("push", "--matrix", str(matrix), "--cell", CELL_64, "--root",
                f"neff={cache.root}", "--python", str(service_python), "--json")
    assert built.code == 0, built.stderr
    service_fp = cli("fingerprint", "--backend", "neuron", "--python", str(service_python),
                     "--json").json
    assert built.json["fingerprint_key"] == service_fp["key"]

    # neffcache's own interpreter has other versions: that entry is not for it (exit 5).
    own = cli("restore", str(matrix), "--to", str(tmp_path / "own"), "--cells", CELL_64,
              "--json")
    assert own.code == 5, own.stderr
    assert own.json["fingerprint_python"] == sys.executable

    out = tmp_path / "out"
    r = cli("restore", str(matrix), "--to", str(out), "--cells", CELL_64, "--json",
            "--python", str(service_python))
    assert r.code == 0, r.stderr
    assert r.json["fingerprint_key"] == service_fp["key"]
    assert r.json["fingerprint_python"] == str(service_python)
    assert restored_tree(out / "neff") == cache.files

    by_env = cli("restore", str(matrix), "--to", str(tmp_path / "env"), "--cells", CELL_64,
                 env={"NEFFCACHE_PYTHON": str(service_python)})
    assert by_env.code == 0, by_env.stderr


@pytest.mark.s3
def test_print_env_comes_out_even_when_the_interpreter_is_bad(cli: Cli, matrix: Path,
                                                              tmp_path: Path) -> None:
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'Fatal Python error: init_fs_encoding' >&2\nexit 1\n")
    broken.chmod(0o755)
    r = cli("restore", str(matrix), "--to", str(tmp_path / "c"), "--print-env",
            "--python", str(broken))
    assert r.code == 2
    assert f"export TORCH_NEURONX_NEFF_CACHE_DIR={tmp_path / 'c' / 'neff'}" in r.stdout
    assert "exited with 1" in r.stderr and "Fatal Python error: init_fs_encoding" in r.stderr
