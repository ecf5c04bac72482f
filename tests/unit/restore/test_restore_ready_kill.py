"""A restore SIGKILLed at seeded random points after some cells were announced: every cell
announced (or with a marker) is intact byte for byte, the next run trusts its files (leaves them
in place: same inodes, nothing fetched again for it), and no other cell is served as ready."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from neffcache.matrix_io import load_matrix
from neffcache.restore import RestoreRequest, cell_ready, restore
from neffcache.store.local import LocalStore
from tests.support.host_entries import INSTANCE_TYPE, Published, publish_for_this_host

MATRIX = """\
backend = "neuron"
name = "kill"
[[pipelines]]
name = "tiny"
class = "diffusers:Flux2KleinPipeline"
model = "/models/tiny"
mode = "compile"
shapes = ["64x64", "128x128", "192x192", "256x256", "320x320", "384x384"]
"""
FIRST = "*/256x256/*"

# The child restores through the public API, counting renames (files, manifest copies, ready
# markers, the state file); at rename number KILL_AT it SIGKILLs itself. Each cell announced
# is logged with an O_APPEND write (it survives the kill); KILL_AT < 0: runs to the end.
CHILD = """
import os, signal, sys, threading
from neffcache.restore import RestoreRequest, restore

store, target, matrix, kill_at, log = sys.argv[1:4] + [int(sys.argv[4]), sys.argv[5]]
logfd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
real, lock, count = os.replace, threading.Lock(), [0]

def counted(*a, **k):
    with lock:
        count[0] += 1
        n = count[0]
    if n == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*a, **k)

os.replace = counted
def ready(cell):
    os.write(logfd, b"ready " + cell.encode() + b"\\n")

r = restore(RestoreRequest(matrix=matrix, to=target, store=store, report_to="none",
                           workers=2, first=[FIRST], on_cell_ready=ready))
os.write(logfd, b"done %d %d\\n" % (count[0], r.exit_code))
""".replace("FIRST", repr(FIRST))


def run_child(store: Path, target: Path, matrix: Path, kill_at: int, log: Path) -> int:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([sys.executable, "-c", CHILD, str(store), str(target), str(matrix),
                           str(kill_at), str(log)], env=env, timeout=120).returncode


def announced(log: Path) -> list[str]:
    return [line.split(" ", 1)[1] for line in log.read_text().splitlines()
            if line.startswith("ready ")] if log.exists() else []


def intact(target: Path, p: Published) -> bool:
    return all((target / "neff" / rel).read_bytes() == data for rel, data in p.files.items())


def inodes(target: Path, p: Published) -> dict[str, int]:
    return {rel: os.stat(target / "neff" / rel).st_ino for rel in p.files}


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, list[Published]]:
    monkeypatch.setenv(*INSTANCE_TYPE)
    monkeypatch.setenv("NEFFCACHE_HOME", str(tmp_path / "home"))
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(MATRIX)
    ids = [c.id for c in load_matrix(matrix).cells]
    published = publish_for_this_host(LocalStore(tmp_path / "store"), matrix, tmp_path, ids,
                                      count=10)
    return matrix, tmp_path / "store", published


def test_announced_cells_survive_a_kill_and_the_next_run_trusts_them(
        tmp_path: Path, world: tuple[Path, Path, list[Published]]) -> None:
    matrix, store, published = world
    calib = tmp_path / "calib-log"
    assert run_child(store, tmp_path / "calib", matrix, -1, calib) == 0
    total = int(calib.read_text().splitlines()[-1].split()[1])
    assert sorted(announced(calib)) == sorted(p.cell_id for p in published)
    rng = random.Random(38)
    partial = 0
    for trial in range(6):
        target, log = tmp_path / f"t{trial}", tmp_path / f"log{trial}"
        kill_at = rng.randint(total * trial // 6 + 1, total * (trial + 1) // 6)
        assert run_child(store, target, matrix, kill_at, log) == -9
        said = set(announced(log))
        ready = {p.cell_id for p in published if cell_ready(target, p.cell_id)}
        assert said <= ready  # every cell announced is served as ready ...
        for p in published:  # ... and nothing is served as ready that is not all there
            if p.cell_id in ready:
                assert intact(target, p), (trial, kill_at, p.cell_id)
        partial += 0 < len(said) < len(published)
        kept = {p.cell_id: inodes(target, p) for p in published if p.cell_id in ready}
        again = restore(RestoreRequest(matrix=matrix, to=target, store=str(store),
                                       report_to="none"))
        assert again.exit_code == 0, again.to_json()
        for p in published:
            assert cell_ready(target, p.cell_id) and intact(target, p)
            if p.cell_id in kept:  # trusted: left in place, not fetched again
                assert inodes(target, p) == kept[p.cell_id], (trial, p.cell_id)
        fetched = again.files_fetched
        assert fetched <= sum(len(p.files) for p in published if p.cell_id not in kept)
    assert partial >= 2  # killed between announcements, not only before or after all of them
