"""The boot kit in tools/boot: the unit passes systemd-analyze, cloud-init carries the same
files, and the hook restores within its deadline or lets the service start anyway."""

from __future__ import annotations

import array
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
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
    assert files == {
        "/usr/local/bin/neffcache-boot-hook": HOOK.read_text(),
        "/etc/neffcache/neffcache.env": (KIT / "neffcache.env").read_text(),
        "/etc/neffcache/matrix.toml": (KIT / "matrix.toml").read_text(),
        "/etc/systemd/system/neffcache-restore.service":
            (KIT / "neffcache-restore.service").read_text(),
        "/etc/systemd/system/inference.service.d/neffcache.conf":
            (KIT / "inference.service.d-neffcache.conf").read_text(),
    }
    settings = _kit_settings()
    # The env file points at the matrix cloud-init ships, and at the binary it installs.
    assert settings["NEFFCACHE_MATRIX"] in files
    installed = " ".join(" ".join(map(str, c)) if isinstance(c, list) else c
                         for c in doc["runcmd"])
    assert str(Path(settings["NEFFCACHE_BIN"]).parents[1]) in installed


def _kit_settings() -> dict[str, str]:
    """neffcache.env's settings, with commented-out ones (documented, optional) too."""
    pairs = [line.lstrip("#").split("=", 1) for line in
             (KIT / "neffcache.env").read_text().splitlines()
             if re.match(r"^#?[A-Z][A-Z0-9_]*=", line)]
    return {k: v for k, v in pairs}


def test_the_shipped_matrix_is_a_valid_example() -> None:
    from neffcache.matrix_io import load_matrix

    m = load_matrix(str(KIT / "matrix.toml"))
    assert m.backend == "neuron" and m.cells
    assert "EXAMPLE" in (KIT / "matrix.toml").read_text().splitlines()[0]


def test_every_setting_in_the_env_file_is_read_by_the_hook_or_by_neffcache() -> None:
    hook = HOOK.read_text()
    config = (Path(__file__).resolve().parents[2] / "neffcache" / "config.py").read_text()
    settings = _kit_settings()
    assert {"NEFFCACHE_BIN", "NEFFCACHE_PYTHON", "NEFFCACHE_MATRIX"} <= set(settings)
    for var in settings:
        if var.startswith("NEFFCACHE_"):
            assert var in hook or var in config, var


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
    ) | {"NEFFCACHE_BIN": "neffcache", "NEFFCACHE_PYTHON": "", "NEFFCACHE_ALLOW_UNSIGNED": "1",
         "NEFFCACHE_TRUSTED_KEYS": ""}


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


