"""Concurrent readers of ``neffcache serve``: 1 client, then N clients (default 20) hammering
/metrics, /api/summary and both mixed, against an index filled as ``ops.py`` fills it (its
``fill``: at --scale 1, 990,000 entries); prints p50, p99 and responses per second of each,
and the N-client figures as ratios to the one client's, in the same run.

    python tools/bench/serve_load.py                                   # both databases, 0.1
    python tools/bench/serve_load.py --scale 1 --baseline /tmp/nc-old \\
        --out tools/bench/results/serve-load-1m.txt

--baseline CHECKOUT also serves the same index from another checkout (PYTHONPATH pointing at
it; e.g. ``git archive COMMIT | tar -x -C /tmp/nc-old``), interleaved with this one phase by
phase. The index is migrated to the baseline's schema head before its server starts and back
to this code's head after (``neffcache db`` downgrade/upgrade, so both read the same rows).
--keep DIR keeps (and reuses) the filled databases, as ops.py's --keep does. Each server is
``neffcache serve --ingest-every 0``; the clients are threads of this process (urllib), each
sending its next request when the previous one is answered (a closed loop).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

import ops  # noqa: E402  (the fleet-scale fill beside this file)

from neffcache.index import open_index, upgrade_index  # noqa: E402

TARGET_P99 = 0.5  # seconds, N clients at a million entries (#37)
PHASES = {"metrics": ("/metrics",), "summary": ("/api/summary",),
          "mixed": ("/metrics", "/api/summary")}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def get(url: str) -> int:
    """One GET asking for gzip, as Prometheus and browsers do; the bytes are read as sent
    (not inflated: a scraper inflates on its own host, not on the server's cores)."""
    req = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(req, timeout=120) as r:  # noqa: S310 - loopback
        return len(r.read())


def serve(url: str, pythonpath: str, home: Path) -> tuple[subprocess.Popen[bytes], str]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": pythonpath, "NEFFCACHE_HOME": str(home)}
    # cwd: ``python -m`` puts it first on sys.path, before PYTHONPATH
    proc = subprocess.Popen([sys.executable, "-m", "neffcache.cli", "serve", "--index", url,
                             "--port", str(port), "--ingest-every", "0"], env=env,
                            cwd=pythonpath)
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            get(base + "/healthz")
            return proc, base
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("serve did not start")


def hammer(base: str, paths: tuple[str, ...], clients: int, seconds: float) -> dict[str, float]:
    """``clients`` closed loops for ``seconds``: latency percentiles and responses/s."""
    stop = time.monotonic() + seconds
    lock = threading.Lock()
    latencies: list[float] = []

    def loop(n: int) -> None:
        i = n
        while time.monotonic() < stop:
            t = time.perf_counter()
            get(base + paths[i % len(paths)])
            took = time.perf_counter() - t
            with lock:
                latencies.append(took)
            i += 1

    t0 = time.monotonic()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(loop, range(clients)))
    wall = time.monotonic() - t0
    q = statistics.quantiles(latencies, n=100, method="inclusive")
    return {"p50": statistics.median(latencies), "p99": q[98], "max": max(latencies),
            "rps": len(latencies) / wall, "n": len(latencies)}


def schema_head(pythonpath: str) -> str:
    out = subprocess.run([sys.executable, "-c", "from neffcache.index import "
                          "SCHEMA_REVISION; print(SCHEMA_REVISION)"], check=True, text=True,
                         capture_output=True, env={**os.environ, "PYTHONPATH": pythonpath},
                         cwd=pythonpath)
    return out.stdout.strip()


def migrate(url: str, revision: str) -> None:
    from neffcache.index.engine import (
        SCHEMA_REVISION,
        current_revision,
        downgrade_engine,
        index_engine,
        upgrade_engine,
    )

    engine = index_engine(url)
    with engine.connect() as conn:
        now = current_revision(conn)
    if now == revision:
        return
    if revision == SCHEMA_REVISION:
        upgrade_engine(engine, url)
    else:
        downgrade_engine(engine, url, revision)
    log(f"  index migrated {now} -> {revision}")


