"""The boot kit in tools/boot: the unit passes systemd-analyze, cloud-init carries the same
files, and the hook restores within its deadline or lets the service start anyway."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.servers import free_port

KIT = Path(__file__).resolve().parents[2] / "tools" / "boot"
HOOK = KIT / "neffcache-boot-hook"
MATRIX = """
backend = "neuron"
[[pipelines]]
name = "flux2-klein"
class = "diffusers:Flux2KleinPipeline"
model = "black-forest-labs/FLUX.2-klein-4B"
mode = "compile"
shapes = ["1024x1024"]
"""


def _verify(unit: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("systemd-analyze")
    if exe is None:
        pytest.skip("systemd-analyze not installed (Debian package `systemd` provides it)")
    return subprocess.run([exe, "verify", str(unit)], capture_output=True, text=True,
                          timeout=60)


def _render_unit(tmp_path: Path, exec_start: Path) -> Path:
    env_file = tmp_path / "neffcache.env"
    shutil.copy(KIT / "neffcache.env", env_file)
    text = (KIT / "neffcache-restore.service").read_text()
    text = text.replace("/usr/local/bin/neffcache-boot-hook", str(exec_start))
    text = text.replace("/etc/neffcache/neffcache.env", str(env_file))
    unit = tmp_path / "neffcache-restore.service"
    unit.write_text(text)
    return unit


def test_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    result = _verify(_render_unit(tmp_path, HOOK))
    assert result.returncode == 0, result.stderr


def test_systemd_analyze_catches_a_broken_unit(tmp_path: Path) -> None:
    result = _verify(_render_unit(tmp_path, tmp_path / "no-such-hook"))
    assert result.returncode != 0
    assert "no-such-hook" in result.stderr


def test_unit_orders_before_inference_and_never_requires_success() -> None:
    unit = (KIT / "neffcache-restore.service").read_text()
    dropin = (KIT / "inference.service.d-neffcache.conf").read_text()
    assert "Before=inference.service" in unit
    assert "Wants=neffcache-restore.service" in dropin
    assert "Requires=" not in dropin
    assert "EnvironmentFile=-/run/neffcache/neffcache.env" in dropin


def test_cloud_init_carries_the_kit_files_verbatim() -> None:
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load((KIT / "cloud-init.yaml").read_text())
    files = {f["path"]: f["content"] for f in doc["write_files"]}
    assert files["/usr/local/bin/neffcache-boot-hook"] == HOOK.read_text()
    assert files["/etc/systemd/system/neffcache-restore.service"] == \
        (KIT / "neffcache-restore.service").read_text()
    assert files["/etc/systemd/system/inference.service.d/neffcache.conf"] == \
        (KIT / "inference.service.d-neffcache.conf").read_text()


def _hook_env(tmp_path: Path, store: str, deadline: str = "20") -> dict[str, str]:
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(MATRIX)
    bindir = Path(sys.executable).parent
    return dict(
        os.environ,
        PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
        NEFFCACHE_MATRIX=str(matrix),
        NEFFCACHE_STORE=store,
        NEFFCACHE_CACHE_ROOT=str(tmp_path / "cache"),
        NEFFCACHE_DEADLINE=deadline,
        NEFFCACHE_ENV_FILE=str(tmp_path / "run" / "neffcache.env"),
        NEURON_PLATFORM_TARGET_OVERRIDE="trn2",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
    )


def _env_file(tmp_path: Path) -> dict[str, str]:
    lines = (tmp_path / "run" / "neffcache.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines)


def test_hook_restores_and_writes_the_service_environment(tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = _hook_env(tmp_path, str(store))
    neff = tmp_path / "compiled" / "ab" / "cd"
    neff.mkdir(parents=True)
    (neff / ("abcd" + "0" * 28 + ".neff")).write_bytes(b"NEFF" * 1000)
    push = subprocess.run(
        [sys.executable, "-m", "neffcache.cli", "push", "--matrix", env["NEFFCACHE_MATRIX"],
         "--cell", "flux2-klein/compile/1024x1024/b1/tp1",
         "--root", f"neff={tmp_path / 'compiled'}"], env=env, capture_output=True, text=True)
    assert push.returncode == 0, push.stderr

    run = subprocess.run([str(HOOK)], env=env, capture_output=True, text=True, timeout=60)

    assert run.returncode == 0, run.stderr
    assert "cache restored" in run.stderr
    restored = tmp_path / "cache" / "neff" / "ab" / "cd" / ("abcd" + "0" * 28 + ".neff")
    assert restored.read_bytes() == b"NEFF" * 1000
    service_env = _env_file(tmp_path)
    assert service_env["TORCH_NEURONX_NEFF_CACHE_DIR"].strip("'") == str(tmp_path / "cache/neff")
    lock_dir = Path(service_env["TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR"].strip("'"))
    assert lock_dir.is_dir() and os.access(lock_dir, os.W_OK)


def test_hook_lets_the_service_start_when_the_store_is_unreachable(tmp_path: Path) -> None:
    env = _hook_env(tmp_path, "s3://neff-bucket/prefix", deadline="8")
    env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{free_port()}"  # nothing listens there

    started = time.monotonic()
    run = subprocess.run([str(HOOK)], env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - started

    assert run.returncode == 0, run.stderr
    assert "restore failed" in run.stderr
    # The service still gets a cache dir to compile into just in time.
    assert "TORCH_NEURONX_NEFF_CACHE_DIR" in _env_file(tmp_path)
    assert elapsed < 8 + 20, f"hook held boot for {elapsed:.1f}s past its deadline backstop"


def test_hook_without_a_matrix_is_a_logged_no_op(tmp_path: Path) -> None:
    env = _hook_env(tmp_path, str(tmp_path / "store"))
    env["NEFFCACHE_MATRIX"] = ""
    run = subprocess.run([str(HOOK)], env=env, capture_output=True, text=True, timeout=30)
    assert run.returncode == 0
    assert "NEFFCACHE_MATRIX is not set" in run.stderr
    assert not (tmp_path / "run" / "neffcache.env").exists()
