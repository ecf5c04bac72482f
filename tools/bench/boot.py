"""Boot benchmark (issues 22, 38): fresh trees, `neffcache restore` against s5cmd and aws, on
loopback and through a shaped link, and the time to the first cell ready, in one run.

    python tools/bench/boot.py                         # three trees, medians of 3 (20-40 min)
    python tools/bench/boot.py --quick                 # small trees, 1 run (a smoke run)
    python tools/bench/boot.py --baseline /tmp/nc-old  # also another checkout's restore
    python tools/bench/boot.py --links loopback --writer-mib 0 --first-cells 0  # issue 22's
    python tools/bench/boot.py --out tools/bench/results/boot-COMMIT.txt

For each tree (eager: 3,000 files of 8-256 KiB; mixed: 2 large + 2,000 small; compiled:
6 x 64 MiB + 300 small), written fresh from a new seed, on SeaweedFS on 127.0.0.1 (moto if
SeaweedFS is not installed): `neffcache push` against `s5cmd cp` of the same files (time, peak
RSS, and the bytes and objects the store holds for the tree after the push); then, rotating
the order round by round, `s5cmd cp` of the plain objects, `aws s3 sync` of them and
`neffcache restore` (and the baseline's, with --baseline: PYTHONPATH pointing at that
checkout) into empty directories: on loopback quiet and beside a buffered writer (a child
writing 2 GiB with plain `write` calls to a file on the same file system, started before the
restore), and through the shaped link (``shaped_link.py``: 20 ms to the first byte of every
request, 1 Gbit/s shared by all connections, 700 Mbit/s per connection; its own process).
Prints medians, each ratio beside its target, each time over the shaped link against the
physical limit (the tree's bytes at the link rate plus one request's latency) and against
s5cmd's, and each tool's CPU seconds (user + system, wait4) per GiB restored: s5cmd verifies
nothing, so the price of verification shows. Then the time to the first cell
(``first_cell.py``): on a matrix of 20 cells of the compiled shape, from the restore's start
to the announcement of the cell asked for with ``--first``, against the whole restore, on
each link. Every restore is judged byte for byte (sha256 of every file) before the next run;
every run starts with its previous outputs written back and dropped from the page cache
(``restore.py``'s method, reused).
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
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

import first_cell as F  # noqa: E402  (time to first cell, beside this file)
import restore as B  # noqa: E402  (the benchmark beside this file: spawner, eviction, checks)
from shaped_link import LinkShape, process_cpu_seconds, shaped_link  # noqa: E402

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
SHAPED_TARGET = 1.15  # restore over the shaped link / its physical limit, at most
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
    proxy_cpu: list[float] = field(default_factory=list)  # the shaped link's, per run

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
    endpoints: dict[str, str]  # link name -> S3 endpoint ("loopback", and "shaped" if used)
    matrix: Path
    runs: int
    writer_bytes: int  # 0: no runs beside the writer
    restorers: dict[str, dict[str, str]]  # tool name -> env overlay (PYTHONPATH of a checkout)
    aws: list[str] | None = None  # `aws` argv prefix, if available
    proxy_pid: int | None = None  # the shaped link's process (its CPU is read per run)
    out: Path = field(init=False)

    def __post_init__(self) -> None:
        self.out = self.work / "out"
        self.n = 0

    @property
    def tools(self) -> list[str]:
        return ["s5cmd", *(["aws"] if self.aws else []), *self.restorers]

    def dest(self, label: str) -> Path:
        self.n += 1
        return self.out / f"{label}-{self.n}"

    def s5cmd(self, *args: str, link: str = "loopback") -> list[str]:
        return [B.s5cmd(), "--endpoint-url", self.endpoints[link], *args]

    def push_env(self, name: str, i: int | str) -> dict[str, str]:
        return dict(self.env, NEFFCACHE_HOME=str(self.work / "home-publisher"),
                    NEFFCACHE_STORE=f"s3://{BUCKET}/neff-{name}-{i}")

    def push(self, name: str, tree: ProfileTree) -> dict[str, Samples]:
        """`neffcache push` of the tree to a fresh prefix (each restorer's checkout: "push"
        is this one's, "push (baseline)" the other's) against `s5cmd cp` of its files to
        another, in rotating order, on loopback; this checkout's first push and s5cmd's first
        copy are what the restores read."""
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

    def command(self, tool: str, name: str, dest: Path,
                link: str = "loopback") -> tuple[list[str], dict[str, str]]:
        endpoint = self.endpoints[link]
        if tool == "s5cmd":
            return self.s5cmd("cp", f"s3://{BUCKET}/plain/{name}-0/*", f"{dest}/neff/",
                              link=link), self.env
        if tool == "aws":
            assert self.aws is not None
            return [*self.aws, "--endpoint-url", endpoint, "s3", "sync",
                    f"s3://{BUCKET}/plain/{name}-0", f"{dest}/neff", "--only-show-errors"], \
                self.env
        env = dict(self.push_env(name, 0), NEFFCACHE_HOME=str(self.work / "home-instance"),
                   AWS_ENDPOINT_URL=endpoint, **self.restorers[tool])
        return [*B.neffcache(), "restore", str(self.matrix), "--to", str(dest), "--cells",
                CELLS[name], "--json"], env

    def once(self, tool: str, name: str, tree: ProfileTree, *, loaded: bool = False,
             link: str = "loopback") -> tuple[B.Timed, float]:
        """One restore into a new directory (beside the writer if ``loaded``; through the
        shaped link if ``link`` says so), judged byte for byte, then written back and dropped
        from the page cache. Returns its timing and the shaped link's CPU seconds for it."""
        dest = self.dest(f"{name}-{tool.replace(' ', '-')}-{link}")
        argv, env = self.command(tool, name, dest, link)
        os.sync()  # no run pays for writing back another's files
        proxy0 = self.proxy_cpu() if link == "shaped" else 0.0
        with self.writer(loaded):
            t = B.run(argv, env)
        proxy = self.proxy_cpu() - proxy0 if link == "shaped" else 0.0
        if tool not in ("s5cmd", "aws"):
            doc = json.loads(t.stdout)
            assert doc["files_fetched"] == len(tree.files), (tool, doc)
        B.check_tree(dest / "neff", tree, tool, full=True)
        B.evict_page_cache(dest)
        return t, proxy

    def proxy_cpu(self) -> float:
        return process_cpu_seconds(self.proxy_pid) if self.proxy_pid else 0.0

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
        """Untimed warm-up of s5cmd and neffcache (SeaweedFS's first read of an object is
        slow), then rounds in rotating order: every tool on loopback quiet and beside the
        writer (s5cmd's slowdown beside it is the peer: what the machine itself loses to the
        writer), and through the shaped link. Keys: "TOOL", "TOOL loaded", "TOOL shaped"."""
        for tool in ["s5cmd", *self.restorers][:2]:
            self.once(tool, name, tree)
        cases = [(t, False, "loopback") for t in self.tools]
        if self.writer_bytes:
            cases += [(t, True, "loopback") for t in self.tools]
        if "shaped" in self.endpoints:
            cases += [(t, False, "shaped") for t in self.tools]
        out = {case_key(*c): Samples() for c in cases}
        for i in range(self.runs):
            k = i % len(cases)
            for tool, loaded, link in cases[k:] + cases[:k]:
                t, proxy = self.once(tool, name, tree, loaded=loaded, link=link)
                key = case_key(tool, loaded, link)
                out[key].add(t)
                out[key].proxy_cpu.append(proxy)
                B.log(f"{name}: {key} {i + 1}: {t.seconds:.2f} s")
        return out


