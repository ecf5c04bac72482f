"""tools/launch/Dockerfile's install steps, run as `docker build` runs them, without a Docker
engine: its ARG, ENV, COPY, WORKDIR and RUN instructions are read from the file (never copied
here) and run in order by /bin/sh, with the image's absolute paths under a temporary root and
the build context a directory holding the wheel of this checkout. The base image is a venv
standing in for the Neuron base interpreter (/usr/local/bin/python3): torch, as the base has
it, and the torch_neuronx TEST DOUBLE, nothing else. The build passes with what the
Dockerfile installs, and a copy that forgets one package the workers import fails at the
Dockerfile's own import check, as the real build would. (tomli is installed on Python < 3.11
only: the stand-in runs this machine's Python, so that marker is not exercised here.)"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.integration.test_wheel_migrations import build_wheel, sh

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "tools" / "launch" / "Dockerfile"
NEURONX_DOUBLE = ROOT / "tests" / "support" / "torch_neuronx_double"
# The image's directories the steps write to: under the temporary root here.
IMAGE_DIRS = ("/opt", "/usr/local", "/tmp", "/scratch")
_DIRS = "|".join(map(re.escape, IMAGE_DIRS))
_IMAGE_PATH = re.compile(rf"(?<![\w$}}./-])(?=(?:{_DIRS})(?:/|\b))")


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: comments dropped, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", "\n".join(
        ln for ln in text.splitlines() if not ln.lstrip().startswith("#")))
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1].strip())
            for ln in joined.splitlines() if ln.strip()]


class BuildError(Exception):
    """A RUN instruction exited non-zero: the image would not build."""

    def __init__(self, step: str, code: int, stderr: str) -> None:
        super().__init__(f"RUN {step}\nexit {code}\n{stderr[-4000:]}")
        self.step, self.stderr = step, stderr


@dataclass
class Build:
    """One `docker build` of the Dockerfile's text, its image rooted at ``root``."""

    root: Path
    context: Path
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None

    def rooted(self, text: str) -> str:
        return _IMAGE_PATH.sub(str(self.root), text)

    def expand(self, text: str) -> str:
        """Dockerfile substitution of ${NAME} in ENV, COPY and WORKDIR arguments."""
        return re.sub(r"\$\{(\w+)\}", lambda m: self.env.get(m[1], ""), text)

    def run(self, text: str) -> None:
        """Run every instruction after FROM; raise BuildError at a failing RUN."""
        for op, args in instructions(text):
            if op == "ARG":
                name, _, default = args.partition("=")
                self.env.setdefault(name, self.rooted(default))
            elif op == "ENV":
                name, _, value = args.partition("=")
                self.env[name] = self.expand(self.rooted(value))
            elif op == "COPY":
                *sources, dest = self.expand(self.rooted(args)).split()
                target = Path(dest)
                target.mkdir(parents=True, exist_ok=True)
                for pattern in sources:
                    for found in glob.glob(str(self.context / pattern)):
                        shutil.copy2(found, target)
            elif op == "WORKDIR":
                self.cwd = Path(self.expand(self.rooted(args)))
                self.cwd.mkdir(parents=True, exist_ok=True)
            elif op == "RUN":
                done = subprocess.run(["/bin/sh", "-c", self.rooted(args)], env=self.env,
                                      cwd=self.cwd or self.root, capture_output=True,
                                      text=True, timeout=900)
                if done.returncode != 0:
                    raise BuildError(args, done.returncode, done.stderr)


# Without site's .pth files (editable finders): the packages `import torch` loads, by path.
_TORCH_PACKAGES = """
import os, sys
sys.path.append(sys.argv[1])
import torch
for name in sorted({m.split(".")[0] for m in sys.modules} - set(sys.stdlib_module_names)):
    module = sys.modules[name]
    path = getattr(module, "__file__", None)
    if path:
        print(os.path.dirname(path) if path.endswith("__init__.py") else path)
"""


def base_image(root: Path) -> None:
    """The stand-in for the Neuron base: a venv at <root>/usr/local (so its interpreter is
    /usr/local/bin/python3 in the image) that imports torch (what `import torch` loads, linked
    from this venv) and the torch_neuronx double, and nothing else of this venv."""
    sh(sys.executable, "-m", "venv", root / "usr" / "local")
    keep = root / "base-packages"
    keep.mkdir()
    purelib = sysconfig.get_paths()["purelib"]
    for path in sh(sys.executable, "-S", "-c", _TORCH_PACKAGES, purelib).stdout.split():
        (keep / Path(path).name).symlink_to(path)
    site = sh(root / "usr" / "local" / "bin" / "python3", "-c",
              "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    Path(site, "base.pth").write_text(f"{keep}\n{NEURONX_DOUBLE}\n")


def image_build(tmp_path: Path, text: str, context: Path) -> Build:
    root = tmp_path / "image"
    base_image(root)
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k.startswith("PIP_")}  # this host's index
    env.update(PATH=f"{root}/usr/local/bin:/usr/bin:/bin", HOME=str(home),
               TMPDIR=str(tmp_path))
    return Build(root=root, context=context, env=env)


@pytest.fixture(scope="module")
def context(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The build context the Dockerfile's header makes: a directory holding the wheel."""
    tmp = tmp_path_factory.mktemp("context")
    wheel = build_wheel(tmp)
    context = tmp / "image"
    context.mkdir()
    shutil.copy2(wheel, context)
    return context


def test_the_install_steps_give_the_workers_what_they_import(tmp_path: Path,
                                                             context: Path) -> None:
    build = image_build(tmp_path, DOCKERFILE.read_text(), context)
    build.run(DOCKERFILE.read_text())
    root = build.root
    assert (root / "usr" / "local" / "bin" / "neffcache").resolve() == \
        (root / "opt" / "neffcache" / "bin" / "neffcache")
    assert not (root / "tmp" / "wheels").exists()
    base = build.env["NEFFCACHE_PYTHON"]
    assert base == f"{root}/usr/local/bin/python3"
    # neffcache's own packages stay out of the inference interpreter
    done = subprocess.run([base, "-c", "import sqlalchemy"], capture_output=True, text=True)
    assert done.returncode != 0 and "No module named 'sqlalchemy'" in done.stderr
    version = sh(root / "usr" / "local" / "bin" / "neffcache", "--version")
    assert version.stdout.startswith("neffcache ")


def test_a_build_missing_a_worker_import_fails(tmp_path: Path, context: Path) -> None:
    text = DOCKERFILE.read_text()
    broken = re.sub(r'"diffusers==\$\{DIFFUSERS_VERSION\}"\s*', "", text)
    assert broken != text
    build = image_build(tmp_path, broken, context)
    with pytest.raises(BuildError) as failed:
        build.run(broken)
    assert "No module named 'diffusers'" in failed.value.stderr
    assert "import neffcache.precompile.worker" in failed.value.step  # the import check
