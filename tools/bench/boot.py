"""Boot benchmark (issue 22): fresh trees, `neffcache restore` against s5cmd, in one run.

    python tools/bench/boot.py                         # three trees, medians of 3 (10-25 min)
    python tools/bench/boot.py --quick                 # small trees, 1 run (a smoke run)
    python tools/bench/boot.py --baseline /tmp/nc-old  # also another checkout's restore
    python tools/bench/boot.py --out tools/bench/results/boot-COMMIT.txt

For each tree (eager: 3,000 files of 8-256 KiB; mixed: 2 large + 2,000 small; compiled:
6 x 64 MiB + 300 small), written fresh from a new seed, on SeaweedFS on 127.0.0.1 (moto if
SeaweedFS is not installed): `neffcache push` against `s5cmd cp` of the same files (time, peak
RSS); then, rotating the order round by round, `s5cmd cp` of the plain objects and
`neffcache restore` (and the baseline's, with --baseline: PYTHONPATH pointing at that checkout)
into empty directories, quiet and beside a buffered writer (a child writing 2 GiB with plain
`write` calls to a file on the same file system, started before the restore). Prints medians,
each ratio beside its target, and each tool's CPU seconds (user + system, wait4) per GiB
restored: s5cmd verifies nothing, so the price of verification shows. Every restore is judged
byte for byte (sha256 of every file) before the next run; every run starts with its previous
outputs written back and dropped from the page cache (``restore.py``'s method, reused).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

import restore as B  # noqa: E402  (the benchmark beside this file: spawner, eviction, checks)

from tests.support.servers import (  # noqa: E402
    WEED_CREDENTIALS,
    moto_server,
    seaweedfs_server,
    weed_binary,
)
from tests.support.synthetic import (  # noqa: E402
    KiB,
    MiB,
    Profile,
    ProfileTree,
    make_profile_cache,
)

GiB = 1 << 30
BUCKET = "boot"
TREES = {
    "eager": Profile("eager", small=3000, small_size=(8 * KiB, 256 * KiB)),
    "mixed": Profile("mixed", small=2000, small_size=(8 * KiB, 256 * KiB), large=2,
                     large_size=(64 * MiB, 128 * MiB)),
    "compiled": Profile("compiled", small=300, small_size=(1 * KiB, 64 * KiB), large=6,
                        large_size=(64 * MiB, 64 * MiB)),
}
QUICK = {
    "eager": Profile("eager", small=300, small_size=(8 * KiB, 256 * KiB)),
    "mixed": Profile("mixed", small=200, small_size=(8 * KiB, 256 * KiB), large=1,
                     large_size=(32 * MiB, 32 * MiB)),
    "compiled": Profile("compiled", small=30, small_size=(1 * KiB, 64 * KiB), large=2,
                        large_size=(32 * MiB, 32 * MiB)),
}
TARGETS = {"eager": 0.35, "mixed": 0.4, "compiled": 1.0}  # neffcache restore / s5cmd, at most
LOADED_TARGET = 1.2  # restore beside the writer / quiet, at most
DELETE_SETTLE_S = 65.0  # after deleting a tree's restores, before the next tree (forget_outputs)
PUSH_TIME_TARGET, PUSH_RSS_TARGET_MIB = 1.5, 200  # push / s5cmd cp; push peak RSS
MATRIX = "".join(f"""
[[pipelines]]
name = "boot-{name}"
class = "diffusers:Flux2KleinPipeline"
model = "/models/boot"
mode = "{'compile' if name == 'compiled' else 'eager'}"
shapes = ["1024x1024"]
""" for name in TREES)
CELLS = {name: f"boot-{name}/{'compile' if name == 'compiled' else 'eager'}/1024x1024/b1/tp1"
         for name in TREES}

# The heavy writer: plain buffered writes of 1 MiB to one file; says "ready" after the first
# 64 MiB (so its dirty pages are there when the restore starts), then writes the rest.
WRITER = r"""
import os, sys
path, total = sys.argv[1], int(sys.argv[2])
buf = os.urandom(1 << 20)
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
for i in range(total >> 20):
    os.write(fd, buf)
    if i == 63:
        print("ready", flush=True)
