"""A restore SIGKILLed at random points (writes, renames, the sync) never leaves a state file that
vouches for a file that no restore fdatasynced, nor for bytes that differ from its record: a
restore syncs nothing and leaves its files pending; the next one in the same boot syncs them
(the sync step killed here too) before the state file vouches for them. The same holds for the
store-free check, which syncs them too (killed while it settles)."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from neffcache.backends import NEURON
from neffcache.fingerprint import build_fingerprint
from neffcache.matrix import Cell
from neffcache.precompile.publish import publish_entry
from neffcache.restore.fs import boot_id
from neffcache.restore.state import STATE_FILE, load_pending, load_state
from neffcache.store.local import LocalStore
from tests.support.synthetic import make_neff_cache

FP = build_fingerprint("neuron", {"target": "trn2"})
CELL = Cell("p", "diffusers:P", "m", "main", "bfloat16", "compile", ("transformer",),
            64, 64, 1, 1)

# The child restores, counting the calls that change files (write, rename, fdatasync, fsync); at
# call number KILL_AT it SIGKILLs itself. Every fdatasync that returned is logged (path, inode)
# with an O_APPEND write, which survives the kill (the log spans every run on the target). With
# KILL_AT < 0 it runs to the end and logs how many calls there were and where the sync began.
CHILD = """
import os, signal, sys, threading
from pathlib import Path
from neffcache.backends import NEURON
from neffcache.fingerprint import build_fingerprint
from neffcache.matrix import Cell
from neffcache.restore.run import restore_cells
from neffcache.store.local import LocalStore

store, target, kill_at, log, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], \
    sys.argv[5]
logfd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
real = {n: getattr(os, n) for n in ("write", "replace", "fdatasync", "fsync")}
lock, count, first_sync = threading.Lock(), [0], [-1]

def note(line):
    real["write"](logfd, (line + "\\n").encode())

def counted(name):
    def call(*a, **k):
        with lock:
            count[0] += 1
            n = count[0]
            if name == "fdatasync" and first_sync[0] < 0:
                first_sync[0] = n
        if n == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        out = real[name](*a, **k)
        if name == "fdatasync":
            note("synced %s %d" % (os.readlink("/proc/self/fd/%d" % a[0]), os.fstat(a[0]).st_ino))
        return out
    return call

for n in real:
    setattr(os, n, counted(n))
fp = build_fingerprint("neuron", {"target": "trn2"})
cell = Cell("p", "diffusers:P", "m", "main", "bfloat16", "compile", ("transformer",),
            64, 64, 1, 1)
if mode == "local":  # the store-free check alone
    from neffcache.restore.local import restore_local
    ok = restore_local([cell], NEURON, fp, Path(target), store_url=store) is not None
else:
    ok = restore_cells(LocalStore(store), [cell], NEURON, fp, Path(target),
                       workers=4).error() is None