def case_key(tool: str, loaded: bool, link: str) -> str:
    return tool + (" loaded" if loaded else "") + (" shaped" if link == "shaped" else "")


def stored_bytes(s3: Any, prefix: str) -> tuple[int, int]:
    """(bytes, objects) the store holds under ``prefix`` (blobs, packs, manifests)."""
    total = count = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        for obj in page.get("Contents", []):
            total += obj["Size"]
            count += 1
    return total, count


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


@dataclass
class Row:
    name: str
    tree: ProfileTree
    push: dict[str, Samples]
    rest: dict[str, Samples]
    stored: dict[str, tuple[int, int]]  # pusher -> (bytes, objects) in its store prefix


def report(row: Row, restorers: list[str], shape: LinkShape | None) -> tuple[list[str],
                                                                            dict[str, bool]]:
    name, tree, push, rest = row.name, row.tree, row.push, row.rest
    gib = tree.total_bytes / GiB
    s5 = rest["s5cmd"]
    lines = [f"{name}: {len(tree.files)} files, {tree.total_bytes / MiB:.0f} MiB "
             f"(medians of {len(s5.seconds)})", "  loopback:"]
    verdicts: dict[str, bool] = {}
    for tool in [t for t in ("s5cmd", "aws", *restorers) if t in rest]:
        q = rest[tool]
        ratio = q.median() / s5.median()
        lines.append(f"    {tool:21} {q.median():6.2f} s   {ratio:5.2f} x s5cmd   CPU "
                     f"{q.cpu_median() / gib:5.2f} s/GiB   peak RSS {q.rss_mib():4.0f} MiB   "
                     f"(all: {q.all()})")
        if tool in restorers:
            verdicts[f"{name}: {tool} restore <= {TARGETS[name]} x s5cmd (issue 22)"] = \
                ratio <= TARGETS[name]
            verdicts[f"{name}: {tool} restore ahead of s5cmd on loopback (<= 1.0 x)"] = \
                ratio <= 1.0
            verdicts[f"{name}: {tool} CPU/GiB <= s5cmd's"] = q.cpu_median() <= s5.cpu_median()
        ld = rest.get(f"{tool} loaded")
        if ld is not None:
            lratio = ld.median() / q.median()
            lines.append(f"      beside the writer   {ld.median():6.2f} s   {lratio:5.2f} x quiet"
                         + (" (the peer)" if tool == "s5cmd" else f" (target <= {LOADED_TARGET})")
                         + f"   (all: {ld.all()})")
            if tool in restorers:
                verdicts[f"{name}: {tool} beside the writer <= {LOADED_TARGET} x quiet"] = \
                    lratio <= LOADED_TARGET
    if shape is not None and "s5cmd shaped" in rest:
        limit = shape.limit_seconds(tree.total_bytes)
        s5s = rest["s5cmd shaped"]
        lines.append(f"  shaped link ({shape.describe()}): physical limit {limit:.2f} s "
                     f"= {tree.total_bytes / MiB:.0f} MiB / link rate + one latency")
        for tool in [t for t in ("s5cmd", "aws", *restorers) if f"{t} shaped" in rest]:
            q = rest[f"{tool} shaped"]
            lines.append(f"    {tool:21} {q.median():6.2f} s   {q.median() / limit:5.2f} x limit"
                         f"   {q.median() / s5s.median():5.2f} x s5cmd   CPU "
                         f"{q.cpu_median() / gib:5.2f} s/GiB   link's CPU "
                         f"{statistics.median(q.proxy_cpu):4.2f} s   (all: {q.all()})")
            if tool in restorers:
                verdicts[f"{name}: {tool} over the shaped link <= {SHAPED_TARGET} x limit"] = \
                    q.median() <= SHAPED_TARGET * limit
    p, c = push["push"], push["s5cmd cp"]
    pratio = p.median() / c.median()
    lines.append(f"  push (loopback)         {p.median():6.2f} s   {pratio:5.2f} x s5cmd cp "
                 f"{c.median():.2f} s (target <= {PUSH_TIME_TARGET} x)   peak RSS "
                 f"{p.rss_mib():.0f} MiB vs {c.rss_mib():.0f} MiB   (all: {p.all()}; s5cmd cp: "
                 f"{c.all()})")
    for tool, (nbytes, nobj) in row.stored.items():
        lines.append(f"    {'stored by ' + tool:21} {nbytes / MiB:6.0f} MiB in {nobj} objects = "
                     f"{nbytes / tree.total_bytes:.2f} x the tree's bytes (s5cmd cp: 1.00 x, "
                     f"{len(tree.files)} objects)")
    for tool in (t for t in push if t not in ("push", "s5cmd cp")):
        o = push[tool]
        lines.append(f"  {tool:23} {o.median():6.2f} s   {o.median() / c.median():5.2f} x s5cmd"
                     f" cp   peak RSS {o.rss_mib():.0f} MiB   (all: {o.all()})")
    verdicts[f"{name}: push <= {PUSH_TIME_TARGET} x s5cmd cp"] = pratio <= PUSH_TIME_TARGET
    verdicts[f"{name}: push <= {PUSH_RSS_TARGET_MIB} MiB RSS"] = \
        p.rss_mib() <= PUSH_RSS_TARGET_MIB
    return lines, verdicts