os.close(fd)
"""


@dataclass
class Samples:
    seconds: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    rss_kib: list[int] = field(default_factory=list)

    def add(self, t: B.Timed) -> None:
        self.seconds.append(t.seconds)
        self.cpu.append(t.cpu_seconds)
        self.rss_kib.append(t.max_rss_kib)

    def median(self) -> float:
        return statistics.median(self.seconds)

    def cpu_median(self) -> float:
        return statistics.median(self.cpu)

    def rss_mib(self) -> float:
        return max(self.rss_kib) / 1024

    def all(self) -> str:
        return ", ".join(f"{s:.2f}" for s in self.seconds)


@dataclass
class Bench:
    work: Path
    env: dict[str, str]
    endpoint: str
    matrix: Path
    runs: int
    writer_bytes: int
    restorers: dict[str, dict[str, str]]  # tool name -> env overlay (PYTHONPATH of a checkout)
    out: Path = field(init=False)

    def __post_init__(self) -> None:
        self.out = self.work / "out"
        self.n = 0

    def dest(self, label: str) -> Path:
        self.n += 1
        return self.out / f"{label}-{self.n}"

    def s5cmd(self, *args: str) -> list[str]:
        return [B.s5cmd(), "--endpoint-url", self.endpoint, *args]

    def push_env(self, name: str, i: int | str) -> dict[str, str]:
        return dict(self.env, NEFFCACHE_HOME=str(self.work / "home-publisher"),
                    NEFFCACHE_STORE=f"s3://{BUCKET}/neff-{name}-{i}")

    def push(self, name: str, tree: ProfileTree) -> dict[str, Samples]:
        """`neffcache push` of the tree to a fresh prefix (each restorer's checkout: "push"
        is this one's, "push (baseline)" the other's) against `s5cmd cp` of its files to
        another, in rotating order; this checkout's first push and s5cmd's first copy are
        what the restores read."""
        pushers = {("push" if k == 0 else f"push ({tool})"): overlay
                   for k, (tool, overlay) in enumerate(self.restorers.items())}
        out = {tool: Samples() for tool in [*pushers, "s5cmd cp"]}
        for i in range(self.runs):
            argv = [*B.neffcache(), "push", "--matrix", str(self.matrix), "--cell", CELLS[name],
                    "--root", f"neff={tree.root}", "--json", "--allow-missing-packages"]
            cmds = {tool: (argv, dict(self.push_env(name, i if k == 0 else f"{k}-{i}"),
                                      **overlay))
                    for k, (tool, overlay) in enumerate(pushers.items())}
            cmds["s5cmd cp"] = (self.s5cmd("cp", f"{tree.root}/",
                                           f"s3://{BUCKET}/plain/{name}-{i}/"), self.env)
            order = list(cmds)
            for tool in order[i % len(order):] + order[:i % len(order)]:
                os.sync()
                argv, env = cmds[tool]
                out[tool].add(B.run(argv, env))
                B.log(f"{name}: {tool} {i + 1}: {out[tool].seconds[-1]:.2f} s")
        return out

    def command(self, tool: str, name: str, dest: Path) -> tuple[list[str], dict[str, str]]:
        if tool == "s5cmd":
            return self.s5cmd("cp", f"s3://{BUCKET}/plain/{name}-0/*", f"{dest}/neff/"), self.env
        env = dict(self.push_env(name, 0), NEFFCACHE_HOME=str(self.work / "home-instance"),
                   **self.restorers[tool])
        return [*B.neffcache(), "restore", str(self.matrix), "--to", str(dest), "--cells",
                CELLS[name], "--json"], env

    def once(self, tool: str, name: str, tree: ProfileTree, *, loaded: bool) -> B.Timed:
        """One restore into a new directory (beside the writer if ``loaded``), judged byte
        for byte, then written back and dropped from the page cache."""
        dest = self.dest(f"{name}-{tool.replace(' ', '-')}")
        argv, env = self.command(tool, name, dest)
        os.sync()  # no run pays for writing back another's files
        with self.writer(loaded):
            t = B.run(argv, env)
        if tool != "s5cmd":
            doc = json.loads(t.stdout)
            assert doc["files_fetched"] == len(tree.files), (tool, doc)
        B.check_tree(dest / "neff", tree, tool, full=True)
        B.evict_page_cache(dest)
        return t

    @contextmanager
    def writer(self, on: bool) -> Iterator[None]:
        if not on:
            yield
            return
        path = self.out / "heavy-writer.bin"
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path),
                                 str(self.writer_bytes)], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            yield
        finally:
            proc.wait(timeout=600)
            path.unlink(missing_ok=True)
            os.sync()

    def restores(self, name: str, tree: ProfileTree) -> dict[str, Samples]:
        """Untimed warm-up of each tool (SeaweedFS's first read of an object is slow), then
        rounds in rotating order: every tool quiet and beside the writer (s5cmd's slowdown
        beside it is the peer: what the machine itself loses to the writer)."""
        tools = ["s5cmd", *self.restorers]
        for tool in tools[:2]:
            self.once(tool, name, tree, loaded=False)
        out = {t: Samples() for t in tools} | {f"{t} loaded": Samples() for t in tools}
        cases = [(t, False) for t in tools] + [(t, True) for t in tools]
        for i in range(self.runs):
            k = i % len(cases)
            for tool, loaded in cases[k:] + cases[:k]:
                t = self.once(tool, name, tree, loaded=loaded)
                out[f"{tool} loaded" if loaded else tool].add(t)
                B.log(f"{name}: {tool}{' beside the writer' if loaded else ''} {i + 1}: "
                      f"{t.seconds:.2f} s")
        return out


def forget_outputs(out: Path, wait: float) -> None:
    """Delete a tree's restored copies, flush, and wait ``wait`` seconds before the next
    tree's runs. Measured here (perf, kernel 6.x, ext4 without a journal): for a minute after
    thousands of files were deleted (five more while their inode table blocks are dirty),
    ext4 skips their inode numbers when it allocates (``recently_deleted`` in
    ``find_inode_bit``), reading an inode table block for each one skipped; a tree's restores
    (neffcache's and s5cmd's alike, every mkdir and create) right after the previous tree's
    were deleted paid up to 60 % of their CPU there (mixed: 5 s instead of 1.3 s). A booting
    instance has deleted nothing."""
    shutil.rmtree(out, ignore_errors=True)
    os.sync()
    if wait > 0:
        B.log(f"waiting {wait:.0f} s after deleting the last tree's restores")
        time.sleep(wait)


def report(name: str, tree: ProfileTree, push: dict[str, Samples],
           rest: dict[str, Samples], restorers: list[str]) -> tuple[list[str], dict[str, bool]]:
    gib = tree.total_bytes / GiB
    s5 = rest["s5cmd"]
    lines = [f"{name}: {len(tree.files)} files, {tree.total_bytes / MiB:.0f} MiB "
             f"(medians of {len(s5.seconds)})",
             f"  s5cmd cp (download)     {s5.median():6.2f} s   CPU {s5.cpu_median() / gib:5.2f} "
             f"s/GiB   (all: {s5.all()})",
             f"  {'  beside the writer':23} {rest['s5cmd loaded'].median():6.2f} s   "
             f"{rest['s5cmd loaded'].median() / s5.median():.2f} x quiet (the peer)   "
             f"(all: {rest['s5cmd loaded'].all()})"]
    verdicts: dict[str, bool] = {}
    for tool in restorers:
        q, ld = rest[tool], rest[f"{tool} loaded"]
        ratio, lratio = q.median() / s5.median(), ld.median() / q.median()
        lines += [f"  {tool + ' restore':23} {q.median():6.2f} s   CPU {q.cpu_median() / gib:5.2f}"
                  f" s/GiB   {ratio:.2f} x s5cmd (target <= {TARGETS[name]})   "
                  f"peak RSS {q.rss_mib():.0f} MiB   (all: {q.all()})",
                  f"  {'  beside the writer':23} {ld.median():6.2f} s   {lratio:.2f} x quiet "
                  f"(target <= {LOADED_TARGET})   (all: {ld.all()})"]
        verdicts[f"{name}: {tool} restore <= {TARGETS[name]} x s5cmd"] = ratio <= TARGETS[name]
        verdicts[f"{name}: {tool} beside the writer <= {LOADED_TARGET} x quiet"] = \
            lratio <= LOADED_TARGET
    p, c = push["push"], push["s5cmd cp"]
    pratio = p.median() / c.median()
    lines.append(f"  push                    {p.median():6.2f} s   peak RSS {p.rss_mib():.0f} MiB"
                 f"   {pratio:.2f} x s5cmd cp {c.median():.2f} s, peak RSS {c.rss_mib():.0f} "
                 f"MiB (targets <= {PUSH_TIME_TARGET} x, <= {PUSH_RSS_TARGET_MIB} MiB)   "
                 f"(all: {p.all()}; s5cmd cp: {c.all()})")
    for tool in (t for t in push if t not in ("push", "s5cmd cp")):
        o = push[tool]
        lines.append(f"  {tool:23} {o.median():6.2f} s   peak RSS {o.rss_mib():.0f} MiB   "
                     f"{o.median() / c.median():.2f} x s5cmd cp   (all: {o.all()})")
    verdicts[f"{name}: push <= {PUSH_TIME_TARGET} x s5cmd cp"] = pratio <= PUSH_TIME_TARGET
    verdicts[f"{name}: push <= {PUSH_RSS_TARGET_MIB} MiB RSS"] = \
        p.rss_mib() <= PUSH_RSS_TARGET_MIB
    return lines, verdicts


def markdown(rows: list[tuple[str, ProfileTree, dict[str, Samples], dict[str, Samples]]],
             restorers: list[str]) -> list[str]:
    """The README's table: one row per tree."""
    head = ["tree", "s5cmd"] + [f"{t} (× s5cmd)" for t in restorers] + \
        [f"{t} beside writer (× quiet)" for t in ["s5cmd", *restorers]] + \
        ["CPU s/GiB: s5cmd / " + " / ".join(restorers), "push (× s5cmd cp), peak RSS"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, tree, push, rest in rows:
        gib, s5 = tree.total_bytes / GiB, rest["s5cmd"]
        cells = [f"{name}, {len(tree.files)} files, {tree.total_bytes / MiB:.0f} MiB",
                 f"{s5.median():.2f} s"]
        cells += [f"{rest[t].median():.2f} s ({rest[t].median() / s5.median():.2f} ×)"
                  for t in restorers]
        cells += [f"{rest[t + ' loaded'].median():.2f} s "
                  f"({rest[t + ' loaded'].median() / rest[t].median():.2f} ×)"
                  for t in ["s5cmd", *restorers]]
        cells.append(" / ".join(f"{rest[t].cpu_median() / gib:.2f}" for t in ["s5cmd", *restorers]))
        p, c = push["push"], push["s5cmd cp"]
        cells.append(f"{p.median():.2f} s vs {c.median():.2f} s ({p.median() / c.median():.2f} ×),"
                     f" {p.rss_mib():.0f} vs {c.rss_mib():.0f} MiB" + "".join(
                         f"; {t.removeprefix('push (').rstrip(')')}: {o.median():.2f} s "
                         f"({o.median() / c.median():.2f} ×), {o.rss_mib():.0f} MiB"
                         for t, o in push.items() if t not in ("push", "s5cmd cp")))
        out.append("| " + " | ".join(cells) + " |")
    return out


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small trees, 1 run, 256 MiB writer")
    p.add_argument("--runs", type=int, default=None, help="runs of each (default 3; quick 1)")
    p.add_argument("--trees", default=",".join(TREES), help="comma-separated: " + ", ".join(TREES))
    p.add_argument("--baseline", type=Path, default=None, metavar="CHECKOUT",
                   help="also time this checkout's restore (PYTHONPATH=CHECKOUT), same run")
    p.add_argument("--writer-mib", type=int, default=None, help="heavy writer (default 2048)")
    p.add_argument("--seed", type=int, default=None, help="tree seed (default: the time)")
    p.add_argument("--settle", type=float, default=None, help="seconds after the uploads (20)")
    p.add_argument("--out", type=Path, default=None, help="also write the report here")
    return p.parse_args()


@contextmanager
def s3_server(work: Path) -> Iterator[tuple[str, dict[str, str], str]]:
    weed = weed_binary()
    if weed:
        with seaweedfs_server(work / "seaweedfs", weed=weed) as endpoint:
            yield endpoint, dict(WEED_CREDENTIALS), "SeaweedFS"
    else:
        with moto_server() as endpoint:
            yield endpoint, {"AWS_ACCESS_KEY_ID": "testing",
                             "AWS_SECRET_ACCESS_KEY": "testing"}, "moto (no SeaweedFS)"


def main() -> int:
    args = parse_args()
    runs = args.runs or (1 if args.quick else 3)
    seed = args.seed if args.seed is not None else int(time.time())
    writer = (args.writer_mib or (256 if args.quick else 2048)) << 20
    shapes = QUICK if args.quick else TREES
    names = [n.strip() for n in args.trees.split(",") if n.strip()]
    restorers = {"neffcache": {"PYTHONPATH": str(B.REPO)}}
    if args.baseline:
        restorers["baseline"] = {"PYTHONPATH": str(args.baseline.absolute())}
    started = time.monotonic()
    B.start_spawner()
    B.compile_bytecode()
    if args.baseline:  # byte-compiled too, as an installed wheel is
        import compileall

        compileall.compile_dir(str(args.baseline / "neffcache"), quiet=1)
    try:
        with tempfile.TemporaryDirectory(prefix="neffcache-boot-") as tmp:
            text = bench(Path(tmp), names, shapes, runs, seed, writer, restorers, args)
    finally:
        B.stop_spawner()
    text.append(f"total {time.monotonic() - started:.0f} s")
    print("\n".join(text))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(text) + "\n", encoding="utf-8")
    return 0


def bench(work: Path, names: list[str], shapes: dict[str, Profile], runs: int, seed: int,
          writer: int, restorers: dict[str, dict[str, str]],
          args: argparse.Namespace) -> list[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "NEFFCACHE_", "PYTHONPATH"))}
    env.update(NEFFCACHE_INSTANCE_TYPE="trn2.48xlarge", HF_HUB_OFFLINE="1",
               AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull,
               PYTHONPATH=str(B.REPO))  # push and restore from this checkout, not an install
    matrix = work / "matrix.toml"
    matrix.write_text('backend = "neuron"\n' + MATRIX, encoding="utf-8")
    load0 = os.getloadavg()
    with s3_server(work) as (endpoint, creds, server):
        env.update(creds, AWS_ENDPOINT_URL=endpoint, AWS_REGION="us-east-1")
        import boto3

        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                     aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
                     aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"]
                     ).create_bucket(Bucket=BUCKET)
        b = Bench(work, env, endpoint, matrix, runs, writer, restorers)
        prepared = []
        for name in names:
            tree = make_profile_cache(work / "src" / name, shapes[name], seed=seed)
            prepared.append((name, tree, b.push(name, tree)))
        B.settle(args.settle if args.settle is not None else (0 if args.quick else 20))
        rows, text, verdicts = [], [], {}
        for k, (name, tree, push) in enumerate(prepared):
            if k:  # the last tree's restores, deleted: wait until ext4 reuses their inodes
                forget_outputs(b.out, 0 if args.quick else DELETE_SETTLE_S)
            rest = b.restores(name, tree)
            lines, v = report(name, tree, push, rest, list(restorers))
            text += lines + [""]
            verdicts |= v
            rows.append((name, tree, push, rest))
    shutil.rmtree(b.out, ignore_errors=True)
    head = [f"boot benchmark: {server} on 127.0.0.1, seed {seed}, {runs} run(s) each, writer "
            f"{writer >> 20} MiB; restorers: " +
            ", ".join(f"{k} ({v['PYTHONPATH']})" for k, v in restorers.items()),
            f"load average {load0[0]:.1f} at start, {os.getloadavg()[0]:.1f} at end "
            f"({os.cpu_count()} cpus)", ""]
    return head + text + [f"{'met' if ok else 'MISSED':6}  {what}"
                          for what, ok in verdicts.items()] + [""] + \
        markdown(rows, list(restorers)) + [""]


if __name__ == "__main__":
    sys.exit(main())
