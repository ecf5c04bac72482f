"""TEST BACKEND ``test-sleep``: a backend whose "compile" sleeps a per-cell time, so claim
scheduling is testable in seconds without torch.

``register()`` adds it to neffcache's backend table (``neffcache.backends.register_backend``)
in the calling process; ``python -m tests.support.sleep_cli ARGS`` is the neffcache CLI with
it registered. Its worker is ``tests.support.sleep_worker`` (a TEST DOUBLE of
``worker`` that speaks the same spec/result protocol). Per-cell seconds come from
``seconds.json`` in the matrix's model directory ({cell id: seconds, or {"fail": msg}}).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from neffcache.backends import Backend, CacheRoot, register_backend

NAME = "test-sleep"
RECORD_VAR = "NEFFCACHE_TEST_SLEEP_RECORD"  # JSON lines: what each test worker did, and when
SECONDS_FILE = "seconds.json"

SLEEP = Backend(
    name=NAME,
    device="cpu",
    compile_backend="none",
    roots=(CacheRoot("neff", "NEFFCACHE_TEST_SLEEP_DIR", "/nonexistent/test-sleep"),),
    worker_module="tests.support.sleep_worker",
)


def register() -> Backend:
    register_backend(SLEEP)
    return SLEEP


def write_sleep_matrix(tmp: Path, seconds: Mapping[str, object], *, name: str = "sleepy",
                       shapes: list[str] | None = None) -> Path:
    """A matrix of one pipeline on the test backend whose cells' ids are the keys of
    ``seconds`` (shapes ``{8*i}x8``); returns its path. Only the shapes' ids matter."""
    model = tmp / "sleepy-model"
    model.mkdir(parents=True, exist_ok=True)
    (model / SECONDS_FILE).write_text(json.dumps(dict(seconds)), encoding="utf-8")
    shapes = shapes or sorted({cid.split("/")[2] for cid in seconds},
                              key=lambda s: tuple(int(x) for x in s.split("x")))
    path = tmp / "matrix.toml"
    path.write_text("\n".join([
        f'name = "{name}"', f'backend = "{NAME}"', "", "[[pipelines]]", 'name = "sleepy"',
        'class = "sleepy:Pipeline"', 'model = "./sleepy-model"', 'dtype = "float32"',
        'modes = ["compile"]', f"shapes = {json.dumps(shapes)}", ""]), encoding="utf-8")
    return path


def cell_ids(count: int) -> list[str]:
    """Ids of the cells write_sleep_matrix declares for ``count`` shapes."""
    return [f"sleepy/compile/{8 * (i + 1)}x8/b1/tp1" for i in range(count)]


def read_records(path: Path, event: str | None = None) -> list[dict[str, object]]:
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if event is None or r["event"] == event]
