"""Times each way a restore can make its files durable, quiet and beside a heavy buffered writer.

Every round writes a tree the way a restore does (8 threads; a temp file beside each final
name, renamed into place) and then makes it durable one way, timed end to end:

- ``none``: no sync at all (the floor; the ``defer`` option costs this now, and a re-hash of
  the unvouched files by the next run, printed as ``rehash``);
- ``syncfs``: one ``syncfs(2)`` of the whole file system at the end (what restore did);
- ``fdatasync``: each file ``fdatasync``ed before its rename;
- ``writeback``: ``sync_file_range(SYNC_FILE_RANGE_WRITE)`` as each file lands, then each file
  ``fdatasync``ed (8 threads) at the end (what restore does now; no directory fsync is needed,
  see ``neffcache.restore.state.sync_records``).

Trees: ``small`` (3,000 files of 1-128 KiB in 30 directories) and ``large`` (4 x 64 MiB).
With ``--load`` (default both) every round also runs beside another process writing 2 GiB
buffered to a file on the same file system, over and over. Ratios are against ``none`` of the
same tree and condition, and loaded against quiet, in this run.

    python tools/bench/durability.py --dir /work/bench-dur --rounds 3
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from neffcache.restore.fs import sync_filesystems  # noqa: E402


@functools.cache
def _sync_file_range() -> ctypes._CFuncPtr:
    fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    fn.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Start writing a range of a file to disk without waiting (``sync_file_range(2)``, flag
    SYNC_FILE_RANGE_WRITE): what restore did before it deferred durability."""
    if length > 0:
        _sync_file_range()(fd, offset, length, 2)


WRITER = """
import os, sys
buf = b"w" * (1 << 20)
while True:
    with open(sys.argv[1], "wb") as f:
        for _ in range(2048):
            f.write(buf)
"""


def tree(kind: str) -> list[tuple[str, bytes]]:
    if kind == "large":
        return [(f"g{i}/model.neff", os.urandom(64 << 20)) for i in range(4)]
    rnd = __import__("random").Random(7)
    return [(f"d{i % 30}/f{i}.bin", os.urandom(rnd.randint(1, 128) << 10)) for i in range(3000)]


def write_one(root: Path, rel: str, data: bytes, mode: str) -> None:
    final = root / rel
    tmp = final.with_name(f".neffcache-bench-{final.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view[:64 << 10]):]
        if mode == "writeback":
            start_writeback(fd, 0, len(data))
        elif mode == "fdatasync":
            os.fdatasync(fd)
        os.replace(tmp, final)
    finally:
        os.close(fd)


def sync_one(root: Path, rel: str) -> None:
    fd = os.open(root / rel, os.O_RDONLY)
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


def one_round(root: Path, files: list[tuple[str, bytes]], mode: str) -> float:
    shutil.rmtree(root, ignore_errors=True)
    for d in {str(Path(r).parent) for r, _ in files}:
        (root / d).mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda f: write_one(root, f[0], f[1], mode), files))
        if mode == "writeback":
            list(pool.map(lambda f: sync_one(root, f[0]), files))
    if mode == "syncfs":
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            sync_filesystems([fd])
        finally:
            os.close(fd)
    return time.perf_counter() - t0


def rehash(root: Path, files: list[tuple[str, bytes]]) -> float:
    t0 = time.perf_counter()
    for rel, _ in files:
        hashlib.sha256((root / rel).read_bytes()).hexdigest()
    return time.perf_counter() - t0


MODES = ("none", "syncfs", "fdatasync", "writeback")


def run(base: Path, rounds: int, loads: list[bool]) -> None:
    for kind in ("small", "large"):
        files = tree(kind)
        times: dict[tuple[bool, str], list[float]] = {}
        for r in range(rounds):
            for loaded in loads:
                writer = start_writer(base) if loaded else None
                try:
                    if writer:
                        time.sleep(2.0)  # let the writer build up dirty pages
                    for mode in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:
                        t = one_round(base / "tree", files, mode)
                        times.setdefault((loaded, mode), []).append(t)
                    times.setdefault((loaded, "rehash"), []).append(rehash(base / "tree", files))
                finally:
                    stop_writer(writer)
        report(kind, files, times, loads)


def report(kind: str, files: list[tuple[str, bytes]], times: dict[tuple[bool, str], list[float]],
           loads: list[bool]) -> None:
    mib = sum(len(d) for _, d in files) / (1 << 20)
    n = len(times[(loads[0], "none")])
    print(f"\n{kind}: {len(files)} files, {mib:.0f} MiB (medians of {n})")
    med: Callable[[bool, str], float] = lambda ld, m: statistics.median(times[(ld, m)])  # noqa: E731
    for mode in (*MODES, "rehash"):
        cells = []
        for ld in loads:
            cell = f"{'loaded' if ld else 'quiet'} {med(ld, mode):6.3f} s " \
                   f"{med(ld, mode) / med(ld, 'none'):5.2f} x none"
            if ld and False in loads:
                cell += f" {med(True, mode) / med(False, mode):5.2f} x quiet"
            cells.append(cell)
        print(f"  {mode:10} " + " | ".join(cells) +
              f"  (all: {', '.join(f'{t:.2f}' for ld in loads for t in times[(ld, mode)])})")


def start_writer(base: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(base / "writer.bin")])


def stop_writer(p: subprocess.Popen[bytes] | None) -> None:
    if p is not None:
        p.terminate()
        p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, required=True, help="scratch directory on the disk")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--load", choices=("both", "quiet", "loaded"), default="both")
    a = ap.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    loads = {"both": [False, True], "quiet": [False], "loaded": [True]}[a.load]
    try:
        run(a.dir, a.rounds, loads)
    finally:
        shutil.rmtree(a.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
