"""The destination through the CLI: a restore killed (SIGKILL) at random moments, again and again,
then rerun, leaves the published tree byte for byte and no temp file anywhere under DIR; a
second restore into a busy DIR waits until its deadline (exit 3); a symlinked root is exit 2."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from neffcache.restore.fs import lock_destination
from tests.e2e.conftest import CELL_64, MATRIX, temps_under
from tests.support.synthetic import KiB, MiB, Profile, make_neff_cache, make_profile_cache

KILLS = 20
# Several large files (fetched in parts into one shared temp file each) and many small ones
# (packs, written in batches): a restore that takes about a second here.
TREE = Profile("kill", small=400, small_size=(1 * KiB, 64 * KiB), large=4,
               large_size=(25 * MiB, 40 * MiB), duplicate_ratio=0.0)


def _env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, NEFFCACHE_INSTANCE_TYPE="trn2.48xlarge",
                NEFFCACHE_HOME=str(tmp_path / "home"), NEFFCACHE_STORE=str(tmp_path / "store"),
                NEFFCACHE_REPORTS="none")


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def test_twenty_kills_then_a_rerun_leave_the_exact_tree_and_no_temp_file(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(MATRIX, encoding="utf-8")
    env = _env(tmp_path)
    src = make_profile_cache(tmp_path / "src", TREE)
    push = subprocess.run([sys.executable, "-m", "neffcache.cli", "push", "--matrix",
                           str(matrix), "--cell", CELL_64, "--root", f"neff={src.root}"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert push.returncode == 0, push.stderr
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "neffcache.cli", "restore", str(matrix), "--to", str(out),
            "--cells", CELL_64, "--workers", "4", "--json"]

    assert subprocess.run(argv, env=env, capture_output=True, text=True,
                          timeout=300).returncode == 0

    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    left_behind = completed = most = 0
    for round_ in range(KILLS):
        if not (out / "neff").exists() or rng.random() < 0.7:
            # Most rounds start from a partly emptied tree, so the restore has work to do.
            for rel in rng.sample(sorted(src.files), k=len(src.files) // 2):
                (out / "neff" / rel).unlink(missing_ok=True)
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        # A clock measured on another run misleads (a clean clone's first run compiles every
        # module): even rounds kill a moment after the first temp file appears, mid-write;
        # odd rounds at a random moment of the run, wherever that falls.
        if round_ % 2 == 0:
            while proc.poll() is None and not temps_under(out):
                time.sleep(0.002)
            time.sleep(rng.uniform(0, 0.05))
        else:
            time.sleep(rng.uniform(0, 1.0))
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        else:
            completed += 1
        proc.wait(timeout=60)
        left_behind = len(temps_under(out))
        most = max(most, left_behind)

    rerun = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, (seed, rerun.stderr)
    doc = json.loads(rerun.stdout)
    assert doc["stale_temps_removed"] == left_behind, (seed, doc)
    assert temps_under(out) == [], seed
    restored = {p.relative_to(out / "neff").as_posix(): p for p in (out / "neff").rglob("*")
                if p.is_file() and p.name != ".neffcache-state.json"}
    assert set(restored) == set(src.files), seed
    for rel, (size, sha) in src.files.items():
        assert restored[rel].stat().st_size == size and _sha(restored[rel]) == sha, (seed, rel)
    assert completed < KILLS and most > 0, seed  # kills landed mid-write
    if left_behind:
        assert "stale temp file(s)" in rerun.stderr


def _small_store(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(MATRIX, encoding="utf-8")
    env = _env(tmp_path)
    cache = make_neff_cache(tmp_path / "src", seed=3, count=8, large=0)
    push = subprocess.run([sys.executable, "-m", "neffcache.cli", "push", "--matrix",
                           str(matrix), "--cell", CELL_64, "--root", f"neff={cache.root}"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert push.returncode == 0, push.stderr
    return matrix, env


def test_a_restore_into_a_busy_directory_waits_until_its_deadline(tmp_path: Path) -> None:
    matrix, env = _small_store(tmp_path)
    out = tmp_path / "out"
    with lock_destination(str(out)):
        r = subprocess.run([sys.executable, "-m", "neffcache.cli", "restore", str(matrix),
                            "--to", str(out), "--cells", CELL_64, "--deadline", "3"],
                           env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stderr
    assert f"waiting for restore pid {os.getpid()}" in r.stderr
    assert "deadline reached while waiting" in r.stderr
    assert not (out / "neff").exists()


def test_a_symlinked_root_is_exit_2_in_one_line_and_nothing_escapes(tmp_path: Path) -> None:
    matrix, env = _small_store(tmp_path)
    out, outside = tmp_path / "out", tmp_path / "outside"
    outside.mkdir()
    out.mkdir()
    (out / "neff").symlink_to(outside)
    r = subprocess.run([sys.executable, "-m", "neffcache.cli", "restore", str(matrix), "--to",
                        str(out), "--cells", CELL_64], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"Error: {out}/neff is a symlink: restore never follows a symlink out of the "
        f"destination; remove it (or restore to another --to)"]
    assert list(outside.iterdir()) == []
