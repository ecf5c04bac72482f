"""Claim benchmark: makespan of `precompile --claim` vs `--shard` over the same cells.

One command, from the checkout (uses tests/support: the `test-sleep` TEST BACKEND, whose
"compile" sleeps a per-cell time drawn from --low..--high seconds, so no torch is needed):

    python tools/bench/claims.py                  # 40 cells, 4 workers on Postgres, 2 on SQLite

For each (index, workers) it runs the cells once with N `--claim` workers and once with N
`--shard I/N` workers (fresh store and index each time), and prints a Markdown table:
makespan (first start to last exit) against the bound 1.3 x (total compile seconds / N +
the longest cell). Postgres: NEFFCACHE_TEST_PG_URL or postgresql+psycopg://postgres@127.0.0.1/test
(a scratch database is created and dropped).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.support.claims_fleet import (  # noqa: E402
    draw_seconds,
    fleet_env,
    start_worker,
    wait_all,
    write_sleep_matrix,
)
from tests.support.sleep_backend import register  # noqa: E402


def run_fleet(tmp: Path, index_url: str, seconds: dict[str, float], workers: int,
              mode: str) -> float:
    from neffcache.cli import run

    matrix = write_sleep_matrix(tmp, seconds)
    if run(["db", "upgrade", "--index", index_url]) != 0:
        raise SystemExit(f"db upgrade failed for {index_url}")
    env = fleet_env(index_url, tmp / "store", tmp / "record.jsonl")
    started = time.monotonic()
    procs = [start_worker(matrix, env, tmp / f"w{i}.json",
                          *(["--claim", "--lease", "60"] if mode == "claim"
                            else ["--shard", f"{i}/{workers}"]))
             for i in range(workers)]
    codes = wait_all(procs)
    makespan = time.monotonic() - started
    if any(codes):
        raise SystemExit(f"{mode}: a worker failed ({codes}); see {tmp}")
    return makespan


def pg_scratch(base: str) -> tuple[str, object]:
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(base)
    admin = url.set(drivername="postgresql").render_as_string(hide_password=False)
    name = f"neffcache_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return url.set(database=name).render_as_string(hide_password=False), drop


def main() -> int:
    import os

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=int, default=40)
    ap.add_argument("--low", type=float, default=0.2)
    ap.add_argument("--high", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=14)
    args = ap.parse_args()
    register()
    seconds = draw_seconds(args.cells, args.low, args.high, args.seed)
    total, longest = sum(seconds.values()), max(seconds.values())
    pg = os.environ.get("NEFFCACHE_TEST_PG_URL",
                        "postgresql+psycopg://postgres@127.0.0.1:5432/test")
    rows = []
    for label, workers in (("Postgres", 4), ("SQLite", 2)):
        bound = 1.3 * (total / workers + longest)
        spans = {}
        for mode in ("claim", "shard"):
            with tempfile.TemporaryDirectory(prefix="neffcache-bench-claims-") as d:
                tmp = Path(d)
                if label == "Postgres":
                    url, drop = pg_scratch(pg)
                else:
                    url, drop = f"sqlite:///{tmp / 'index.db'}", (lambda: None)
                try:
                    spans[mode] = run_fleet(tmp, url, seconds, workers, mode)
                finally:
                    drop()  # type: ignore[operator]
            print(f"{label} x{workers} {mode}: {spans[mode]:.1f} s", file=sys.stderr)
        rows.append((label, workers, spans["claim"], spans["shard"], bound))
    print(f"{args.cells} cells, compile {args.low}-{args.high} s each (seed {args.seed}): "
          f"total {total:.1f} s, longest {longest:.2f} s\n")
    print("| index | workers | `--claim` makespan | `--shard I/N` makespan | bound 1.3 × "
          "(total/N + longest) | claim within bound |")
    print("|---|---|---|---|---|---|")
    for label, workers, claim, shard, bound in rows:
        print(f"| {label} | {workers} | {claim:.1f} s | {shard:.1f} s | {bound:.1f} s | "
              f"{'yes' if claim <= bound else 'NO'} ({claim / bound:.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