def test_hook_requires_signatures_unless_the_opt_out_is_explicit_and_loud(
        tmp_path: Path) -> None:
    """The kit's default: with no trusted key the hook restores nothing (exit 2 from
    restore, said in the journal) yet writes the service's environment; NEFFCACHE_ALLOW_UNSIGNED=1
    restores and warns; with CI's public key trusted a signed entry restores, no warning."""
    env = _hook_env(tmp_path, str(tmp_path / "store"))
    compiled = tmp_path / "compiled" / "ab" / "cd"
    compiled.mkdir(parents=True)
    (compiled / ("abcd" + "0" * 28 + ".neff")).write_bytes(b"NEFF" * 100)
    cli = [sys.executable, "-m", "neffcache.cli"]
    key = subprocess.run([*cli, "keys", "generate", "--out", str(tmp_path / "ci.pem"), "--json"],
                         env=env, capture_output=True, text=True)
    assert key.returncode == 0, key.stderr
    public = json.loads(key.stdout)["public_key"]
    push = subprocess.run([*cli, "push", "--matrix", env["NEFFCACHE_MATRIX"], "--cell",
                           "flux2-klein/compile/1024x1024/b1/tp1", "--root",
                           f"neff={tmp_path / 'compiled'}", "--signing-key",
                           str(tmp_path / "ci.pem")], env=env, capture_output=True, text=True)
    assert push.returncode == 0, push.stderr
    restored = tmp_path / "cache" / "neff" / "ab" / "cd" / ("abcd" + "0" * 28 + ".neff")

    strict = env | {"NEFFCACHE_ALLOW_UNSIGNED": ""}
    run = subprocess.run([str(HOOK)], env=strict, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "exit 2; no trusted key configured?" in run.stderr, run.stderr
    assert not restored.exists() and "TORCH_NEURONX_NEFF_CACHE_DIR" in _env_file(tmp_path)

    loose = subprocess.run([str(HOOK)], env=env, capture_output=True, text=True, timeout=60)
    assert loose.returncode == 0 and "cache restored" in loose.stderr, loose.stderr
    assert "WARNING: NEFFCACHE_ALLOW_UNSIGNED=1" in loose.stderr
    shutil.rmtree(tmp_path / "cache")

    keyed = subprocess.run([str(HOOK)], env=strict | {"NEFFCACHE_TRUSTED_KEYS": public},
                           capture_output=True, text=True, timeout=60)
    assert keyed.returncode == 0 and "cache restored" in keyed.stderr, keyed.stderr
    assert "WARNING" not in keyed.stderr and restored.read_bytes() == b"NEFF" * 100


def test_hook_prunes_what_the_fingerprint_no_longer_needs_when_asked(tmp_path: Path) -> None:
    """NEFFCACHE_PRUNE=1: after an SDK change (here other NEURON_CC_FLAGS: another
    fingerprint) the old fingerprint's files leave the persistent root; without it they stay."""
    env = _hook_env(tmp_path, str(tmp_path / "store"))
    cell = "flux2-klein/compile/1024x1024/b1/tp1"
    for flags, name in (("--optlevel=1", "old"), ("--optlevel=2", "new")):
        src = tmp_path / f"compiled-{name}" / "ab"
        src.mkdir(parents=True)
        (src / f"{name}.neff").write_bytes(name.encode() * 100)
        flagged = dict(env, NEURON_CC_FLAGS=flags)
        push = subprocess.run(
            [sys.executable, "-m", "neffcache.cli", "push", "--matrix", env["NEFFCACHE_MATRIX"],
             "--cell", cell, "--root", f"neff={src.parent}"], env=flagged,
            capture_output=True, text=True)
        assert push.returncode == 0, push.stderr
        assert _run_hook(flagged).returncode == 0
    neff = tmp_path / "cache" / "neff" / "ab"
    assert {p.name for p in neff.iterdir()} == {"old.neff", "new.neff"}  # without NEFFCACHE_PRUNE
    run = _run_hook(dict(env, NEURON_CC_FLAGS="--optlevel=2", NEFFCACHE_PRUNE="1"))
    assert run.returncode == 0 and "pruned what the matrix no longer needs" in run.stderr
    assert {p.name for p in neff.iterdir()} == {"new.neff"}


def test_hook_lets_the_service_start_when_the_store_is_unreachable(tmp_path: Path) -> None:
    env = _hook_env(tmp_path, "s3://neff-bucket/prefix", deadline="8")
    env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{free_port()}"  # nothing listens there

    started = time.monotonic()
    run = subprocess.run([str(HOOK)], env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - started

    assert run.returncode == 0, run.stderr
    assert "restore failed with exit 6" in run.stderr
    # The service still gets a cache dir to compile into just in time.
    assert "TORCH_NEURONX_NEFF_CACHE_DIR" in _env_file(tmp_path)
    _assert_persistent(_env_file(tmp_path), tmp_path / "cache")
    assert elapsed < 8 + 20, f"hook held boot for {elapsed:.1f}s past its deadline backstop"


def _assert_persistent(service_env: dict[str, str], root: Path) -> None:
    """Every variable points under the persistent root (never /tmp); the lock dir the
    compiler needs writable exists."""
    assert service_env
    for var, value in service_env.items():
        path = Path(shlex.split(value)[0])
        assert path.is_relative_to(root) and not path.is_relative_to("/tmp/neff_cache"), var
    locks = service_env.get("TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR")
    assert locks is None or Path(shlex.split(locks)[0]).is_dir()


def _fake_neffcache(tmp_path: Path, body: str) -> dict[str, str]:
    """A stand-in `neffcache` first on PATH (the real CLI is tested elsewhere)."""
    bindir = tmp_path / "fake-bin"
    bindir.mkdir()
    fake = bindir / "neffcache"
    fake.write_text(f"#!/bin/sh\n{body}\n")
    fake.chmod(0o755)
    env = _hook_env(tmp_path, str(tmp_path / "store"))
    env["PATH"] = f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"
    env.pop("NEFFCACHE_BIN", None)
    return env


def _run_hook(env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(HOOK)], env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("body, said", [
    ("echo 'Error: matrix.toml: backend: expected one of ...' >&2; exit 2",
     "restore refused its settings (exit 2"),
    ("echo 'Traceback (most recent call last):' >&2; exit 1", "restore failed with exit 1"),
    ("kill -SEGV $$", "restore failed with exit 139"),
])
def test_hook_writes_the_environment_when_restore_fails(tmp_path: Path, body: str,
                                                        said: str) -> None:
    run = _run_hook(_fake_neffcache(tmp_path, body))
    assert run.returncode == 0, run.stderr
    assert said in run.stderr and "computed by the hook" in run.stderr
    service_env = _env_file(tmp_path)
    assert set(service_env) == {"TORCH_NEURONX_NEFF_CACHE_DIR", "TORCH_NEURONX_HLO_CACHE_DIR",
                                "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR"}
    _assert_persistent(service_env, tmp_path / "cache")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["neffcache.env"]


def test_hook_keeps_what_restore_printed_before_failing(tmp_path: Path) -> None:
    body = (f"echo \"export TORCH_NEURONX_NEFF_CACHE_DIR='{tmp_path}/cache/neff'\"\n"
            "echo 'Error: store unavailable' >&2; exit 6")
    run = _run_hook(_fake_neffcache(tmp_path, body))
    assert run.returncode == 0 and "from neffcache restore" in run.stderr
    assert _env_file(tmp_path) == {"TORCH_NEURONX_NEFF_CACHE_DIR": f"'{tmp_path}/cache/neff'"}


def test_hook_writes_the_environment_when_neffcache_is_missing(tmp_path: Path) -> None:
    env = _hook_env(tmp_path, str(tmp_path / "store"))
    env["NEFFCACHE_BIN"] = "/nonexistent/neffcache"
    run = _run_hook(env)
    assert run.returncode == 0, run.stderr
    assert "/nonexistent/neffcache not found (set NEFFCACHE_BIN)" in run.stderr
    _assert_persistent(_env_file(tmp_path), tmp_path / "cache")


def test_hook_writes_the_environment_when_restore_hangs(tmp_path: Path) -> None:
    env = _fake_neffcache(tmp_path, "exec sleep 120")
    env["NEFFCACHE_DEADLINE"] = "1"
    started = time.monotonic()
    run = _run_hook(env, timeout=90)
    assert run.returncode == 0, run.stderr
    assert time.monotonic() - started < 1 + 15 + 5 + 5  # deadline + backstop + kill grace
    assert "did not stop within 16s and was killed" in run.stderr
    _assert_persistent(_env_file(tmp_path), tmp_path / "cache")


def test_hook_without_a_matrix_still_points_the_service_at_the_cache_root(tmp_path: Path
                                                                          ) -> None:
    env = _hook_env(tmp_path, str(tmp_path / "store"))
    env["NEFFCACHE_MATRIX"] = ""
    env["NEFFCACHE_BIN"] = "/nonexistent/neffcache"  # not even run
    run = _run_hook(env)
    assert run.returncode == 0
    assert "NEFFCACHE_MATRIX is not set" in run.stderr and "not found" not in run.stderr
    _assert_persistent(_env_file(tmp_path), tmp_path / "cache")


def test_hook_with_the_real_neffcache_and_a_bad_interpreter_or_store(tmp_path: Path) -> None:
    env = _hook_env(tmp_path, str(tmp_path / "no-such-store"))
    env["NEFFCACHE_PYTHON"] = str(tmp_path / "no-such-python")
    run = _run_hook(env)
    assert run.returncode == 0, run.stderr
    assert f"python interpreter {tmp_path / 'no-such-python'}: no such file" in run.stderr
    assert "restore refused its settings (exit 2" in run.stderr
    assert "from neffcache restore" in run.stderr  # printed before the interpreter was probed
    _assert_persistent(_env_file(tmp_path), tmp_path / "cache")

    env.pop("NEFFCACHE_PYTHON")
    (tmp_path / "run" / "neffcache.env").unlink()
    run = _run_hook(env)  # a store path that does not exist is a configuration error: exit 2
    assert run.returncode == 0, run.stderr
    assert "no such directory" in run.stderr
    assert "restore refused its settings (exit 2" in run.stderr
    assert "from neffcache restore" in run.stderr
    _assert_persistent(_env_file(tmp_path), tmp_path / "cache")


@pytest.mark.parametrize("matrix_text, root_name", [
    (MATRIX, "cache"),
    (MATRIX.replace('backend = "neuron"', 'backend = "inductor"'), "cache"),
    (MATRIX.replace('backend = "neuron"\n', ""), "cache"),  # the default backend: inductor
    (MATRIX, "it's a cache/with space"),
])
def test_hook_computes_the_lines_restore_would_print(tmp_path: Path, matrix_text: str,
                                                     root_name: str) -> None:
    env = _hook_env(tmp_path, str(tmp_path / "no-such-store"))
    Path(env["NEFFCACHE_MATRIX"]).write_text(matrix_text)
    root = tmp_path / root_name
    env["NEFFCACHE_CACHE_ROOT"] = f"{root}//"
    printed = subprocess.run(
        [sys.executable, "-m", "neffcache.cli", "restore", env["NEFFCACHE_MATRIX"], "--to",
         str(root), "--print-env"], env=env, capture_output=True, text=True, timeout=60)
    assert printed.stdout.startswith("export "), printed.stderr
    expected = [line.removeprefix("export ") for line in printed.stdout.splitlines()]

    env["NEFFCACHE_BIN"] = "/nonexistent/neffcache"
    run = _run_hook(env)
    assert run.returncode == 0 and "computed by the hook" in run.stderr
    written = (tmp_path / "run" / "neffcache.env").read_text().splitlines()
    assert written == expected
    _assert_persistent(_env_file(tmp_path), root)


def _notifications(sock: socket.socket, got: list[tuple[bytes, dict[str, object]]],
                   snapshot: Callable[[], dict[str, object]]) -> None:
    """Receive sd_notify datagrams as systemd does (closing the barrier's file descriptors),
    with ``snapshot()`` of the world taken the moment each arrives."""
    while True:
        try:
            data, anc, _, _ = sock.recvmsg(4096, socket.CMSG_SPACE(16 * 4))
        except OSError:
            return
        for level, kind, fds in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                for fd in array.array("i", fds[: len(fds) - len(fds) % 4]):
                    os.close(fd)
        if not data.startswith(b"BARRIER"):
            got.append((data, snapshot()))


def test_hook_starts_the_service_on_its_first_cells_while_the_rest_restore(
        tmp_path: Path, s3_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """NEFFCACHE_START_AFTER=1 against a real S3 endpoint (moto) whose last cell's large blob
    stalls for a few seconds: READY=1 reaches systemd's notify socket once the first cell
    (NEFFCACHE_FIRST) is announced, with the environment file written and the restore still
    running; the rest then lands within the deadline."""
    from neffcache.restore import cell_ready
    from neffcache.store import open_store
    from tests.support.faulty_proxy import FaultyProxy
    from tests.support.host_entries import publish_for_this_host

    env = _hook_env(tmp_path, s3_url, deadline="30")
    Path(env["NEFFCACHE_MATRIX"]).write_text(
        MATRIX.replace('["1024x1024"]', '["512x512", "768x768", "1024x1024"]'))
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    cells = ["flux2-klein/compile/512x512/b1/tp1", "flux2-klein/compile/768x768/b1/tp1",
             "flux2-klein/compile/1024x1024/b1/tp1"]
    published = publish_for_this_host(open_store(s3_url), Path(env["NEFFCACHE_MATRIX"]),
                                      tmp_path / "built", cells)
    first, last = published[2], published[0]  # the service needs 1024x1024 first
    root = tmp_path / "cache"
    env |= {"NEFFCACHE_START_AFTER": "1", "NEFFCACHE_FIRST": "*/1024x1024/*",
            "NEFFCACHE_REPORTS": "none", "NOTIFY_SOCKET": str(tmp_path / "notify")}
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(env["NOTIFY_SOCKET"])
    got: list[tuple[bytes, dict[str, object]]] = []
    hook: list[subprocess.Popen[str]] = []

    def snapshot() -> dict[str, object]:
        env_file = tmp_path / "run" / "neffcache.env"
        return {"env": env_file.read_text() if env_file.exists() else None,
                "first": cell_ready(root, first.cell_id), "last": cell_ready(root, last.cell_id),
                "running": hook[0].poll() is None}

    listener = threading.Thread(target=_notifications, args=(sock, got, snapshot), daemon=True)
    with FaultyProxy(stall_seconds=4) as proxy:
        proxy.fault_next(last.large_sha256, "stall")
        env["HTTP_PROXY"] = proxy.url
        hook.append(subprocess.Popen([str(HOOK)], env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True))
        listener.start()
        _, stderr = hook[0].communicate(timeout=90)
    sock.close()
    listener.join(5)
    assert hook[0].returncode == 0, stderr
    assert [data.split(b"\n")[0] for data, _ in got] == [b"READY=1"], (got, stderr)
    at_ready = got[0][1]
    assert at_ready["running"] and at_ready["first"] and not at_ready["last"], (at_ready, stderr)
    assert f"TORCH_NEURONX_NEFF_CACHE_DIR={root / 'neff'}" in str(at_ready["env"])
    assert proxy.injected["stall"] == 1
    assert "1 cell(s) ready: the service starts now" in stderr
    assert "cache restored" in stderr
    assert re.search(r"ready +flux2-klein/compile/1024x1024/b1/tp1", stderr)
    for p in published:
        assert cell_ready(root, p.cell_id)
        assert all((root / "neff" / rel).read_bytes() == b for rel, b in p.files.items())
