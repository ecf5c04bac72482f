"""End-to-end helpers: the real CLI in subprocesses against S3 on the moto server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

MATRIX = """\
backend = "neuron"
[[pipelines]]
name = "tiny"
class = "diffusers:Flux2KleinPipeline"
model = "/models/tiny-flux2-klein"
mode = "compile"
shapes = ["64x64", "128x128", "256x256"]
"""
CELL_64 = "tiny/compile/64x64/b1/tp1"
CELL_128 = "tiny/compile/128x128/b1/tp1"
CELL_256 = "tiny/compile/256x256/b1/tp1"


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)


Cli = Callable[..., Run]


@pytest.fixture
def matrix(tmp_path: Path) -> Path:
    path = tmp_path / "matrix.toml"
    path.write_text(MATRIX, encoding="utf-8")
    return path


@pytest.fixture
def e2e_env(s3_env: dict[str, str], s3_url: str) -> dict[str, str]:
    """The environment a user's shell would have: store on S3, a known Trainium target."""
    return dict(os.environ, NEFFCACHE_STORE=s3_url, NEFFCACHE_INSTANCE_TYPE="trn2.48xlarge",
                HF_HUB_OFFLINE="1")


@pytest.fixture
def cli(e2e_env: dict[str, str]) -> Cli:
    """Run `python -m neffcache.cli ARGS` with the e2e environment (plus overrides)."""

    def run(*args: str, env: dict[str, str] | None = None, stdin: str | None = None,
            timeout: float = 600) -> Run:
        proc = subprocess.run([sys.executable, "-m", "neffcache.cli", *args],
                              env={**e2e_env, **(env or {})}, input=stdin,
                              stdin=None if stdin is not None else subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout)
        return Run(proc.returncode, proc.stdout, proc.stderr)

    return run


@pytest.fixture
def s3(s3_env: dict[str, str]) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"])


def split_url(url: str) -> tuple[str, str]:
    bucket, _, prefix = url[len("s3://"):].partition("/")
    return bucket, prefix


def temps_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.startswith(".neffcache-")
            and p.name.endswith(".tmp")]


def restored_tree(root: Path) -> dict[str, bytes]:
    from tests.support.synthetic import read_tree

    tree = read_tree(root)
    tree.pop(".neffcache-state.json", None)
    return tree
