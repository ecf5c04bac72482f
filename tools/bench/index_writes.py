"""Index access at fleet scale: entries/s on the write path, and time and peak RSS of the
precompile planning step and of reindex, against an index of about a million entries.

Fill (--entries, default 1,000,000; SQLite and/or Postgres): 50 matrices x N/50/50 cells are
registered and 5 fingerprints of matrix m00 recorded through neffcache's own write path
(``register_matrix``, ``record_entries``); every other entry is bulk SQL (entry rows without
file rows), then the aggregates are recounted and the tables analysed (Postgres: VACUUM ANALYZE, as
autovacuum would; before it, index-only scans read the heap and --no-vacuum shows that).
The output says so.

Write path (interleaved rounds, new entries of registered cells on a fresh fingerprint each):
  command    a fresh process per entry (--per-mode / 5 of them), timed from importing
             neffcache.index to closing it: the index work of one push/capture command
  reopen     open_index + record_entry + close per entry, in one process (a push's index work
             without the imports)
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
    .venv/bin/python tools/bench/index_writes.py --compare-writes --before 5764654 \
        --entries 300000 --per-mode 120        # write path side by side with an older schema

--compare-writes fills an index per tree with that tree's own code (--before's migrations
and package, as ``git archive`` exports them) and runs every (round, mode) in a fresh process
per tree, the trees' order alternating; the planning steps are skipped (they need one
schema for both trees).

Postgres: a scratch database ``neffcache_bench_writes`` (``_after``/``_before`` with
--compare-writes) on --pg, dropped afterwards.
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
        with writer(ix)() as s:  # bulk load
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
            try:
                from neffcache.index.aggregates import rebuild_aggregates
            except ImportError:  # a tree from before the aggregates
                notes.append(f"bulk SQL: {n_bulk:,} entries without file rows")
            else:
                rebuild_aggregates(s)
                notes.append(f"bulk SQL: {n_bulk:,} entries without file rows; "
                             f"aggregates recounted")
        with engine_of(ix).connect() as conn:
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


def writer(ix: Any) -> Any:
    """``Index.write_session``, or its older private name (a --before tree)."""
    return getattr(ix, "write_session", None) or ix._write  # noqa: SLF001


def engine_of(ix: Any) -> Any:
    return getattr(ix, "engine", None) or ix._engine  # noqa: SLF001


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


MODES = ("command", "reopen", "per-entry", "batched", "raw")
COMMAND_SHARE = 5  # command mode records per_mode / 5 entries (a process each)


def record_one(url: str, entries: int, serial: int, i: int) -> float:
    """What one ``push`` does with the index, in this (fresh) process: import, open (schema
    check), record one entry, close. Seconds, the manifest built before the clock starts."""
    m = manifest(matrices(entries)[1].cells[i], fingerprint(serial))
    t0 = time.perf_counter()
    from neffcache.index import open_index

    with open_index(url, auto_upgrade=False) as ix:
        ix.record_entry(m, "s3://bench/neff")
    return time.perf_counter() - t0


def write_mode(url: str, entries: int, mode: str, serial: int, per_mode: int, batch: int,
               share: int = COMMAND_SHARE) -> float:
    """Record ``per_mode`` new entries of matrix m01 on fingerprint ``serial`` in ``mode``
    with whatever neffcache is first on sys.path; entries/s."""
    from neffcache.index import open_index
    from neffcache.index.models import BlobRow, EntryFileRow, EntryRow
    from neffcache.index.record import insert_if_absent, save_fingerprints_and_cells

    cells = matrices(entries)[1].cells
    fp = fingerprint(serial)
    todo = [manifest(c, fp) for c in (cells * (per_mode // len(cells) + 1))[:per_mode]]
    if len({m.entry_key for m in todo}) != len(todo):
        raise SystemExit("--per-mode must not exceed a matrix's cell count")
    if mode == "command":
        tree = Path(sys.modules["neffcache"].__file__ or ".").resolve().parents[1]
        n = max(1, per_mode // share)
        return n / sum(call_child(tree, "record_one", url, entries, serial, i)
                       for i in range(n))
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
                with writer(ix)() as s:  # the peer
                    save_fingerprints_and_cells(s, [fp], [], datetime.now(timezone.utc))
                for i in range(0, len(todo), batch):
                    part = todo[i:i + batch]
                    now = datetime.now(timezone.utc)
                    with writer(ix)() as s:
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
    return len(todo) / (time.perf_counter() - t0)


def write_path(url: str, entries: int, per_mode: int, rounds: int, batch: int
               ) -> dict[str, float]:
    """Median entries/s per mode, rounds interleaved (the mode order rotates)."""
    rates: dict[str, list[float]] = {m: [] for m in MODES}
    serial = 1000
    for r in range(rounds):
        for mode in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:
            serial += 1
            rate = write_mode(url, entries, mode, serial, per_mode, batch)
            rates[mode].append(rate)
            log(f"  round {r + 1} {mode:9s} {rate:9.1f} entries/s")
    return {m: statistics.median(v) for m, v in rates.items()}


def write_path_trees(urls: dict[str, str], trees: dict[str, Path], entries: int,
                     per_mode: int, rounds: int, batch: int, share: int = COMMAND_SHARE
                     ) -> dict[str, dict[str, float]]:
    """``write_path`` for each tree against its own index (filled by that tree's code), each
    (round, mode) run in a child process per tree, the trees' order alternating: the same
    new entries (same fingerprints) go into both indexes. {tree: {mode: median entries/s}}."""
    rates: dict[str, dict[str, list[float]]] = {t: {m: [] for m in MODES} for t in trees}
    serial = 1000
    for r in range(rounds):
        for mode in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:
            serial += 1
            turn = (r * len(MODES) + MODES.index(mode)) % len(trees)
            labels = list(trees)[turn:] + list(trees)[:turn]  # who goes first rotates
            for label in labels:
                rate = call_child(trees[label], "write_mode", urls[label], entries, mode,
                                  serial, per_mode, batch, share)
                rates[label][mode].append(rate)
                log(f"  round {r + 1} {mode:9s} {label:6s} {rate:9.1f} entries/s")
    return {t: {m: statistics.median(v) for m, v in by.items()} for t, by in rates.items()}


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


def call_child(tree: Path, func: str, *args: Any) -> Any:
    """``func(*args)`` of this module in a fresh interpreter whose neffcache is ``tree``'s;
    the arguments and the result go through JSON (paths as strings)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "NEFFCACHE_BENCH_CHILD": "1"}
    code = (f"import sys, json; sys.path.insert(0, {str(tree)!r}); "
            f"sys.path.insert(1, {str(REPO / 'tools' / 'bench')!r}); import index_writes as b; "
            f"print(json.dumps(b.{func}(*json.loads(sys.argv[1]))))")
    out = subprocess.run([sys.executable, "-c", code, json.dumps([str(a) if isinstance(a, Path)
                                                                  else a for a in args])],
                         env=env, capture_output=True, text=True, cwd=str(tree))
    if out.returncode:
        raise SystemExit(f"{func} in {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def fill_child(url: str, entries: int, work: str, vacuum: bool) -> list[str]:
    return fill(url, entries, Path(work), vacuum)


def child_step(step: str, url: str, work: str, entries: int) -> dict[str, Any]:
    return child(step, url, Path(work), entries)


def run_child(tree: Path, step: str, url: str, work: Path, entries: int) -> dict[str, Any]:
    result: dict[str, Any] = call_child(tree, "child_step", step, url, work, entries)
    return result


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
    """That commit's package and its migrations (as ``neffcache.migrations``, which the
    shared editable install would otherwise map to this checkout's)."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "neffcache",
                              "migrations"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    link = dest / "neffcache" / "migrations"
    if not link.exists():
        link.symlink_to(Path("..") / "migrations")
    return dest


def pg_scratch(admin: str, drop_only: bool = False, name: str = PG_DB) -> str:
    import psycopg

    dsn = admin.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        if not drop_only:
            conn.execute(f"CREATE DATABASE {name}")
    return admin.rsplit("/", 1)[0] + "/" + name


def print_writes(w: dict[str, float], rounds: int, per_mode: int,
                 share: int = COMMAND_SHARE) -> None:
    print(f"write path, entries/s (median of {rounds} interleaved rounds of "
          f"{per_mode}; command: {max(1, per_mode // share)} processes), ratio to the "
          f"raw executemany peer:")
    for mode, rate in w.items():
        per = f"   ({1000 / rate:.0f} ms each)" if mode in ("command", "reopen") else ""
        print(f"  {mode:9s} {rate:9.1f}/s   {rate / w['raw']:6.3f} x raw{per}")
    print(f"  batched / per-entry: {w['batched'] / w['per-entry']:.1f} x;  "
          f"batched / reopen: {w['batched'] / w['reopen']:.1f} x")


def compare_writes(db: str, tmp: Path, before: Path, args: argparse.Namespace
                   ) -> dict[str, Any]:
    """--compare-writes: an index per tree, each filled by its own code, then the write path
    of the trees interleaved (this tree, --before and each --also)."""
    trees = {"after": REPO, "before": before}
    for spec in args.also:
        label, _, commit = spec.partition("=")
        trees[label] = export_before(commit, tmp / f"tree-{label}")
    urls, notes = {}, {}
    try:
        for label, tree in trees.items():
            work = tmp / f"{db}-{label}"
            work.mkdir()
            urls[label] = (f"sqlite:///{work / 'index.db'}" if db == "sqlite"
                           else pg_scratch(args.pg, name=f"{PG_DB}_{label}"))
            t0 = time.perf_counter()
            notes[label] = call_child(tree, "fill_child", urls[label], args.entries, work,
                                      not args.no_vacuum)
            log(f"{db} {label}: filled in {time.perf_counter() - t0:.0f} s: "
                + "; ".join(notes[label]))
        load = os.getloadavg()
        w = write_path_trees(urls, trees, args.entries, args.per_mode, args.rounds,
                             args.batch, args.command_share)
    finally:
        if db == "postgres":
            for label in trees:
                pg_scratch(args.pg, drop_only=True, name=f"{PG_DB}_{label}")
    load_end = os.getloadavg()
    where = f"SQLite in {tmp}" if db == "sqlite" else f"Postgres at {args.pg.rsplit('@', 1)[-1]}"
    also = "".join(f", of {s.partition('=')[2]} ({s.partition('=')[0]})" for s in args.also)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    print(f"\n== {db} ({where}), {args.entries:,} entries, write path of this tree (after, "
          f"{head}), of "
          f"{args.before} (before){also}, each against its own index filled by its own code, "
          f"interleaved (each round x mode a fresh process per tree, the trees' order "
          f"alternating); load (1/5/15 min) at the first round {load}, at the last "
          f"{load_end}")
    for label in trees:
        print(f"-- {label}: {'; '.join(notes[label])}")
        print_writes(w[label], args.rounds, args.per_mode, args.command_share)
    for label in (t for t in trees if t != "before"):
        print(f"{label} / before, entries/s:  " + ";  ".join(
            f"{m} {w[label][m] / w['before'][m]:.2f} x" for m in MODES))
    return {"notes": notes, "write_entries_per_s": w, "load": [load, load_end]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--per-mode", type=int, default=200, help="new entries per mode and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3, help="planning/reindex runs per tree")
    ap.add_argument("--before", default="7a845eb", help="commit whose code is 'before'")
    ap.add_argument("--compare-writes", action="store_true",
                    help="write path of this tree and of --before side by side, each against "
                         "its own index (for a --before with another schema); no planning "
                         "steps")
    ap.add_argument("--also", action="append", default=[], metavar="LABEL=COMMIT",
                    help="--compare-writes: one more tree, that commit's code (repeatable)")
    ap.add_argument("--command-share", type=int, default=COMMAND_SHARE, metavar="N",
                    help="command mode: --per-mode / N processes")
    ap.add_argument("--tmp", default=None, metavar="DIR",
                    help="where the SQLite indexes and the --before tree go [default: the "
                         "system's temp dir]")
    ap.add_argument("--pg", default=PG_ADMIN)
    ap.add_argument("--no-vacuum", action="store_true",
                    help="Postgres: ANALYZE only after the bulk load (no visibility map yet)")
    args = ap.parse_args()
    log(f"load: {os.getloadavg()}")
    results: dict[str, Any] = {"entries": args.entries, "load_start": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="neffcache-bench-writes-", dir=args.tmp) as tmp:
        before = export_before(args.before, Path(tmp) / "before")
        for db in (("sqlite", "postgres") if args.db == "both" else (args.db,)):
            if args.compare_writes:
                results[db] = compare_writes(db, Path(tmp), before, args)
                continue
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
            print_writes(w, args.rounds, args.per_mode)
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