note("done %d %d %s" % (count[0], first_sync[0], ok))
"""


def run_child(store: Path, target: Path, kill_at: int, log: Path, mode: str = "full") -> int:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([sys.executable, "-c", CHILD, str(store), str(target), str(kill_at),
                           str(log), mode], env=env, timeout=120).returncode


def last_run(log: Path) -> tuple[int, int, bool]:
    """The calls the last child that ran to its end made, where its first fdatasync was (-1:
    none), and whether it succeeded."""
    total, first_sync, ok = log.read_text().splitlines()[-1].split()[1:]
    return int(total), int(first_sync), ok == "True"


def synced_files(log: Path) -> set[tuple[str, int]]:
    out = set()
    for line in log.read_text().splitlines():
        if line.startswith("synced "):
            path, ino = line[len("synced "):].rsplit(" ", 1)
            out.add((path, int(ino)))
    return out


def assert_vouches_only_durable(root: Path, synced: set[tuple[str, int]]) -> int:
    """Every record the state file vouches for whose file is still that file (so a later run
    would skip hashing it) was fdatasynced, inode and all, and holds the recorded bytes; every
    record it holds unsynced is pending under this boot (trusted by no run before a sync)."""
    trusted = 0
    dirs = {"neff": str(root)}
    assert {boot for boot, _ in load_pending(dirs).values()} <= {boot_id()}
    for (_root, path), rec in load_state(dirs).items():
        try:
            st = os.lstat(root / path)
        except FileNotFoundError:
            continue
        if not rec.matches(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino):
            continue  # a later run hashes it again
        assert (str(root / path), st.st_ino) in synced, f"{path} vouched for but never synced"
        assert hashlib.sha256((root / path).read_bytes()).hexdigest() == rec.sha256
        trusted += 1
    return trusted


def calibrate(store: Path, tmp_path: Path) -> tuple[int, int, int]:
    """Calls in a fresh restore (which syncs nothing, vouches for nothing), and in the rerun
    that syncs them: its call count and where its sync step begins."""
    log, calib = tmp_path / "calib-log", tmp_path / "calib"
    assert run_child(store, calib, -1, log) == 0
    total, first_sync, ok = log.read_text().splitlines()[-1].split()[1:]
    assert ok == "True" and int(first_sync) == -1 and synced_files(log) == set()
    assert load_state({"neff": str(calib / "neff")}) == {}
    assert run_child(store, calib, -1, log) == 0
    total2, first_sync2, ok2 = log.read_text().splitlines()[-1].split()[1:]
    assert ok2 == "True" and 0 < int(first_sync2) < int(total2)
    return int(total), int(first_sync2), int(total2)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_restore_killed_anywhere_never_vouches_for_an_unsynced_file(tmp_path: Path,
                                                                        seed: int) -> None:
    cache = make_neff_cache(tmp_path / "src", seed=seed, count=40, large=1)
    store = LocalStore(tmp_path / "store")
    publish_entry(store, CELL, FP, NEURON, {"neff": cache.root})
    total, first_sync, total2 = calibrate(tmp_path / "store", tmp_path)

    rng = random.Random(seed)
    # Half the kills anywhere in a restore that starts from what the killed runs before it
    # left (at times from scratch); half inside the sync step of a rerun after a full restore.
    points = [(rng.randint(1, total), False) for _ in range(4)] + \
             [(rng.randint(first_sync, total2), True) for _ in range(4)]
    rng.shuffle(points)
    target, log = tmp_path / "t", tmp_path / "log"
    root = target / "neff"
    killed = vouched_midway = 0  # vouched_midway: killed runs whose state file vouched for some
    for point, in_sync in points:
        if (in_sync or rng.random() < 0.3) and target.exists():
            shutil.rmtree(target)
            log.unlink()
        if in_sync:
            assert run_child(tmp_path / "store", target, -1, log) == 0
            assert assert_vouches_only_durable(root, synced_files(log)) == 0
        code = run_child(tmp_path / "store", target, point, log)
        killed += code == -9
        if (root / STATE_FILE).exists():
            vouched_midway += assert_vouches_only_durable(root, synced_files(log)) > 0
    assert killed >= 4 and vouched_midway >= 1  # (a later run may finish before its point)
    for _ in range(2):  # a restore to the end, then its rerun in this boot: all vouched for
        assert run_child(tmp_path / "store", target, -1, log) == 0
    assert assert_vouches_only_durable(root, synced_files(log)) == len(cache.files)
    assert {p: (root / p).read_bytes() for p in cache.files} == cache.files


def test_a_store_free_check_killed_while_it_settles_never_vouches_for_an_unsynced_file(
        tmp_path: Path) -> None:
    """The store-free check syncs the files a restore left pending in this boot, then writes a
    state file that vouches for them; killed at any call of that (each fdatasync, the rename),
    it leaves nothing unsynced vouched for; run to its end, the next check syncs nothing."""
    cache = make_neff_cache(tmp_path / "src", seed=3, count=40, large=1)
    store = LocalStore(tmp_path / "store")
    publish_entry(store, CELL, FP, NEURON, {"neff": cache.root})
    target, log = tmp_path / "t", tmp_path / "log"
    root = target / "neff"

    def fresh() -> None:  # a restore's files, all pending in this boot
        shutil.rmtree(target, ignore_errors=True)
        assert run_child(tmp_path / "store", target, -1, log) == 0
        assert assert_vouches_only_durable(root, synced_files(log)) == 0

    fresh()
    assert run_child(tmp_path / "store", target, -1, log, "local") == 0
    total, first_sync, ok = last_run(log)
    assert ok and first_sync == 1 and total == len(cache.files) + 1  # each file, one rename
    rng = random.Random(3)
    for point in [*rng.sample(range(1, total), 3), total]:  # the rename among them
        fresh()
        assert run_child(tmp_path / "store", target, point, log, "local") == -9
        assert assert_vouches_only_durable(root, synced_files(log)) == 0
    fresh()
    assert run_child(tmp_path / "store", target, -1, log, "local") == 0
    assert assert_vouches_only_durable(root, synced_files(log)) == len(cache.files)
    assert run_child(tmp_path / "store", target, -1, log, "local") == 0
    assert last_run(log) == (0, -1, True)  # vouched for: nothing synced, nothing written
    assert {p: (root / p).read_bytes() for p in cache.files} == cache.files
