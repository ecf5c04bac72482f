"""Index access at fleet scale: entries/s on the write path, and time and peak RSS of the
precompile planning step and of reindex, against an index of about a million entries.

Fill (--entries, default 1,000,000; SQLite and/or Postgres): 50 matrices x N/50/50 cells are
registered and 5 fingerprints of matrix m00 recorded through neffcache's own write path
(``register_matrix``, ``record_entries``); every other entry is bulk SQL (entry rows without
file rows), then the aggregates are recounted and the tables analysed (Postgres: VACUUM ANALYZE, as
autovacuum would; before it, index-only scans read the heap and --no-vacuum shows that).
The output says so.

Write path (interleaved rounds, new entries of registered cells on a fresh fingerprint each):
  reopen     open_index + record_entry + close per entry (what each push/capture command does)
  per-entry  one open index, one transaction per entry (``record_entry``)
  batched    one open index, ``record_entries`` of --batch entries per transaction
  raw        PEER: executemany of the same entry, blob and file rows, one transaction per
             batch (no existence check, no cell/fingerprint rows, no aggregates)

Planning and reindex: each step runs in a fresh subprocess (peak RSS = its ru_maxrss), once
with this tree's code ("after") and once with --before's (a ``git archive`` of that commit in
a temp dir), interleaved; ``plan`` is ``apply_precompile`` of matrix m00 (400 cells at full
size) with every cell ready (a CI rerun: nothing to warm); ``reindex`` is ``reindex`` of a
store holding m00's entries for one fingerprint, --keep-missing (prune would delete the bulk
rows); ``prune`` is the prune step alone with the store listing every indexed entry (before:
one set of every key and a set difference; after: ``remove_stale`` paging through the index).

    .venv/bin/python tools/bench/index_writes.py --db sqlite --entries 100000   # smoke
    .venv/bin/python tools/bench/index_writes.py --db both                      # full size

Postgres: a scratch database ``neffcache_bench_writes`` on --pg (dropped afterwards).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if __name__ == "__main__" and os.environ.get("NEFFCACHE_BENCH_CHILD") is None:
    sys.path.insert(0, str(REPO))

PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
PG_DB = "neffcache_bench_writes"
FPS = 50
MATRICES = 50


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def matrix_text(n: int, cells: int) -> str:
    shapes = ", ".join(f'"{512 + 8 * (i // 20)}x{512 + 8 * (i % 20)}"' for i in range(cells))
    return (f'name = "m{n:02d}"\nbackend = "inductor"\n\n[[pipelines]]\nname = "p{n:02d}"\n'
            f'class = "diffusers:Flux2KleinPipeline"\nmodel = "/models/p{n}"\n'
            f'modes = ["compile"]\ncomponents = ["transformer"]\nshapes = [{shapes}]\n'
            f'batch_sizes = [1]\n')


def fingerprint(n: int) -> Any:
    from neffcache.fingerprint import build_fingerprint

    return build_fingerprint("inductor", {"version.torch": f"2.{n}.0", "cpu.arch": "x86_64"})


def manifest(cell: Any, fp: Any) -> Any:
    from neffcache.manifest import FileRecord, Manifest

    sha = hashlib.sha256(f"{cell.key}{fp.key}".encode()).hexdigest()
    return Manifest(cell=cell, fingerprint=fp, files=(
        FileRecord("inductor", f"fx/{sha[:32]}.bin", 4096, sha, 0o644),
        FileRecord("inductor", "shared/header.h", 10, "0" * 64, 0o644)),
        producer=(("host", "bench"),), compile_seconds=30.0,
        created_at="2026-12-01T10:00:00+00:00")


def matrices(entries: int) -> list[Any]:
    from neffcache.matrix import parse_matrix

    per = max(4, entries // FPS // MATRICES)
    return [parse_matrix(matrix_text(n, per), f"m{n:02d}.toml") for n in range(MATRICES)]


def fill(url: str, entries: int, work: Path, vacuum: bool = True) -> list[str]:
    """Fill the index at ``url``; returns notes saying what went through the write path."""
    from sqlalchemy import text

    from neffcache.index import open_index
    from neffcache.index.aggregates import rebuild_aggregates
    from neffcache.index.matrices import register_matrix
    from neffcache.index.models import EntryRow
    from neffcache.index.record import save_fingerprints_and_cells

    notes = []
    ms = matrices(entries)
    fps = [fingerprint(n) for n in range(FPS)]
    with open_index(url, auto_upgrade=True) as ix:
        for n, m in enumerate(ms):
            (work / f"m{n:02d}.toml").write_text(matrix_text(n, len(m.cells)), "utf-8")
            register_matrix(ix, m, matrix_text(n, len(m.cells)))
        notes.append(f"write path: register_matrix x {len(ms)} ({len(ms[0].cells)} cells each)")
        own = [manifest(c, fp) for fp in fps[:5] for c in ms[0].cells]
        for i in range(0, len(own), 500):
            ix.record_entries(own[i:i + 500], "s3://bench/neff")
        notes.append(f"write path: record_entries, m00 x 5 fingerprints ({len(own)} entries)")
        now = datetime.now(timezone.utc)
        with ix.write_session() as s:  # bulk load
            save_fingerprints_and_cells(s, fps, [], now)
            batch: list[dict[str, Any]] = []
            n_bulk = 0
            for fi, fp in enumerate(fps):
                for mi, m in enumerate(ms):
                    if mi == 0 and fi < 5:
                        continue
                    for c in m.cells:
                        batch.append({
                            "entry_key": hashlib.sha256(f"{c.key}{fp.key}".encode()).hexdigest(),
                            "cell_key": c.key, "fingerprint_key": fp.key,
                            "store_url": "s3://bench/neff", "total_bytes": 4096,
                            "file_count": 1, "compile_seconds": 30.0, "producer": {},
                            "created_at": now - timedelta(seconds=n_bulk), "recorded_at": now})
                        n_bulk += 1
                    if len(batch) >= 5000:
                        s.execute(EntryRow.__table__.insert(), batch)
                        batch = []
            if batch:
                s.execute(EntryRow.__table__.insert(), batch)
            rebuild_aggregates(s)
        notes.append(f"bulk SQL: {n_bulk:,} entries without file rows; aggregates recounted")
        with ix.engine.connect() as conn:
            if conn.dialect.name == "postgresql" and vacuum:
                # What autovacuum does after a bulk insert: index-only scans (the key pages)
                # skip the heap only once the visibility map is set.
                conn.connection.driver_connection.autocommit = True
                conn.exec_driver_sql("VACUUM ANALYZE")
                notes.append("VACUUM ANALYZE (as autovacuum would)")
            else:
                conn.execute(text("ANALYZE"))
                conn.commit()
    return notes


def explain(url: str) -> list[str]:
    """The plans of the two new key queries (bounded IN lookup, keyset page)."""
    from sqlalchemy import select

    from neffcache.index import open_index
    from neffcache.index.models import EntryRow

    out = []
    with open_index(url, auto_upgrade=False) as ix, ix.engine.connect() as conn:
        keys = list(conn.execute(select(EntryRow.entry_key).limit(500)).scalars())
        pg = conn.dialect.name == "postgresql"
        for name, stmt in (
                ("IN (500 keys)", select(EntryRow.entry_key).where(EntryRow.entry_key.in_(keys))),
                ("keyset page", select(EntryRow.entry_key).where(EntryRow.entry_key > keys[0])
                 .order_by(EntryRow.entry_key).limit(10_000))):
            sql = stmt.compile(conn, compile_kwargs={"literal_binds": True})
            rows = conn.exec_driver_sql(("EXPLAIN " if pg else "EXPLAIN QUERY PLAN ") + str(sql))
            plan = [str(r[0] if pg else r[-1]) for r in rows]
            line = " / ".join(re.sub(r"'\{[^}]*\}'", "'{...}'", p.strip()) for p in plan[:3])
            out.append(f"{name}: {line[:200]}")
    return out


def write_path(url: str, entries: int, per_mode: int, rounds: int, batch: int
               ) -> dict[str, float]:
    """Median entries/s per mode, rounds interleaved (the mode order rotates)."""
    from neffcache.index import open_index
    from neffcache.index.models import BlobRow, EntryFileRow, EntryRow
    from neffcache.index.record import insert_if_absent

    cells = matrices(entries)[1].cells
    modes = ["reopen", "per-entry", "batched", "raw"]
    rates: dict[str, list[float]] = {m: [] for m in modes}
    serial = 1000
    for r in range(rounds):
        order = modes[r % len(modes):] + modes[:r % len(modes)]
        for mode in order:
            serial += 1
            fp = fingerprint(serial)
            todo = [manifest(c, fp) for c in (cells * (per_mode // len(cells) + 1))[:per_mode]]
            if len({m.entry_key for m in todo}) != len(todo):
                raise SystemExit("--per-mode must not exceed a matrix's cell count")
            t0 = time.perf_counter()
            if mode == "reopen":
                for m in todo:
                    with open_index(url, auto_upgrade=False) as ix:
                        ix.record_entry(m, "s3://bench/neff")
            else:
                with open_index(url, auto_upgrade=False) as ix:
                    if mode == "per-entry":
                        for m in todo:
                            ix.record_entry(m, "s3://bench/neff")
                    elif mode == "batched":
                        for i in range(0, len(todo), batch):
                            ix.record_entries(todo[i:i + batch], "s3://bench/neff")
                    else:
                        with ix.write_session() as s:  # the peer
                            from neffcache.index.record import save_fingerprints_and_cells
                            save_fingerprints_and_cells(s, [fp], [], datetime.now(timezone.utc))
                        for i in range(0, len(todo), batch):
                            part = todo[i:i + batch]
                            now = datetime.now(timezone.utc)
                            with ix.write_session() as s:
                                insert_if_absent(s, BlobRow, sorted(
                                    ({"sha256": f.sha256, "size": f.size} for m in part
                                     for f in m.files), key=lambda b: b["sha256"]))
                                s.execute(EntryRow.__table__.insert(), [{
                                    "entry_key": m.entry_key, "cell_key": m.cell.key,
                                    "fingerprint_key": fp.key, "store_url": "s3://bench/neff",
                                    "total_bytes": m.total_bytes, "file_count": len(m.files),
                                    "compile_seconds": 30.0, "producer": {},
                                    "created_at": now, "recorded_at": now} for m in part])
                                s.execute(EntryFileRow.__table__.insert(), [{
                                    "entry_key": m.entry_key, "position": j, "root": f.root,
                                    "path": f.path, "sha256": f.sha256, "size": f.size,
                                    "mode": f.mode} for m in part
                                    for j, f in enumerate(m.files)])
            seconds = time.perf_counter() - t0
            rates[mode].append(len(todo) / seconds)
            log(f"  round {r + 1} {mode:9s} {len(todo) / seconds:9.1f} entries/s")
    return {m: statistics.median(v) for m, v in rates.items()}


# --- planning and reindex, in a subprocess per step --------------------------------------

def child(step: str, url: str, work: Path, entries: int) -> dict[str, Any]:
    """Run one step with whatever neffcache is first on sys.path; time and peak RSS."""
    import resource

    from neffcache.index import open_index
    from neffcache.store.local import LocalStore

    ms = matrices(entries)
    fp = fingerprint(0)
    store = LocalStore(work / "store")
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with open_index(url, auto_upgrade=False) as ix:
        t0 = time.perf_counter()
        if step == "plan":
            from neffcache.matrix import parse_matrix
            from neffcache.precompile.plan import PrecompileOptions
            from neffcache.precompile.run import apply_precompile

            src = work / "m00.toml"
            m = parse_matrix(src.read_text("utf-8"), str(src))
            report = apply_precompile(m, m.cells, store, ix, fp, PrecompileOptions(),
                                      environ={})
            assert report.run_id is None and len(report.cells) == len(ms[0].cells)
        elif step == "reindex":
            from neffcache.index.reindex import reindex

            result = reindex(ix, store, prune=False)
            assert result.scanned == len(ms[0].cells), result
        elif step in ("prune-before", "prune-after"):
            from sqlalchemy import text

            with ix.engine.connect() as conn:  # the store's listing, stood in
                found = sorted(conn.execute(text("SELECT entry_key FROM entries")).scalars())
            t0 = time.perf_counter()
            base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            if step == "prune-before":  # the code this replaced (reindex before 8b88987)
                with ix.engine.connect() as conn:
                    known = set(conn.execute(text("SELECT entry_key FROM entries")).scalars())
                removed = ix.remove_entries(sorted(known - set(found)))
            else:
                from neffcache.index.reindex import remove_stale

                removed = remove_stale(ix, found)
            assert removed == 0
        seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"seconds": seconds, "peak_rss_mb": peak / 1024, "step_rss_mb": (peak - base) / 1024}


def run_child(tree: Path, step: str, url: str, work: Path, entries: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree), "NEFFCACHE_BENCH_CHILD": "1"}
    code = (f"import sys, json; sys.path.insert(0, {str(tree)!r}); "
            f"sys.path.insert(1, {str(REPO / 'tools' / 'bench')!r}); import index_writes as b; "
            f"from pathlib import Path; "
            f"print(json.dumps(b.child({step!r}, {url!r}, Path({str(work)!r}), {entries})))")
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                         capture_output=True, text=True, cwd=str(work))
    return json.loads(out.stdout.strip().splitlines()[-1])


def planning(url: str, work: Path, entries: int, before: Path, repeat: int
             ) -> dict[str, dict[str, dict[str, float]]]:
    from neffcache.manifest import encode_manifest

    store = work / "store"
    if not store.exists():
        from neffcache.store.local import LocalStore

        st = LocalStore(store)
        fp = fingerprint(0)
        from neffcache.store.base import manifest_key
        for c in matrices(entries)[0].cells:
            m = manifest(c, fp)
            st.put(manifest_key(m.entry_key), io.BytesIO(encode_manifest(m)), if_absent=False)
    out: dict[str, dict[str, dict[str, float]]] = {}
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in range(repeat):
        for step in ("plan", "reindex"):
            trees = [("before", before), ("after", REPO)]
            for label, tree in (trees if r % 2 == 0 else trees[::-1]):
                res = run_child(tree, step, url, work, entries)
                runs.setdefault((step, label), []).append(res)
                log(f"  {step:8s} {label:6s} {res['seconds']:7.3f} s  peak RSS "
                    f"{res['peak_rss_mb']:7.1f} MB")
        for label in (("before", "after") if r % 2 == 0 else ("after", "before")):
            res = run_child(REPO, f"prune-{label}", url, work, entries)
            runs.setdefault(("prune", label), []).append(res)
            log(f"  prune    {label:6s} {res['seconds']:7.3f} s  step RSS "
                f"{res['step_rss_mb']:7.1f} MB")
    for (step, label), rs in runs.items():
        out.setdefault(step, {})[label] = {
            k: statistics.median(r[k] for r in rs) for k in ("seconds", "peak_rss_mb",
                                                              "step_rss_mb")}
    return out


def export_before(commit: str, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "neffcache"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def pg_scratch(admin: str, drop_only: bool = False) -> str:
    import psycopg

    dsn = admin.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
        if not drop_only:
            conn.execute(f"CREATE DATABASE {PG_DB}")
    return admin.rsplit("/", 1)[0] + "/" + PG_DB


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--per-mode", type=int, default=200, help="new entries per mode and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3, help="planning/reindex runs per tree")
    ap.add_argument("--before", default="7a845eb", help="commit whose code is 'before'")
    ap.add_argument("--pg", default=PG_ADMIN)
    ap.add_argument("--no-vacuum", action="store_true",
                    help="Postgres: ANALYZE only after the bulk load (no visibility map yet)")
    args = ap.parse_args()
    log(f"load: {os.getloadavg()}")
    results: dict[str, Any] = {"entries": args.entries, "load_start": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="neffcache-bench-writes-") as tmp:
        before = export_before(args.before, Path(tmp) / "before")
        for db in (("sqlite", "postgres") if args.db == "both" else (args.db,)):
            work = Path(tmp) / db
            work.mkdir()
            url = (f"sqlite:///{work / 'index.db'}" if db == "sqlite" else pg_scratch(args.pg))
            try:
                t0 = time.perf_counter()
                notes = fill(url, args.entries, work, vacuum=not args.no_vacuum)
                log(f"{db}: filled in {time.perf_counter() - t0:.0f} s: " + "; ".join(notes))
                plans = explain(url)
                for line in plans:
                    log(f"  plan: {line}")
                w = write_path(url, args.entries, args.per_mode, args.rounds, args.batch)
                p = planning(url, work, args.entries, before, args.repeat)
            finally:
                if db == "postgres":
                    pg_scratch(args.pg, drop_only=True)
            results[db] = {"notes": notes, "write_entries_per_s": w, "steps": p,
                           "plans": plans}
            print(f"\n== {db}, {args.entries:,} entries ({'; '.join(notes)})")
            for line in plans:
                print(f"query plan, {line}")
            print(f"write path, entries/s (median of {args.rounds} interleaved rounds of "
                  f"{args.per_mode}), ratio to the raw executemany peer:")
            for mode, rate in w.items():
                print(f"  {mode:9s} {rate:9.1f}/s   {rate / w['raw']:6.3f} x raw")
            print(f"  batched / per-entry: {w['batched'] / w['per-entry']:.1f} x;  "
                  f"batched / reopen: {w['batched'] / w['reopen']:.1f} x")
            print(f"planning and reindex (median of {args.repeat}; before = {args.before}):")
            for step, by in p.items():
                b, a = by["before"], by["after"]
                print(f"  {step:8s} before {b['seconds']:7.3f} s {b['peak_rss_mb']:7.1f} MB peak "
                      f"({b['step_rss_mb']:6.1f} MB in the step) | after {a['seconds']:7.3f} s "
                      f"{a['peak_rss_mb']:7.1f} MB peak ({a['step_rss_mb']:6.1f} MB) | time "
                      f"after/before {a['seconds'] / b['seconds']:.3f}")
    results["load_end"] = os.getloadavg()
    print(f"\nload (1/5/15 min): start {results['load_start']}, end {results['load_end']}")
    print(json.dumps(results, indent=1, default=str), file=sys.stderr)


if __name__ == "__main__":
    main()
