"""Ops at fleet scale: fill an index (SQLite and/or Postgres) as a large fleet would, then time
what ops people run against it; prints medians.

Full size (--scale 1): 50 matrices x 400 cells (20,000 cells), 50 fingerprints, 990,000
entries, 10,000 failed cells, 100,000 restore reports. --scale shrinks cells, entries,
failures and reports together (default 0.1: a smoke run). Matrices are registered, and one
matrix's entries, 100 failures and 1,000 reports are recorded, through neffcache's own write
path; the rest is bulk SQL (entries without file rows), after which the aggregates are
recounted (``rebuild_aggregates``) and the tables analysed (not vacuumed: ``--vacuum`` runs
``Index.refresh_statistics``, VACUUM (ANALYZE), on Postgres before timing, as autovacuum or a
bulk write would). The output says which is which.

    .venv/bin/python tools/bench/ops.py                          # both databases, scale 0.1
    .venv/bin/python tools/bench/ops.py --scale 1 --db postgres --repeat 7
    .venv/bin/python tools/bench/ops.py --scale 1 --keep /var/tmp/bench-ops --only cli \
        --out tools/bench/results/ops-cli.json    # fill once (~N min), reuse on later runs

Postgres: a scratch database ``neffcache_bench_ops`` on --pg (dropped afterwards, unless
--keep). With --keep DIR the SQLite file and the Postgres database are kept, and a later run
with the same DIR and --scale reuses them (upgraded to this code's schema first) instead of
filling again. The CLI timings are whole commands (interpreter start to exit), interleaved
with two peers timed the same way in the same run (``python -c pass`` and ``python -c
"import sqlalchemy"``) so a reader can judge a loaded machine; ``uptime``'s load is printed.

The streamed whole results (``--only stream``, or part of ``all``; ``--stream-repeat`` runs
each): ``ls``, ``ls --jsonl`` and ``coverage`` of every cell of the index (a matrix file of
all 50 pipelines) with ``--json`` and ``--jsonl``: time to the first line, to the end, and
peak RSS, each measured from a fresh interpreter, with ``python -c "import sqlalchemy;
print()"`` timed the same way as the peer.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from neffcache.fingerprint import Fingerprint, build_fingerprint  # noqa: E402
from neffcache.index import (  # noqa: E402
    CoverageRequest,
    Index,
    coverage,
    open_index,
    upgrade_index,
)
from neffcache.index.aggregates import rebuild_aggregates  # noqa: E402
from neffcache.index.matrices import register_matrix, registered_cells  # noqa: E402
from neffcache.index.models import (  # noqa: E402
    CellFailureRow,
    EntryRow,
    PrecompileRunRow,
    RestoreReportRow,
)
from neffcache.manifest import FileRecord, Manifest  # noqa: E402
from neffcache.matrix import Cell, parse_matrix  # noqa: E402

PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
PG_DB = "neffcache_bench_ops"
CLI = [str(Path(sys.executable).with_name("neffcache"))]
PEERS = {"peer_python": [sys.executable, "-c", "pass"],
         "peer_import_sqlalchemy": [sys.executable, "-c", "import sqlalchemy"],
         # the driver the bare ``ls`` path imports on Postgres (sqlite3 costs ~10 ms)
         "peer_import_psycopg": [sys.executable, "-c", "import psycopg"]}
TARGETS = {"metrics": 0.2, "summary": 0.2, "attention": 0.2, "dashboard": 1.0,
           "coverage_cli": 0.5, "ls_cli": 0.3, "ls_glob_cli": 0.3, "ls_glob_older_cli": 0.3,
           "ls_all_first": 0.3,
           "ls_all_jsonl_first": 0.3, "coverage_all_json_first": 0.3}
# Whole results, streamed (#25): each command's first line, whole run and peak RSS.
STREAMED = ("ls_all", "ls_all_jsonl", "coverage_all_json", "coverage_all_jsonl")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def matrix_text(n: int, cells: int) -> str:
    shapes = ", ".join(f'"{512 + 8 * (i // 20)}x{512 + 8 * (i % 20)}"' for i in range(cells))
    return (f'name = "m{n:02d}"\nbackend = "neuron"\n\n[[pipelines]]\nname = "p{n:02d}"\n'
            f'class = "diffusers:Flux2KleinPipeline"\nmodel = "/models/p{n}"\n'
            f'modes = ["compile"]\nshapes = [{shapes}]\nbatch_sizes = [1]\n')


def fingerprint(n: int) -> Fingerprint:
    return build_fingerprint("neuron", {"version.neuronx-cc": f"2.{n}.0",
                                        "version.torch": "2.9.0", "target": "trn2"})


def manifest(cell: Cell, fp: Fingerprint, created_at: datetime) -> Manifest:
    sha = hashlib.sha256(f"{cell.key}{fp.key}".encode()).hexdigest()
    return Manifest(cell=cell, fingerprint=fp, created_at=created_at.isoformat(), files=(
        FileRecord("neff", f"{sha[:2]}/{sha[2:4]}/{sha[:32]}.neff", 4096, sha, 0o644),))


VACUUMED = ("entries", "cells", "fingerprints", "matrices", "matrix_cells", "cell_failures",
            "cell_claims", "coverage_counts", "fingerprint_counts", "restore_counts",
            "restore_reports", "report_fingerprints")
SKEW = "pipelines-over-time-1"  # in the --keep marker: a fill without this skew is not reused


def age_skew(built: list[tuple[Cell, Fingerprint]],
             now: datetime) -> dict[tuple[str, str], datetime]:
    """Creation times as a fleet that added pipelines over time has them: every entry of
    p00 older than every entry of p01, ..., p49's the newest (one second apart; in a
    pipeline, shuffled order). A shuffled fill spreads each pipeline over all of time and
    hides a listing that walks entries newest first."""
    ordered = sorted(built, key=lambda p: p[0].pipeline)  # stable: shuffled within
    start = now - timedelta(seconds=len(ordered))
    return {(c.key, fp.key): start + timedelta(seconds=i) for i, (c, fp) in enumerate(ordered)}


def fill(ix: Index, scale: float, notes: list[str]) -> dict[str, Any]:
    """Fill ``ix``; returns facts the timings need (matrix names, a fingerprint key)."""
    t0 = time.monotonic()
    per_matrix = max(4, round(400 * scale))
    fps = [fingerprint(n) for n in range(50)]
    matrices = [parse_matrix(matrix_text(n, per_matrix), f"m{n:02d}.toml") for n in range(50)]
    for n, m in enumerate(matrices):
        register_matrix(ix, m, matrix_text(n, per_matrix))
    notes.append(f"write path: register_matrix x {len(matrices)} ({per_matrix} cells each)")
    pairs = [(c, fp) for m in matrices for c in m.cells for fp in fps]
    random.Random(7).shuffle(pairs)
    n_fail = len(pairs) // 100  # 1 %: 10,000 at full size
    failed, built = pairs[:n_fail], pairs[n_fail:]
    now = datetime.now(timezone.utc)
    created = age_skew(built, now)
    first = {c.key for c in matrices[0].cells}
    own = [p for p in built if p[0].key in first]
    for i in range(0, len(own), 500):
        ix.record_entries([manifest(c, fp, created[(c.key, fp.key)])
                           for c, fp in own[i:i + 500]], "s3://bench/neff")
    notes.append(f"write path: record_entries for matrix m00 ({len(own)} entries)")
    notes.append(f"age skew: pipelines added over time, p00's entries oldest, p49's newest "
                 f"(created one second apart, {len(built) / 86400:.1f} days in all)")
    run_id = ix.start_run("bench", fps[0], "m00")
    for c, fp in failed[:100]:
        ix.record_failure(run_id, c, fp, 1, 2.0, "warm-up failed")
    notes.append("write path: record_failure x 100")
    rng = random.Random(11)
    n_reports = max(100, round(100_000 * scale))
    report_fps = [*fps, fingerprint(99)]  # one fleet fingerprint nothing was built for

    def report(i: int) -> dict[str, Any]:
        m = matrices[i % 50]
        code = rng.choice((0, 0, 0, 0, 0, 0, 3, 3, 5, 1))
        restored = 0 if code in (1, 5) else per_matrix - (0 if code == 0 else 3)
        return {"host": f"host-{i % 997}", "matrix": m.name, "exit_code": code,
                "fingerprint_key": report_fps[i % len(report_fps)].key,
                "cells_restored": restored, "cells_missing": per_matrix - restored,
                "seconds": rng.uniform(0.05, 40), "bytes_fetched": rng.randrange(1 << 30),
                "files_fetched": 10, "files_skipped": 0}
    for i in range(1000):
        ix.record_restore(report(i))
    notes.append("write path: record_restore x 1,000")
    bulk_entries = [p for p in built if p[0].key not in first]
    with ix.write_session() as s:  # bulk load
        rows = [{"entry_key": hashlib.sha256(f"{c.key}{fp.key}".encode()).hexdigest(),
                 "cell_key": c.key, "fingerprint_key": fp.key, "store_url": "s3://bench/neff",
                 "total_bytes": 4096, "file_count": 1, "compile_seconds": 30.0,
                 "producer": {}, "created_at": created[(c.key, fp.key)],
                 "recorded_at": now} for c, fp in bulk_entries]
        for i in range(0, len(rows), 5000):
            s.execute(EntryRow.__table__.insert(), rows[i:i + 5000])
        s.execute(PrecompileRunRow.__table__.update().values(finished_at=now))
        frows = [{"run_id": run_id, "cell_key": c.key, "fingerprint_key": fp.key,
                  "exit_status": 1, "seconds": 2.0, "log_tail": "warm-up failed",
                  "created_at": now} for c, fp in failed[100:]]
        for i in range(0, len(frows), 5000):
            s.execute(CellFailureRow.__table__.insert(), frows[i:i + 5000])
        rrows = []
        for i in range(1000, n_reports):
            r = report(i)
            rrows.append({**{k: r[k] for k in ("host", "matrix", "exit_code", "fingerprint_key",
                                               "cells_restored", "cells_missing", "seconds",
                                               "bytes_fetched", "files_fetched",
                                               "files_skipped")},
                          "report_id": f"bench-{i}", "restored": [], "missing": [],
                          "report": {}, "created_at": now - timedelta(minutes=i % 40_000)})
        for i in range(0, len(rrows), 5000):
            s.execute(RestoreReportRow.__table__.insert(), rrows[i:i + 5000])
        s.flush()
        rebuild_aggregates(s)
    notes.append(f"bulk SQL: {len(bulk_entries)} entries (no file rows), {len(frows)} failures, "
                 f"{len(rrows)} restore reports; then rebuild_aggregates")
    with ix.engine.connect() as conn:
        from sqlalchemy import text
        conn.execute(text("ANALYZE"))
        conn.commit()
    log(f"filled in {time.monotonic() - t0:.0f} s: {len(pairs)} pairs, {len(built)} entries")
    return {"matrix": "m01", "fingerprint": fps[3].key, "cells": len(pairs) // 50,
            "entries": len(built), "failures": len(failed), "reports": n_reports}


def median(fn: Callable[[], Any], repeat: int) -> float:
    fn()  # warm-up (imports, caches, connections)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as r:  # noqa: S310 - loopback
        return bytes(r.read())


def serve(url: str, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([*CLI, "serve", "--index", url, "--port", str(port),
                             "--ingest-every", "0"], env=env)
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            get(base + "/healthz")
            return proc, base
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("serve did not start")


def cli_timings(facts: dict[str, Any], repeat: int,
                env: dict[str, str]) -> dict[str, float]:
    """Whole-command medians of the two CLI reads and of the peers, interleaved round-robin
    (one run of each per round, after a warm-up round) so load hits them alike."""
    commands = {
        "coverage_cli": [*CLI, "coverage", facts["matrix"], "--json"],
        "ls_cli": [*CLI, "ls", "--limit", "100"],
        # With the age skew p4*'s entries are the newest, p07's older than most (#25).
        "ls_glob_cli": [*CLI, "ls", "--cell", "p4*/compile/*", "--limit", "100", "--json"],
        "ls_glob_older_cli": [*CLI, "ls", "--cell", "p07/compile/*", "--limit", "100"],
        **PEERS,
    }
    times: dict[str, list[float]] = {k: [] for k in commands}
    cpu: dict[str, list[float]] = {k: [] for k in commands}
    for round_ in range(repeat + 1):
        for name, argv in commands.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)  # ls: `next: ...`
            if done.returncode not in (0, 3):  # 3: coverage, some cells not ready
                raise SystemExit(f"{argv}: exit {done.returncode}\n{done.stderr}")
            wall = time.perf_counter() - t
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if round_:  # round 0 warms the page cache
                times[name].append(wall)
                cpu[name].append(after.ru_utime - before.ru_utime
                                 + after.ru_stime - before.ru_stime)
    out = {k: statistics.median(v) for k, v in times.items()}
    out.update({f"{k}_cpu": statistics.median(v) for k, v in cpu.items()})
    return out


def all_cells_matrix(work: Path, per_matrix: int) -> Path:
    """A matrix file with every filled matrix's pipeline: all of the index's cells."""
    parts = ['name = "all"\nbackend = "neuron"\n']
    parts += ["[[pipelines]]" + matrix_text(n, per_matrix).split("[[pipelines]]", 1)[1]
              for n in range(50)]
    path = work / f"all-cells-{per_matrix}.toml"
    path.write_text("\n".join(parts))
    return path


# Run by a fresh interpreter: a child forked from this (large) process would report this
# process's resident set as its own peak. Prints: first line s, whole s, peak RSS bytes, rc.
_TIMED = """
import os, subprocess, sys, time
t = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)
proc.stdout.readline()
first = time.perf_counter() - t
while proc.stdout.read(1 << 20):
    pass
