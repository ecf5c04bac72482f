"""Interleaved A/B of restore variants against s5cmd, in one run on one SeaweedFS.

Each variant is an environment overlay for `neffcache restore` (e.g. PYTHONPATH pointing at
another checkout, or a setting); runs rotate through the variants and s5cmd round by round,
every output evicted from the page cache, so machine drift lands on all of them alike.
Prints medians, each tool's ratio to s5cmd and the restore's user/system CPU.

    python tools/bench/restore_ab.py --profile compiled \\
        --variant 'before={"PYTHONPATH": "/path/to/old-checkout"}' --variant 'now={}'

With --io-load every round is run twice, once quiet and once while another process writes to
the same disk (``dd`` in a loop, beside the restores' output: ``buffered``, the default, leaves
dirty pages that any sync must also write, as a busy service's writes would; ``direct`` uses
O_DIRECT and only contends for the device), and both conditions' medians and ratios are
reported. The issue's compiled tree (6 x 64 MiB + 300
small files) is ``--tree '--compiled-graphs 6 --compiled-mib 64,64 --compiled-small 300'``.

The restore.py benchmark's profiles, settle and eviction are reused; the entry is pushed by
the checkout this script runs from (or --pusher PATH).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

import restore as B  # noqa: E402  (the benchmark beside this file)

from tests.support.servers import seaweedfs_server, weed_binary  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", choices=("eager", "compiled"), default="compiled")
    p.add_argument("--variant", action="append", required=True, metavar="NAME=JSON",
                   help="a variant: its name and a JSON object of environment overrides; "
                        "`ARGS` in it adds restore arguments (e.g. '--workers 4')")
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--pusher", metavar="PATH", help="PYTHONPATH of the checkout that pushes")
    p.add_argument("--settle", type=float, default=20.0)
    p.add_argument("--tree", default="", metavar="ARGS",
                   help="restore.py's profile options, e.g. '--compiled-graphs 6 "
                        "--compiled-mib 64,64 --compiled-small 300'")
    p.add_argument("--io-load", nargs="?", const="buffered", choices=("buffered", "direct"),
                   default=None,
                   help="also run every round while another process writes to the same disk "
                        "(dd in a loop, buffered or O_DIRECT); report both conditions")
    return p.parse_args()


class IoLoad:
    """Another process writing to the disk of ``where`` for as long as it runs: ``dd``, 1 MiB
    writes, rewriting a 512 MiB file in a loop; ``buffered`` (its dirty pages are written back
    by the kernel, and any sync of the filesystem waits for them) or ``direct`` (O_DIRECT: only
    the device is contended)."""

    def __init__(self, where: Path, kind: str) -> None:
        self.path = where / "io-load.bin"
        self.flag = "oflag=direct" if kind == "direct" else ""
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> IoLoad:
        loop = (f"while :; do dd if=/dev/zero of={shlex.quote(str(self.path))} bs=1M "
                f"count=512 {self.flag} conv=notrunc status=none; done")
        self.proc = subprocess.Popen(["bash", "-c", loop], start_new_session=True)
        time.sleep(0.5)  # let it reach a steady rate
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: bash and its dd
            self.proc.wait()
        self.path.unlink(missing_ok=True)


def main() -> int:
    args = parse_args()
    variants: dict[str, dict[str, str]] = {}
    for spec in args.variant:
        name, _, overlay = spec.partition("=")
        variants[name] = json.loads(overlay or "{}")
    work = Path(tempfile.mkdtemp(prefix="neffcache-ab-"))
    B.start_spawner()
    try:
        print(json.dumps(run(args, variants, work), indent=2))
    finally:
        B.stop_spawner()
        shutil.rmtree(work, ignore_errors=True)
    return 0


def run(args: argparse.Namespace, variants: dict[str, dict[str, str]],
        work: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "NEFFCACHE_"))}
    env.update(B.WEED_CREDENTIALS, NEFFCACHE_STORE=f"s3://{B.BUCKET}/neff",
               NEFFCACHE_INSTANCE_TYPE="trn2.48xlarge", NEFFCACHE_HOME=str(work / "home"),
               AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    matrix = work / "matrix.toml"
    matrix.write_text(B.MATRIX, encoding="utf-8")
    profile = B.profiles_from(B.parse_args(["--profiles", args.profile,
                                            *shlex.split(args.tree)]))[args.profile]
    with seaweedfs_server(work / "seaweedfs", weed=weed_binary() or "weed") as endpoint:
        env["AWS_ENDPOINT_URL"] = endpoint
        import boto3

        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                     aws_access_key_id="testing", aws_secret_access_key="testing"
                     ).create_bucket(Bucket=B.BUCKET)
        push_env = dict(env, PYTHONPATH=args.pusher) if args.pusher else env
        bench = B.Bench(work, push_env, endpoint, None, args.runs, None, work / "out")
        tree = B.make_profile_cache(work / "src", profile)
        bench.push(args.profile, tree, matrix)
        bench.upload_plain(args.profile, tree)
        B.settle(args.settle)

        def command(tool: str, dest: Path) -> tuple[list[str], dict[str, str]]:
            if tool == "s5cmd":
                return [B.s5cmd(), "--endpoint-url", endpoint, "cp",
                        f"s3://{B.BUCKET}/plain/{args.profile}/*", f"{dest}/neff/"], env
            overlay = dict(variants[tool])
            extra = overlay.pop("ARGS", "").split()
            return (["/usr/bin/time", "-f", "CPU %U %S", *B.neffcache(), "restore", str(matrix),
                     "--to", str(dest), "--cells", B.CELLS[args.profile], "--json", *extra],
                    dict(env, **overlay))

        order = [*variants, "s5cmd"]
        for k, tool in enumerate(order):  # one untimed run each: SeaweedFS's first reads are slow
            dest = work / "out" / f"warmup-{k}"
            B.run(*command(tool, dest))
            B.evict_page_cache(dest)
        conditions = ["quiet", "io-load"] if args.io_load else ["quiet"]
        times = {c: {t: [] for t in order} for c in conditions}
        cpu: dict[str, dict[str, list[tuple[float, float]]]] = {
            c: {t: [] for t in variants} for c in conditions}
        for i in range(args.runs):
            for c in conditions:
                for j, tool in enumerate(order[i % len(order):] + order[:i % len(order)]):
                    dest = work / "out" / f"{c}-{i}-{j}"
                    os.sync()
                    with IoLoad(work, args.io_load) if c == "io-load" else _Nothing():
                        t = B.run(*command(tool, dest))
                    times[c][tool].append(t.seconds)
                    if tool in variants:
                        user, system = t.stderr.strip().splitlines()[-1].split()[1:3]
                        cpu[c][tool].append((float(user), float(system)))
                    B.evict_page_cache(dest)
                    B.log(f"{c} round {i + 1}: {tool} {t.seconds:.2f} s")
    result: dict[str, Any] = {"profile": args.profile, "tree": args.tree, "runs": args.runs,
                              "io_load": args.io_load, "loadavg": os.getloadavg()}
    for c in conditions:
        peer = statistics.median(times[c]["s5cmd"])
        result[c] = {"s5cmd": round(peer, 3), "s5cmd_runs": times[c]["s5cmd"]}
        for tool in variants:
            median = statistics.median(times[c][tool])
            result[c][tool] = {"median": round(median, 3),
                               "ratio_to_s5cmd": round(median / peer, 2),
                               "runs": [round(x, 3) for x in times[c][tool]],
                               "user": statistics.median(u for u, _ in cpu[c][tool]),
                               "system": statistics.median(s for _, s in cpu[c][tool])}
            print(f"{c:8s} {tool:24s} {median:.3f} s  {median / peer:.2f} x s5cmd "
                  f"({peer:.3f} s)", file=sys.stderr)
    return result


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    sys.exit(main())
