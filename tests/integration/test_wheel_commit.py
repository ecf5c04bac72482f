"""A build from a git checkout names its commit: `python -m build` (the sdist, then the wheel
from the sdist, where there is no .git) on a throwaway git repository holding this
checkout's build files, the wheel installed into a fresh venv, and its `neffcache --version`
run outside the checkout. A build from a tree that is not a git checkout names none."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from tests.integration.test_wheel_migrations import ROOT, SOURCES, install_wheel, make_venv, sh

GIT = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
       "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}


def _checkout(tmp: Path) -> Path:
    """A git repository with the files a build reads, committed once."""
    repo = tmp / "repo"
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            repo.mkdir(exist_ok=True)
            shutil.copy2(path, repo / name)
    env = {**os.environ, **GIT}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "build me"]):
        sh("git", "-C", repo, *args, env=env)
    return repo


def _build(repo: Path, out: Path) -> tuple[Path, Path]:
    sh(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, repo)
    (sdist,) = out.glob("neffcache-*.tar.gz")
    (wheel,) = out.glob("neffcache-*.whl")
    return sdist, wheel


def _recorded(sdist: Path, wheel: Path) -> tuple[str, str]:
    with tarfile.open(sdist) as tar:
        names = [n for n in tar.getnames() if n.endswith("neffcache/_commit.txt")]
        in_sdist = tar.extractfile(names[0]).read().decode() if names else ""  # type: ignore[union-attr]
    with zipfile.ZipFile(wheel) as zf:
        in_wheel = zf.read("neffcache/_commit.txt").decode() \
            if "neffcache/_commit.txt" in zf.namelist() else ""
    return in_sdist.strip(), in_wheel.strip()


def test_the_installed_wheel_names_the_commit_it_was_built_from(tmp_path: Path) -> None:
    repo = _checkout(tmp_path)
    head = sh("git", "-C", repo, "rev-parse", "HEAD").stdout.strip()
    sdist, wheel = _build(repo, tmp_path / "dist")
    assert _recorded(sdist, wheel) == (head, head)
    assert "_commit.txt" not in {p.name for p in (repo / "neffcache").iterdir()}  # tree clean

    venv = make_venv(tmp_path)
    install_wheel(venv, wheel)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = sh(venv / "bin" / "neffcache", "--version", cwd=outside, env=env)
    assert done.stdout == f"neffcache 0.1.0 (commit {head})\n"


def test_a_changed_checkout_is_dirty_and_a_plain_tree_names_no_commit(tmp_path: Path) -> None:
    repo = _checkout(tmp_path)
    head = sh("git", "-C", repo, "rev-parse", "HEAD").stdout.strip()
    with open(repo / "README.md", "a") as fh:
        fh.write("\nedited\n")
    assert _recorded(*_build(repo, tmp_path / "dirty")) == (f"{head}-dirty",) * 2
    shutil.rmtree(repo / ".git")
    assert _recorded(*_build(repo, tmp_path / "plain")) == ("", "")
    assert subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                          check=False).returncode != 0
