"""The migrations ship in the wheel: build it, install it into a fresh venv, and run
`neffcache db upgrade` from outside the checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

from sqlalchemy import create_engine, inspect

from neffcache.index import SCHEMA_REVISION

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "neffcache", "migrations")


def sh(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None,
       timeout: int = 600) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done


def _has_modern_setuptools() -> bool:
    """What pyproject.toml's build-system requires (setuptools builds wheels itself)."""
    try:
        import setuptools
    except ImportError:
        return False
    return int(setuptools.__version__.split(".")[0]) >= 77


def build_wheel(tmp: Path) -> Path:
    """Build from a copy of the sources, so the checkout gets no build/ or egg-info."""
    src = tmp / "src"
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif path.exists():
            src.mkdir(exist_ok=True)
            shutil.copy2(path, src / name)
    isolation = ["--no-build-isolation"] if _has_modern_setuptools() else []
    sh(sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-w", tmp / "dist", src)
    (wheel,) = (tmp / "dist").glob("neffcache-*.whl")
    return wheel


def make_venv(tmp: Path) -> Path:
    """A fresh venv that sees the system site-packages and, when the tests run inside a venv
    themselves, that venv's packages too (appended after the venv's own, by a .pth)."""
    venv = tmp / "venv"
    sh(sys.executable, "-m", "venv", "--system-site-packages", venv)
    python = venv / "bin" / "python"
    site = sh(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(site.stdout.strip(), "zz_outer_env.pth").write_text("\n".join(sorted(ours)) + "\n")
    return venv


def install_wheel(venv: Path, wheel: Path) -> None:
    """Install ``wheel`` alone into ``venv``, even though the outer venv's neffcache (an
    editable install, whose metadata make_venv's .pth makes visible) looks installed."""
    sh(venv / "bin" / "python", "-m", "pip", "install", "--no-deps", "--no-index",
       "--ignore-installed", "-q", wheel)


def test_db_upgrade_from_an_installed_wheel(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert "neffcache/migrations/env.py" in names
    assert "neffcache/migrations/script.py.mako" in names
    assert any(n.startswith("neffcache/migrations/versions/0001") for n in names)

    venv = make_venv(tmp_path)
    install_wheel(venv, wheel)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    where = sh(venv / "bin" / "python", "-c",
               "import neffcache.migrations as m; print(m.__file__)", cwd=outside, env=env)
    assert where.stdout.strip().startswith(str(venv))  # the wheel's copy, not the checkout

    db = outside / "data" / "index.db"
    url = f"sqlite:///{db}"
    done = sh(venv / "bin" / "neffcache", "db", "upgrade", "--index", url, "--json",
              cwd=outside, env=env)
    assert json.loads(done.stdout)["to"] == SCHEMA_REVISION
    engine = create_engine(url)
    assert {"entries", "cells", "fingerprints", "entry_files", "blobs", "cell_failures",
            "precompile_runs", "restore_reports", "matrices", "matrix_cells", "cell_claims"} <= set(
        inspect(engine).get_table_names())
    engine.dispose()
    sh(venv / "bin" / "neffcache", "db", "current", "--index", url, "--check",
       cwd=outside, env=env)