def measure(url: str, variants: dict[str, str], args: argparse.Namespace,
            home: Path) -> dict[str, dict[str, dict[str, float]]]:
    """{variant: {phase/clients: stats}}; variants one after the other on the same index."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name, pythonpath in variants.items():
        migrate(url, schema_head(pythonpath))
        proc, base = serve(url, pythonpath, home)
        try:
            for path in ("/metrics", "/api/summary"):
                get(base + path)  # warm-up: imports, connections, first build
            got: dict[str, dict[str, float]] = {}
            for phase, paths in PHASES.items():
                for clients in (1, args.clients):
                    got[f"{phase}/{clients}"] = s = hammer(base, paths, clients, args.seconds)
                    log(f"  [{name}] {phase} x{clients}: p50 {s['p50'] * 1000:.0f} ms, "
                        f"p99 {s['p99'] * 1000:.0f} ms, {s['rps']:.1f}/s ({s['n']:.0f})")
            out[name] = got
        finally:
            proc.terminate()
            proc.wait(10)
    upgrade_index(url)
    return out


def fill_or_reuse(db: str, args: argparse.Namespace, work: Path) -> tuple[str, dict[str, Any]]:
    """ops.py's database for ``db`` at ``args.scale`` (filled now, or kept by --keep)."""
    marker = work / f"{db}-scale-{args.scale}-{ops.SKEW}.json"
    url = (f"sqlite:///{work}/index-{args.scale}-{ops.SKEW}.db" if db == "sqlite"
           else ops.pg_url(args.pg))
    facts = ops.kept_facts(marker, url, db) if args.keep else None
    if facts is not None:
        log(f"[{db}] reusing {marker}")
        return url, facts
    if db == "sqlite":
        for suffix in ("", "-wal", "-shm"):
            Path(url.removeprefix("sqlite:///") + suffix).unlink(missing_ok=True)
    else:
        ops.pg_scratch(args.pg)
    upgrade_index(url)
    t0 = time.monotonic()
    with open_index(url, auto_upgrade=False) as ix:
        facts = ops.fill(ix, args.scale, [])
    facts["fill_seconds"] = round(time.monotonic() - t0)
    if args.keep:
        marker.write_text(json.dumps(facts))
    return url, facts


def table(results: dict[str, dict[str, dict[str, dict[str, float]]]], clients: int) -> str:
    lines = [f"| db | code | phase | 1 client p50 / p99 / rps | {clients} clients p50 / p99 / "
             f"rps | {clients} vs 1: p99 x, rps x |", "|---|---|---|---|---|---|"]
    for db, variants in results.items():
        for code, got in variants.items():
            for phase in PHASES:
                one, many = got[f"{phase}/1"], got[f"{phase}/{clients}"]
                lines.append(
                    f"| {db} | {code} | {phase} | {one['p50'] * 1000:.0f} / "
                    f"{one['p99'] * 1000:.0f} ms / {one['rps']:.1f} | {many['p50'] * 1000:.0f}"
                    f" / {many['p99'] * 1000:.0f} ms / {many['rps']:.1f} | "
                    f"{many['p99'] / one['p99']:.1f} x, {many['rps'] / one['rps']:.2f} x |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    ap.add_argument("--pg", default=os.environ.get("NEFFCACHE_TEST_POSTGRES", ops.PG_ADMIN))
    ap.add_argument("--pg-db", default="neffcache_bench_serve",
                    help="name of the scratch Postgres database")
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=15.0, help="length of each phase")
    ap.add_argument("--baseline", type=Path, default=None, metavar="CHECKOUT")
    ap.add_argument("--keep", metavar="DIR", type=Path, default=None)
    ap.add_argument("--fill-only", action="store_true", help="fill (with --keep) and stop")
    ap.add_argument("--out", type=Path, default=None, help="also write the report here")
    args = ap.parse_args()
    ops.PG_DB = args.pg_db
    variants = {"this": str(REPO)}
    if args.baseline:
        variants = {"baseline": str(args.baseline.absolute()), **variants}
    report = [f"load at start: {ops.load()}"]
    results: dict[str, Any] = {}
    facts: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="neffcache-bench-serve-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for db in (("sqlite", "postgres") if args.db == "both" else (args.db,)):
            try:
                url, facts = fill_or_reuse(db, args, work)
                if not args.fill_only:
                    results[db] = measure(url, variants, args, work)
            finally:
                if db == "postgres" and not args.keep:
                    ops.pg_drop(args.pg)
    if args.fill_only:
        return
    report.append(f"load at end:   {ops.load()}")
    report.append(f"commit {ops.commit()}; scale {args.scale}: {facts.get('entries')} entries, "
                  f"{facts.get('cells')} cells x 50 fingerprints, {facts.get('reports')} "
                  f"restore reports; each phase {args.seconds:.0f} s, closed loops; target: "
                  f"p99 <= {TARGET_P99 * 1000:.0f} ms at {args.clients} clients")
    report.append(table(results, args.clients))
    text = "\n".join(report)
    print(text)
    if args.out:
        args.out.write_text(text + "\n\n" + json.dumps(results, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
