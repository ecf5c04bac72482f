"""Memory benchmark: peak RSS of `neffcache restore` of a huge entry and of `neffcache push`.

One command, from the checkout:

    python tools/bench/memory.py                       # 1M-file restore + push (~10 min)
    python tools/bench/memory.py --files 200000        # a quicker restore case
    python tools/bench/memory.py --skip-push           # restore case only
    python tools/bench/memory.py --skip-restore --runs 3
    python tools/bench/memory.py --peer /work/main     # same cases with another checkout
    python tools/bench/memory.py --skip-push --missing-blobs  # a 1M-file entry, every blob gone

(a) restore: writes a local store holding one entry of ``--files`` files of 16-64 bytes (unique
contents) in packs, its manifest made from a real one-file `neffcache push` (so cell and
fingerprint are this host's) with the files and packs replaced; then times `neffcache restore`
of it into an empty directory and reports its peak RSS against the 1 GiB target (issue 22).
With ``--missing-blobs`` the entry lists no packs and its blobs are deleted once written, so
every file is one GET of a blob missing from the store: the restore must fail (exit 4, nothing
installed) within the memory of a good one (issue 38). (b) push: starts SeaweedFS on 127.0.0.1,
writes the eager tree (3,000 files of 8-256 KiB) and the compiled tree (6 x 64 MiB + 300
small), and per run pushes each to a fresh store prefix with `neffcache push` and uploads the
same files with `s5cmd cp`, alternating the order; reports medians, the time ratio (target <=
1.5) and peak RSS (target <= 200 MiB).

With ``--peer DIR`` every neffcache case also runs with ``PYTHONPATH=DIR`` (another checkout,
e.g. the main branch), so before and after are measured in the same run. Every command is
started by a small spawner process, so a child's peak RSS (wait4) is its own.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.support.servers import WEED_CREDENTIALS, seaweedfs_server, weed_binary  # noqa: E402
from tests.support.synthetic import KiB, MiB, Profile, make_profile_cache  # noqa: E402

BUCKET = "bench"
BIN = Path(sys.executable).parent
GiB = 1 << 30
RESTORE_TARGET_RSS = 1 * GiB
PUSH_TARGET_RSS = 200 * MiB
PUSH_TARGET_RATIO = 1.5
PACK_BYTES = 8 * MiB
MATRIX = """\
backend = "neuron"
[[pipelines]]
name = "bench-mem"
class = "diffusers:Flux2KleinPipeline"
model = "/models/bench"
mode = "eager"
shapes = ["1024x1024"]
"""
CELL = "bench-mem/eager/1024x1024/b1/tp1"
TREES = {"eager": Profile("eager", small=3000, small_size=(8 * KiB, 256 * KiB)),
         "compiled": Profile("compiled", small=300, small_size=(1 * KiB, 64 * KiB), large=6,
                             large_size=(64 * MiB, 64 * MiB))}

_SPAWNER = r"""
import json, os, subprocess, sys, tempfile, time
for line in sys.stdin:
    job = json.loads(line)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(job["argv"], env=job["env"], stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err, cwd=job["cwd"])
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        out.seek(0); err.seek(0)
        print(json.dumps({"seconds": seconds, "maxrss": usage.ru_maxrss,
                          "code": os.waitstatus_to_exitcode(status),
                          "stdout": out.read().decode(errors="replace"),
                          "stderr": err.read().decode(errors="replace")}), flush=True)
"""


class Spawner:
    """A small process that starts every measured command: a child's peak RSS is then its
    own (Linux counts a child's peak from the memory its parent had when it forked)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _SPAWNER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def run(self, argv: Sequence[str], env: dict[str, str],
            codes: Sequence[int] = (0,)) -> dict[str, Any]:
        """Run from the checkout named by PYTHONPATH (``python -c`` imports from its cwd); an
        exit code not in ``codes`` is an error."""
        assert self.proc.stdin and self.proc.stdout
        job = {"argv": list(argv), "env": env, "cwd": env.get("PYTHONPATH") or str(REPO)}
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        r: dict[str, Any] = json.loads(self.proc.stdout.readline())
        if r["code"] not in codes:
            raise RuntimeError(f"{' '.join(argv[:3])} exited {r['code']}:\n{r['stderr'][-3000:]}")
        return r

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=10)