def markdown(rows: list[Row], restorers: list[str], shape: LinkShape | None) -> list[str]:
    """The README's tables: restore per tree and link (time, x s5cmd, x the limit), CPU per
    GiB, push with the store's bytes."""
    tools = [t for t in ("s5cmd", "aws", *restorers) if rows and t in rows[0].rest]
    head = ["tree", "link (limit)", *tools, "CPU s/GiB: " + " / ".join(tools)]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        gib, tree = row.tree.total_bytes / GiB, row.tree
        label = f"{row.name}, {len(tree.files)} files, {tree.total_bytes / MiB:.0f} MiB"
        links = [("loopback", "", None)]
        if shape is not None and "s5cmd shaped" in row.rest:
            links.append(("shaped", " shaped", shape.limit_seconds(tree.total_bytes)))
        for link, suffix, limit in links:
            s5 = row.rest["s5cmd" + suffix].median()
            cells = [label, link + (f" ({limit:.2f} s)" if limit else "")]
            for t in tools:
                m = row.rest[t + suffix].median()
                cells.append(f"{m:.2f} s ({m / s5:.2f} ×" +
                             (f"; {m / limit:.2f} × limit)" if limit else ")"))
            cells.append(" / ".join(f"{row.rest[t + suffix].cpu_median() / gib:.2f}"
                                    for t in tools))
            out.append("| " + " | ".join(cells) + " |")
    out += ["", "| tree | push | s5cmd cp | push × s5cmd cp | stored (× tree bytes) | "
            "push peak RSS |", "|---|---|---|---|---|---|"]
    for row in rows:
        p, c = row.push["push"], row.push["s5cmd cp"]
        nbytes, nobj = row.stored.get("push", (0, 0))
        out.append(f"| {row.name} | {p.median():.2f} s | {c.median():.2f} s | "
                   f"{p.median() / c.median():.2f} × | {nbytes / MiB:.0f} MiB in {nobj} objects "
                   f"({nbytes / row.tree.total_bytes:.2f} ×) | {p.rss_mib():.0f} MiB |")
    return out


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small trees, 1 run, 256 MiB writer")
    p.add_argument("--runs", type=int, default=None, help="runs of each (default 3; quick 1)")
    p.add_argument("--trees", default=",".join(TREES), help="comma-separated: " + ", ".join(TREES))
    p.add_argument("--baseline", type=Path, default=None, metavar="CHECKOUT",
                   help="also time this checkout's restore (PYTHONPATH=CHECKOUT), same run")
    p.add_argument("--writer-mib", type=int, default=None,
                   help="heavy writer (default 2048; 0: no runs beside a writer)")
    p.add_argument("--links", default="loopback,shaped",
                   help="loopback, or loopback,shaped (default): also through the shaped link")
    p.add_argument("--latency-ms", type=float, default=20.0, help="shaped link: per request")
    p.add_argument("--link-mbit", type=float, default=1000.0, help="shaped link: shared rate")
    p.add_argument("--conn-mbit", type=float, default=700.0, help="shaped link: per connection")
    p.add_argument("--no-aws", action="store_true", help="leave `aws s3 sync` out")
    p.add_argument("--first-cells", type=int, default=20,
                   help="time to first cell: cells in its matrix (default 20; 0: skip it)")
    p.add_argument("--first-large-mib", type=int, default=None,
                   help="time to first cell: size of each cell's 6 large files (default 64; "
                        "quick 4)")
    p.add_argument("--first-runs", type=int, default=None,
                   help="time to first cell: runs per link (default --runs)")
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
    writer = (256 if args.quick else 2048) if args.writer_mib is None else args.writer_mib
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
            text = bench(Path(tmp), names, shapes, runs, seed, writer << 20, restorers, args)
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
    links = [x.strip() for x in args.links.split(",") if x.strip()]
    shape = LinkShape(args.latency_ms / 1e3, args.link_mbit * 1e6, args.conn_mbit * 1e6) \
        if "shaped" in links else None
    aws, aws_note = (None, "aws left out") if args.no_aws else \
        B.find_aws(Path.home() / ".cache" / "neffcache-bench", allow_install=False)
    B.log(aws_note)
    load0 = os.getloadavg()
    with s3_server(work) as (endpoint, creds, server), \
            (shaped_link(endpoint, shape) if shape else nullcontext(("", 0))) as (shaped, pid):
        env.update(creds, AWS_ENDPOINT_URL=endpoint, AWS_REGION="us-east-1")
        import boto3

        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"])
        s3.create_bucket(Bucket=BUCKET)
        endpoints = {"loopback": endpoint} | ({"shaped": shaped} if shape else {})
        b = Bench(work, env, endpoints, matrix, runs, writer, restorers, aws, pid or None)
        prepared = []
        for name in names:
            tree = make_profile_cache(work / "src" / name, shapes[name], seed=seed)
            push = b.push(name, tree)
            stored = {"push": stored_bytes(s3, f"neff-{name}-0/")} | {
                f"push ({t})": stored_bytes(s3, f"neff-{name}-{k}-0/")
                for k, t in enumerate(restorers) if k}
            prepared.append((name, tree, push, stored))
        first = None
        if args.first_cells:
            large = args.first_large_mib or (4 if args.quick else 64)
            first = F.prepare(work, env, args.first_cells, large, seed)
        B.settle(args.settle if args.settle is not None else (0 if args.quick else 20))
        rows, text, verdicts = [], [], {}
        for k, (name, tree, push, stored) in enumerate(prepared):
            if k:  # the last tree's restores, deleted: wait until ext4 reuses their inodes
                forget_outputs(b.out, 0 if args.quick else DELETE_SETTLE_S)
            row = Row(name, tree, push, b.restores(name, tree), stored)
            lines, v = report(row, list(restorers), shape)
            text += lines + [""]
            verdicts |= v
            rows.append(row)
        shutil.rmtree(b.out, ignore_errors=True)
        if first is not None:
            fmatrix, cells = first
            shutil.rmtree(work / "src-first", ignore_errors=True)
            nbytes = sum(t.total_bytes for _, t in cells)
            fres = F.measure(fmatrix, cells, work, env, endpoints, args.first_runs or runs)
            lines, v = F.report(fres, cells, {"shaped": shape.limit_seconds(nbytes)}
                                if shape else {})
            text += lines + [""]
            verdicts |= v
    head = [f"boot benchmark: {server} on 127.0.0.1, seed {seed}, {runs} run(s) each, writer "
            f"{writer >> 20} MiB; restorers: " +
            ", ".join(f"{k} ({v['PYTHONPATH']})" for k, v in restorers.items()) +
            f"; {aws_note}", "links: loopback" + (f"; shaped: {shape.describe()} (the "
                                                  "tools/bench/shaped_link.py proxy, its own "
                                                  "process)" if shape else ""),
            f"load average {load0[0]:.1f} at start, {os.getloadavg()[0]:.1f} at end "
            f"({os.cpu_count()} cpus)", ""]
    return head + text + [f"{'met' if ok else 'MISSED':6}  {what}"
                          for what, ok in verdicts.items()] + [""] + \
        markdown(rows, list(restorers), shape) + [""]


if __name__ == "__main__":
    sys.exit(main())
