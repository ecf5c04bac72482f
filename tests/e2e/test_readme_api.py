"""The README's Python API section runs as written: its code blocks, executed in a fresh
interpreter against an embedded home where one of two cells was published (through the
public API), restore that cell, export its environment and report the other as missing; and
with the store down (a closed loopback port), still export the cache environment."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import neffcache

README = Path(__file__).resolve().parents[2] / "README.md"

MATRIX = """\
name = "readme-api"
backend = "inductor"

[[pipelines]]
name = "tiny"
class = "diffusers:Flux2KleinPipeline"
model = "./tiny"
modes = ["compile"]
components = ["transformer"]
shapes = ["64x64", "96x96"]
batch_sizes = [1]
tp_degrees = [1]
"""


def api_blocks() -> list[str]:
    """The ```python blocks of the README's "## Python API" section."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def run_block(code: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=120, check=False)


def _store_down(tmp_path: Path) -> dict[str, str]:
    """An S3 store on a loopback port nobody listens on, and a fresh cache directory."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return {"NEFFCACHE_STORE": "s3://bucket/neff", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x",
            "AWS_DEFAULT_REGION": "us-east-1", "NEFFCACHE_CACHE": str(tmp_path / "down")}


def test_the_python_api_section_runs_as_written(tmp_path: Path) -> None:
    blocks = api_blocks()
    assert len(blocks) == 2, "the README's Python API section has a restore and a coverage block"
    (tmp_path / "matrix.toml").write_text(MATRIX)
    built = tmp_path / "built" / "inductor"
    (built / "ab").mkdir(parents=True)
    (built / "ab" / "kernel.py").write_bytes(b"# compiled kernel\n" * 100)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NEFFCACHE_", "TORCHINDUCTOR_"))}
    env.update(NEFFCACHE_HOME=str(tmp_path / "home"), NEFFCACHE_CACHE=str(tmp_path / "cache"),
               NEFFCACHE_MATRIX=str(tmp_path / "matrix.toml"))
    pushed = neffcache.push(neffcache.PushRequest(
        roots={"inductor": built}, matrix=tmp_path / "matrix.toml",
        cell_id="tiny/compile/64x64/b1/tp1", environ=env))
    assert pushed.exit_code == 0 and pushed.to_json()["created"] is True

    restored = run_block(blocks[0], tmp_path, env)
    assert restored.returncode == 0, restored.stderr
    assert "restored 1/2 cells" in restored.stdout and "exit code 3" in restored.stdout
    assert (tmp_path / "cache" / "inductor" / "ab" / "kernel.py").read_bytes() == \
        b"# compiled kernel\n" * 100
    assert "tiny/compile/64x64/b1/tp1 ready" in restored.stderr
    assert str(tmp_path / "cache" / "inductor") in restored.stdout  # exported, then printed

    down = run_block(blocks[0], tmp_path, {**env, **_store_down(tmp_path)})
    assert down.returncode == 0, down.stderr
    assert "starting cold" in down.stderr and "restored" not in down.stdout
    # the service still points its compiler at the cache directories, not at /tmp
    assert str(tmp_path / "down" / "inductor") in down.stdout, down.stdout

    covered = run_block(blocks[1], tmp_path, env)
    assert covered.returncode == 0, covered.stderr
    assert "1 ready, 0 failed, 1 missing (this host)" in covered.stdout
    assert "not ready here: tiny/compile/96x96/b1/tp1" in covered.stdout