def log(msg: str) -> None:
    print(f"[memory {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def neffcache(code: Path) -> list[str]:
    """`neffcache` as the console script would run it, from the checkout ``code``."""
    del code  # chosen by PYTHONPATH (env_for)
    return [sys.executable, "-c", "import sys; from neffcache.cli import main; sys.exit(main())"]


def env_for(base: dict[str, str], code: Path, **extra: str) -> dict[str, str]:
    return dict(base, PYTHONPATH=str(code), **extra)


# --- (a) restore of a huge entry ------------------------------------------------------------

def make_store(work: Path, files: int, spawner: Spawner, env: dict[str, str],
               code: Path, packs: bool = True) -> Path:
    """A local store with one entry of ``files`` tiny files in packs (no separate blobs: the
    packs hold every byte a restore needs). The manifest is a real push's, files replaced;
    with ``packs=False`` it lists no pack (each file is a blob of its own: one GET each)."""
    store = work / "store"
    seed = work / "seed"
    seed.mkdir(parents=True)
    (seed / "00").mkdir()
    (seed / "00" / "seed.neff").write_bytes(b"NEFF seed")
    matrix = work / "matrix.toml"
    matrix.write_text(MATRIX, encoding="utf-8")
    spawner.run([*neffcache(code), "push", "--matrix", str(matrix), "--cell", CELL,
                 "--root", f"neff={seed}", "--json", "--allow-missing-packages"],
                env_for(env, code, NEFFCACHE_STORE=str(store)))
    sys.path.insert(0, str(code))
    from neffcache.manifest import decode_manifest, encode_manifest  # noqa: PLC0415

    (path,) = (store / "manifests").glob("*.json")
    doc = json.loads(path.read_bytes())
    doc.pop("manifest_sha256", None)
    with_packs = packs
    records, packs = _tiny_files(store, files)
    doc["files"], doc["packs"] = records, (packs if with_packs else [])
    doc.pop("parts", None)
    manifest = decode_manifest(json.dumps(doc).encode(), source="bench")
    del doc, records, packs
    path.write_bytes(encode_manifest(manifest))
    log(f"manifest: {len(manifest.files)} files, {len(manifest.packs)} packs, "
        f"{path.stat().st_size / MiB:.0f} MiB")
    return store


def _tiny_files(store: Path, files: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    records: list[dict[str, Any]] = []
    packs: list[dict[str, Any]] = []
    body = bytearray()
    members: list[list[Any]] = []

    def flush() -> None:
        sha = hashlib.sha256(body).hexdigest()
        p = store / "packs" / sha[:2] / sha
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(body)
        packs.append({"sha256": sha, "size": len(body), "members": list(members)})
        body.clear()
        members.clear()

    for i in range(files):
        data = (f"neff {i} ".encode() * 8)[: 16 + (i * 7919) % 49]
        sha = hashlib.sha256(data).hexdigest()
        records.append({"root": "neff", "path": f"{i % 251:02x}/{i % 61:02x}/{sha[:32]}.neff",
                        "size": len(data), "sha256": sha, "mode": 0o644})
        members.append([sha, len(body), len(data)])
        body += data
        if len(body) >= PACK_BYTES:
            flush()
    if members:
        flush()
    return records, packs


def bench_restore(work: Path, store: Path, spawner: Spawner, env: dict[str, str],
                  codes: dict[str, Path], files: int, dest_dir: Path,
                  phases: bool = False, rerun: bool = False,
                  missing: bool = False) -> dict[str, Any]:
    """Restore the entry with each checkout; with ``phases``, each run also logs its RSS after
    each step of the restore (``NEFFCACHE_DEBUG_RSS=1``, see ``neffcache.restore.run``); with
    ``rerun``, the same restore again into the same directory (nothing to fetch), then again
with one restored file deleted (one file to fetch: the full path, state file and all); with
``missing`` (the store lost every blob: ``drop_blobs``), the restore must fail with exit 4 and
install nothing."""
    out: dict[str, Any] = {"files": files, "dest": str(dest_dir),
                           **({"missing_blobs": True} if missing else {})}
    for name, code in codes.items():
        dest = dest_dir / f"neffcache-mem-{os.getpid()}-{name}"
        runs = [(f"{name}, blobs missing" if missing else name, 0 if missing else files)] + (
            [(f"{name}, rerun", 0), (f"{name}, one file deleted", 1)] if rerun else [])
        for label, fetched in runs:
            if fetched == 1:
                _delete_one_file(dest)
            os.sync()
            r = spawner.run([*neffcache(code), "restore", str(work / "matrix.toml"), "--to",
                             str(dest), "--cells", CELL, "--json"],
                            env_for(env, code, NEFFCACHE_STORE=str(store),
                                    NEFFCACHE_HOME=str(work / f"home-{name}"),
                                    **({"NEFFCACHE_DEBUG_RSS": "1"} if phases else {})),
                            codes=(4,) if missing else (0,))
            doc = json.loads(r["stdout"])
            assert doc["files_fetched"] == fetched, doc
            if missing:
                assert doc["status"] == "failed" and doc["files_failed_count"] == files, \
                    {k: v for k, v in doc.items() if k != "files_failed"}
            else:
                assert doc["status"] == "ok", doc
            steps = [ln for ln in r["stderr"].splitlines() if ln.startswith("neffcache rss:")]
            for ln in steps:
                log(f"  ({label}) {ln}")
            out[label] = {"seconds": round(r["seconds"], 2),
                          "max_rss_mib": round(r["maxrss"] / 1024),
                          **({"phases": steps} if steps else {})}
            log(f"restore {files} files ({label}): {r['seconds']:.1f} s, "
                f"{r['maxrss'] / 1024:.0f} MiB peak RSS")
        shutil.rmtree(dest)
    return out


def drop_blobs(store: Path) -> None:
    """Delete every pack and blob of the store (its manifests stay): each file of the entry
    is then missing from the store, one blob GET (NotFound) each."""
    for d in ("packs", "blobs"):
        shutil.rmtree(store / d, ignore_errors=True)
    log("store: packs and blobs deleted (every blob missing)")


def _delete_one_file(dest: Path) -> None:
    """Delete one restored file (the first found): the rerun then fetches just that one."""
    for dirpath, _dirs, names in os.walk(dest):
        if ".neffcache" not in dirpath and (victims := [n for n in names
                                                          if not n.startswith(".neffcache")]):
            os.unlink(os.path.join(dirpath, victims[0]))
            return
    raise AssertionError(f"no restored file under {dest}")


# --- (b) push vs s5cmd cp -------------------------------------------------------------------

def bench_push(work: Path, spawner: Spawner, env: dict[str, str], codes: dict[str, Path],
               runs: int, trees: Sequence[str]) -> dict[str, Any]:
    import boto3  # noqa: PLC0415

    results: dict[str, Any] = {}
    work.mkdir(parents=True, exist_ok=True)
    matrix = work / "matrix.toml"
    matrix.write_text(MATRIX, encoding="utf-8")
    s5cmd = str(BIN / "s5cmd") if (BIN / "s5cmd").exists() else "s5cmd"
    with seaweedfs_server(work / "seaweedfs", weed=weed_binary() or "weed") as endpoint:
        env = dict(env, **WEED_CREDENTIALS, AWS_ENDPOINT_URL=endpoint,
                   AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                     aws_access_key_id="testing", aws_secret_access_key="testing"
                     ).create_bucket(Bucket=BUCKET)
        for tree_name in trees:
            tree = make_profile_cache(work / "src" / tree_name, TREES[tree_name])
            log(f"{tree_name}: {len(tree.files)} files, {tree.total_bytes / MiB:.0f} MiB")
            tools = {f"neffcache push ({n})": n for n in codes} | {"s5cmd cp": ""}
            seconds: dict[str, list[float]] = {t: [] for t in tools}
            rss: dict[str, list[int]] = {t: [] for t in tools}
            order = list(tools)
            for i in range(runs):
                for tool in order[i % len(order):] + order[:i % len(order)]:
                    prefix = f"{tree_name}-{i}-{tool.split()[-1].strip('()')}"
                    if tools[tool]:
                        code = codes[tools[tool]]
                        argv = [*neffcache(code), "push", "--matrix", str(matrix), "--cell", CELL,
                                "--root", f"neff={tree.root}", "--json",
                                "--allow-missing-packages"]
                        e = env_for(env, code, NEFFCACHE_STORE=f"s3://{BUCKET}/{prefix}",
                                    NEFFCACHE_HOME=str(work / "home"))
                    else:
                        argv = [s5cmd, "--endpoint-url", endpoint, "cp", f"{tree.root}/",
                                f"s3://{BUCKET}/{prefix}/"]
                        e = env
                    os.sync()
                    r = spawner.run(argv, e)
                    seconds[tool].append(r["seconds"])
                    rss[tool].append(r["maxrss"])
                    log(f"{tree_name}: {tool} run {i + 1}: {r['seconds']:.2f} s, "
                        f"{r['maxrss'] / 1024:.0f} MiB")
            results[tree_name] = {
                "files": len(tree.files), "bytes": tree.total_bytes,
                "median_seconds": {t: round(statistics.median(v), 2) for t, v in seconds.items()},
                "max_rss_mib": {t: round(max(v) / 1024) for t, v in rss.items()},
                "seconds": seconds}
    return results


# --- report ----------------------------------------------------------------------------------

def table(results: dict[str, Any]) -> str:
    rows = [("case", "tool", "seconds", "peak RSS MiB", "vs target")]
    r = results.get("restore")
    if r:
        for name, v in r.items():
            if name in ("files", "dest", "missing_blobs"):
                continue
            rows.append((f"restore {r['files']} files", f"neffcache ({name})", f"{v['seconds']}",
                         f"{v['max_rss_mib']}",
                         f"{v['max_rss_mib'] * MiB / RESTORE_TARGET_RSS:.2f} x 1 GiB"))
    for tree, p in results.get("push", {}).items():
        peer = p["median_seconds"]["s5cmd cp"]
        for tool, med in p["median_seconds"].items():
            mib = p["max_rss_mib"][tool]
            verdict = "" if tool == "s5cmd cp" else \
                f"{med / peer:.2f} x s5cmd, {mib * MiB / PUSH_TARGET_RSS:.2f} x 200 MiB"
            rows.append((f"push {tree}: {p['files']} files, {p['bytes'] / MiB:.0f} MiB", tool,
                         f"{med}", f"{mib}", verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--files", type=int, default=1_000_000, help="restore case: files (1M)")
    p.add_argument("--runs", type=int, default=3, help="push case: runs per tool (3)")
    p.add_argument("--trees", default="eager,compiled", help="push case: eager, compiled")
    p.add_argument("--peer", type=Path, default=None,
                   help="another checkout to measure in the same run (e.g. /work/main)")
    p.add_argument("--phases", action="store_true",
                   help="restore case: log RSS after each restore step (NEFFCACHE_DEBUG_RSS=1)")
    p.add_argument("--rerun", action="store_true",
                   help="restore case: restore again into the same directory (nothing to "
                        "fetch), then again with one restored file deleted")
    p.add_argument("--missing-blobs", action="store_true",
                   help="restore case: every blob and pack missing from the store (exit 4 "
                        "expected): failure's peak RSS against a good restore's")
    p.add_argument("--skip-restore", action="store_true")
    p.add_argument("--skip-push", action="store_true")
    p.add_argument("--dest", type=Path, default=Path("/dev/shm"),
                   help="restore case: restore under DEST (default /dev/shm: a million files "
                        "created and deleted on this VM's ext4 take many minutes; RSS is the "
                        "same)")
    p.add_argument("--workdir", type=Path, default=None, help="data here (default: a temp dir)")
    p.add_argument("--out", type=Path, default=None, help="JSON results path")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.missing_blobs and args.rerun:
        raise SystemExit("--missing-blobs fails the restore: there is nothing to --rerun")
    spawner = Spawner()
    codes = {"this": REPO} | ({"peer": args.peer.absolute()} if args.peer else {})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "NEFFCACHE_"))}
    env.update(NEFFCACHE_INSTANCE_TYPE="trn2.48xlarge", HF_HUB_OFFLINE="1",
               PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    results: dict[str, Any] = {"schema_version": 1, "codes": {k: str(v) for k, v in codes.items()},
                               "loadavg_start": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="neffcache-mem-", dir=args.workdir) as tmp:
        work = Path(tmp)
        try:
            if not args.skip_restore:
                log(f"restore: writing a store of {args.files} files")
                store = make_store(work / "restore", args.files, spawner, env, REPO,
                                   packs=not args.missing_blobs)
                if args.missing_blobs:
                    drop_blobs(store)
                results["restore"] = bench_restore(work / "restore", store, spawner, env, codes,
                                                   args.files, args.dest, args.phases,
                                                   args.rerun, args.missing_blobs)
                shutil.rmtree(work / "restore")
            if not args.skip_push:
                trees = [t.strip() for t in args.trees.split(",") if t.strip()]
                results["push"] = bench_push(work / "push", spawner, env, codes, args.runs,
                                             trees)
        finally:
            spawner.close()
    results["loadavg_end"] = os.getloadavg()
    out = args.out or REPO / "tools" / "bench" / "results" / \
        f"memory-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(table(results))
    print(f"\nload average {results['loadavg_start'][0]:.1f} at start, "
          f"{results['loadavg_end'][0]:.1f} at end; JSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