_, status, usage = os.wait4(proc.pid, 0)
proc.returncode = os.waitstatus_to_exitcode(status)
print(first, time.perf_counter() - t, usage.ru_maxrss * 1024, proc.returncode)
"""


def first_line_and_peak(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(seconds to the first line on stdout, seconds to exit, peak RSS in bytes) of one
    command, its output read as fast as it comes and discarded."""
    out = subprocess.run([sys.executable, "-c", _TIMED, *argv], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    if int(out[3]) not in (0, 3):  # 3: some cells are not ready (coverage)
        raise SystemExit(f"{argv}: exit {out[3]}")
    return float(out[0]), float(out[1]), int(out[2])


def stream_timings(facts: dict[str, Any], repeat: int, env: dict[str, str],
                   work: Path) -> dict[str, float]:
    """The streamed whole results: first line, whole run (medians of ``repeat``) and the
    largest peak RSS, with the peers' start-up measured the same way, interleaved."""
    everything = str(all_cells_matrix(work, facts["cells"] // 50))
    commands = {"ls_all": [*CLI, "ls"], "ls_all_jsonl": [*CLI, "ls", "--jsonl"],
                "coverage_all_json": [*CLI, "coverage", everything, "--json"],
                "coverage_all_jsonl": [*CLI, "coverage", everything, "--jsonl"],
                "peer_import_sqlalchemy": [*PEERS["peer_import_sqlalchemy"][:2],
                                           "import sqlalchemy; print()"]}
    got: dict[str, list[tuple[float, float, int]]] = {k: [] for k in commands}
    for _ in range(repeat):
        for name, argv in commands.items():
            got[name].append(first_line_and_peak(argv, env))
            log(f"  {name}: first line {got[name][-1][0]:.3f} s, whole {got[name][-1][1]:.1f}"
                f" s, peak {got[name][-1][2] / 2**20:.0f} MiB")
    out: dict[str, float] = {}
    for name, runs in got.items():
        out[f"{name}_first"] = statistics.median(r[0] for r in runs)
        out[f"{name}_whole"] = statistics.median(r[1] for r in runs)
        out[f"{name}_rss"] = max(r[2] for r in runs)
    return out


def measure(url: str, facts: dict[str, Any], repeat: int, home: Path,
            only: str, stream_repeat: int) -> dict[str, float]:
    env = {**os.environ, "NEFFCACHE_HOME": str(home), "NEFFCACHE_INDEX": url}
    # As an installed package runs: its bytecode cached (pip compiles it at install; an
    # editable checkout under PYTHONDONTWRITEBYTECODE=1 would recompile every module per run).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out: dict[str, float] = {}
    if only in ("all", "stream"):
        out.update(stream_timings(facts, stream_repeat, env, home))
    if only == "stream":
        return out
    # In process, the face call (the index opened per call, as the CLI's use case does).
    request = CoverageRequest(facts["matrix"], fingerprints=[facts["fingerprint"]], index=url)
    out["coverage_sql"] = median(lambda: coverage(request), repeat)
    out.update(cli_timings(facts, repeat, env))
    if only == "cli":
        return out
    proc, base = serve(url, env)
    try:
        out["metrics"] = median(lambda: get(base + "/metrics"), repeat)
        out["summary"] = median(lambda: get(base + "/api/summary"), repeat)
        out["attention"] = median(lambda: get(base + "/api/attention?limit=20"), repeat)
        # The matrix the dashboard opens on: the summary's first (its worst column is worst).
        first = json.loads(get(base + "/api/summary"))["coverage"][0]["matrix"]
        page = ["/api/summary", "/api/matrices", "/api/restores?limit=25", "/api/runs?limit=20",
                "/api/in-progress?limit=200", "/api/restore-timeline?days=14",
                "/api/attention?limit=20", f"/api/coverage?matrix={first}&limit=200",
                f"/api/failures?matrix={first}"]
        out["dashboard"] = median(lambda: [get(base + p) for p in page], repeat)
        out["metrics_bytes"] = len(get(base + "/metrics"))
    finally:
        proc.terminate()
        proc.wait(10)
    return out


def kept_facts(marker: Path, url: str, db: str) -> dict[str, Any] | None:
    """The facts of a database a previous --keep run filled, if it is still there."""
    if not marker.exists():
        return None
    if db == "sqlite" and not Path(url.removeprefix("sqlite:///")).exists():
        return None
    try:
        facts: dict[str, Any] = json.loads(marker.read_text())
        upgrade_index(url)
        with open_index(url, auto_upgrade=False) as ix:
            if not registered_cells(ix, facts["matrix"]) or not skewed(ix):
                return None
    except Exception as exc:  # noqa: BLE001 - anything wrong: fill again
        log(f"[{db}] kept database not reusable ({exc}); filling again")
        return None
    return facts


def skewed(ix: Index) -> bool:
    """Whether the filled entries have the age skew (the oldest p00's, the newest p49's)."""
    from sqlalchemy import select

    from neffcache.index.tables import cells, entries

    def end(order: Any) -> Any:
        with ix.engine.connect() as conn:
            return conn.execute(select(cells.c.id).select_from(
                entries.join(cells, cells.c.key == entries.c.cell_key))
                .order_by(order).limit(1)).scalar()
    oldest, newest = end(entries.c.created_at), end(entries.c.created_at.desc())
    return bool(oldest and newest and oldest.startswith("p00/") and newest.startswith("p49/"))


def pg_url(admin: str) -> str:
    return admin.rsplit("/", 1)[0] + "/" + PG_DB


def pg_scratch(admin: str) -> str:
    import psycopg

    dsn = admin.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {PG_DB}")
    return pg_url(admin)


def pg_drop(admin: str) -> None:
    import psycopg

    dsn = admin.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def commit() -> str:
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()


def run_db(db: str, args: argparse.Namespace, work: Path) -> tuple[dict[str, Any],
                                                                   dict[str, float]]:
    marker = work / f"{db}-scale-{args.scale}-{SKEW}.json"
    if db == "sqlite":
        url = f"sqlite:///{work}/index-{args.scale}-{SKEW}.db"
    else:
        url = pg_url(args.pg)
    facts = kept_facts(marker, url, db) if args.keep else None
    if facts is not None:
        print(f"[{db}] reusing the database filled by an earlier --keep run ({marker})")
    else:
        marker.unlink(missing_ok=True)
        if db == "sqlite":
            for suffix in ("", "-wal", "-shm"):
                Path(url.removeprefix("sqlite:///") + suffix).unlink(missing_ok=True)
        else:
            pg_scratch(args.pg)
        upgrade_index(url)
        notes: list[str] = []
        t0 = time.monotonic()
        with open_index(url, auto_upgrade=False) as ix:
            facts = fill(ix, args.scale, notes)
        facts["fill_seconds"] = round(time.monotonic() - t0)
        for n in notes:
            print(f"[{db}] {n}")
        print(f"[{db}] filled in {facts['fill_seconds']} s")
        if args.keep:
            marker.write_text(json.dumps(facts))
    if args.vacuum and db == "postgres":
        t0 = time.monotonic()
        with open_index(url, auto_upgrade=False) as ix:  # the bulk writes' own refresh
            ix.refresh_statistics(VACUUMED)
        print(f"[{db}] VACUUM (ANALYZE) of {', '.join(VACUUMED)} before timing, as autovacuum "
              f"or a bulk write's refresh_statistics would: {time.monotonic() - t0:.0f} s")
    return facts, measure(url, facts, args.repeat, work, args.only, args.stream_repeat)


def main() -> None:
    global PG_DB  # noqa: PLW0603 - one scratch database name for the whole run
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    ap.add_argument("--pg", default=os.environ.get("NEFFCACHE_TEST_POSTGRES", PG_ADMIN))
    ap.add_argument("--pg-db", default=PG_DB, help="name of the scratch Postgres database")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--keep", metavar="DIR", type=Path, default=None,
                    help="keep the filled databases (SQLite file in DIR, the Postgres "
                         "database) and reuse them on a later run with the same DIR and --scale")
    ap.add_argument("--only", choices=("all", "cli", "stream"), default="all",
                    help="cli: time the SQL and the CLI commands only (no server); stream: "
                         "only the streamed whole results (ls, coverage of every cell)")
    ap.add_argument("--stream-repeat", type=int, default=1,
                    help="runs of each streamed whole result (each reads the whole index)")
    ap.add_argument("--vacuum", action="store_true",
                    help="Postgres: VACUUM (ANALYZE) the tables before timing (as autovacuum, "
                         "or a bulk write's refresh_statistics, would); without it the timings "
                         "are of a bulk-filled index never vacuumed (only analysed)")
    ap.add_argument("--out", type=Path, default=None, help="also write the results as JSON")
    args = ap.parse_args()
    PG_DB = args.pg_db
    results: dict[str, dict[str, float]] = {}
    load_start = load()
    print(f"load at start: {load_start}")
    with tempfile.TemporaryDirectory(prefix="neffcache-bench-ops-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for db in (("sqlite", "postgres") if args.db == "both" else (args.db,)):
            try:
                facts, results[db] = run_db(db, args, work)
            finally:
                if db == "postgres" and not args.keep:
                    pg_drop(args.pg)
    load_end = load()
    print(f"load at end:   {load_end}")
    print(f"\nscale {args.scale}: {facts['cells']} cells x 50 fingerprints, {facts['entries']} "
          f"entries, {facts['failures']} failures, {facts['reports']} restore reports; "
          f"medians of {args.repeat}; CLI rows are whole commands, interleaved with the peers")
    dbs = list(results)
    print(f"| what | {' | '.join(dbs)} | target |")
    print(f"|---|{'---|' * len(dbs)}---|")
    keys = ("coverage_sql", "coverage_cli", "ls_cli", "ls_glob_cli", "ls_glob_older_cli", *PEERS,
            "metrics", "summary", "attention", "dashboard")
    for key in (k for k in keys if all(k in results[d] for d in dbs)):
        cells = " | ".join(f"{results[d][key] * 1000:.0f} ms" + (
            f" (cpu {results[d][key + '_cpu'] * 1000:.0f} ms)" if key + "_cpu" in results[d]
            else "") for d in dbs)
        target = f"<= {TARGETS[key] * 1000:.0f} ms" if key in TARGETS else ""
        if key in PEERS:
            target = "peer: " + " ".join(PEERS[key][1:]).replace(sys.executable, "python")
        print(f"| {key} | {cells} | {target} |")
    for name in (*STREAMED, "peer_import_sqlalchemy"):
        if not all(f"{name}_first" in results[d] for d in dbs):
            continue
        cells = " | ".join(f"first line {results[d][name + '_first'] * 1000:.0f} ms, whole "
                           f"{results[d][name + '_whole']:.1f} s, peak RSS "
                           f"{results[d][name + '_rss'] / 2**20:.0f} MiB" for d in dbs)
        target = ("<= 300 ms to the first line, flat memory" if name in STREAMED
                  else "peer: python -c 'import sqlalchemy; print()'")
        print(f"| {name} (streamed) | {cells} | {target} |")
    if all("metrics_bytes" in results[d] for d in dbs):
        sizes = " | ".join(f"{int(results[d]['metrics_bytes'])} B" for d in dbs)
        print(f"| metrics body | {sizes} | |")
    if args.out:
        args.out.write_text(json.dumps({
            "commit": commit(), "scale": args.scale, "repeat": args.repeat,
            "cpus": os.cpu_count(), "machine": platform.machine(),
            "load_start": load_start, "load_end": load_end, "facts": facts,
            "seconds": results, "targets": TARGETS,
            "peers": {k: " ".join(v[1:]) for k, v in PEERS.items()}}, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
