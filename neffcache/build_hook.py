"""The build hook (loaded from this file alone): records the git commit in ``_commit.txt``."""

from __future__ import annotations

import subprocess
from pathlib import Path

from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

COMMIT_FILE = Path("neffcache", "_commit.txt")


def _git_commit() -> str:
    """HEAD, with ``-dirty`` when tracked files changed."""
    here = Path(__file__).resolve().parents[1]
    if not (here / ".git").exists():
        return ""
    try:
        head = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain",
                                "--untracked-files=no"], check=True, capture_output=True,
                               text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return head + ("-dirty" if dirty else "")


def _write(root: str) -> None:
    # the sdist's record first: a wheel built from it names the same commit
    commit = COMMIT_FILE.read_text().strip() if COMMIT_FILE.exists() else _git_commit()
    if commit:
        target = Path(root, COMMIT_FILE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(commit + "\n")


class BuildPy(build_py):
    """build_py that writes the commit into the built package (not into an editable one)."""

    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            _write(self.build_lib)


class Sdist(sdist):
    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        _write(base_dir)
