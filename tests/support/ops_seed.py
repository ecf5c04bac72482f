"""Seed an index for the ops-surface tests: a registered matrix, entries, failures, runs and
restore reports with known statuses, at any scale (5,000 cells x 10 fingerprints included)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from neffcache.fingerprint import Fingerprint, build_fingerprint
from neffcache.index import Index
from neffcache.index.aggregates import rebuild_aggregates
from neffcache.index.matrices import register_matrix
from neffcache.index.models import CellFailureRow, PrecompileRunRow
from neffcache.index.record import save_fingerprints_and_cells, utcnow
from neffcache.matrix import Cell, Matrix, parse_matrix
from tests.unit.test_index_factories import make_manifest

READY, FAILED, MISSING = "ready", "failed", "missing"
StatusRule = Callable[[int, int], str]  # (cell number, fingerprint number) -> status


def matrix_text(name: str, *, pipelines: int = 1, modes: Sequence[str] = ("compile",),
                shapes: int = 2, batches: int = 1, backend: str = "neuron",
                first: int = 0) -> str:
    """A matrix with pipelines x modes x shapes x batches cells (ids like
    ``p0/compile/512x520/b1/tp1``; pipelines are numbered from ``first``)."""
    shape_list = ", ".join(f'"{512 + 8 * (i // 10)}x{512 + 8 * (i % 10)}"' for i in range(shapes))
    batch_list = ", ".join(str(b) for b in range(1, batches + 1))
    mode_list = ", ".join(f'"{m}"' for m in modes)
    parts = [f'name = "{name}"', f'backend = "{backend}"']
    for p in range(first, first + pipelines):
        parts.append(f'''
[[pipelines]]
name = "p{p}"
class = "diffusers:Flux2KleinPipeline"
model = "/models/p{p}"
modes = [{mode_list}]
shapes = [{shape_list}]
batch_sizes = [{batch_list}]''')
    return "\n".join(parts) + "\n"


def sdk_fingerprint(n: int, backend: str = "neuron") -> Fingerprint:
    """Fingerprint n: neuronx-cc 2.<n>.0 (its SDK version), target trn2."""
    return build_fingerprint(backend, {"version.neuronx-cc": f"2.{n}.0",
                                       "version.torch": "2.9.0", "target": "trn2"})


@dataclass(frozen=True)
class Seeded:
    matrix: Matrix
    fingerprints: tuple[Fingerprint, ...]
    statuses: dict[tuple[str, str], str]  # (cell id, fingerprint key) -> status
    entry_bytes: dict[str, int]  # fingerprint key -> total bytes of its entries

    def count(self, fp: Fingerprint, status: str) -> int:
        return sum(1 for (_, k), s in self.statuses.items() if k == fp.key and s == status)


def seed(ix: Index, text: str, fingerprints: Sequence[Fingerprint], rule: StatusRule,
         *, size: Callable[[int, int], int] = lambda n, i: 1000 + n,
         log: Callable[[Cell, Fingerprint], str] = lambda c, fp: f"error: {c.id} failed\n"
         ) -> Seeded:
    """Register the matrix in ``text`` (replacing other content under its name: a new
    version) and give each cell x fingerprint the status ``rule`` says: an entry of ``size``
    bytes, a recorded failure (one precompile run per fingerprint) or nothing."""
    matrix = parse_matrix(text, "seed.toml")
    register_matrix(ix, matrix, text, replace=True)
    statuses: dict[tuple[str, str], str] = {}
    manifests, failures = [], []
    entry_bytes = {fp.key: 0 for fp in fingerprints}
    for n, cell in enumerate(matrix.cells):
        for i, fp in enumerate(fingerprints):
            status = rule(n, i)
            statuses[(cell.id, fp.key)] = status
            if status == READY:
                manifests.append(make_manifest(cell, fp, files=[("neff", "k.neff", size(n, i),
                                                                 f"{cell.key}{fp.key}")]))
                entry_bytes[fp.key] += size(n, i)
            elif status == FAILED:
                failures.append((cell, fp))
    if manifests:
        ix.record_entries(manifests, "s3://bucket/neff")
    _bulk_failures(ix, failures, log)
    return Seeded(matrix, tuple(fingerprints), statuses, entry_bytes)


def _bulk_failures(ix: Index, pairs: list[tuple[Cell, Fingerprint]],
                   log: Callable[[Cell, Fingerprint], str]) -> None:
    if not pairs:
        return
    now = utcnow()
    with ix.write_session() as s:  # test set-up at scale
        save_fingerprints_and_cells(s, {fp for _, fp in pairs}, [c for c, _ in pairs], now)
        runs = {}
        for fp in {fp for _, fp in pairs}:
            runs[fp.key] = f"run{fp.key[:28]}"
            s.add(PrecompileRunRow(id=runs[fp.key], started_at=now, finished_at=now,
                                   host="ci-1", fingerprint_key=fp.key, matrix_name="seed",
                                   cells_ok=0, cells_failed=0))
        s.flush()
        s.add_all([CellFailureRow(run_id=runs[fp.key], cell_key=c.key, fingerprint_key=fp.key,
                                  exit_status=1, seconds=2.0, log_tail=log(c, fp),
                                  created_at=now) for c, fp in pairs])
        s.flush()
        rebuild_aggregates(s)  # rows written directly: recount


def bulk_entries(ix: Index, n: int, *, fingerprints: int = 50) -> None:
    """``n`` entries made by the database itself (one INSERT ... SELECT; no file rows, the
    aggregates not recounted: for listings), over ``n / fingerprints`` cells of matrix
    "bulk" x ``fingerprints`` fingerprints, three a second (ties for the cursor's
    tie-break)."""
    from sqlalchemy import text

    fps = [sdk_fingerprint(i) for i in range(fingerprints)]
    per = -(-n // fingerprints)
    cells = parse_matrix(matrix_text("bulk", shapes=per), "bulk.toml").cells
    with ix.write_session() as s:  # test set-up at scale
        save_fingerprints_and_cells(s, fps, cells, utcnow())
        if s.get_bind().dialect.name == "postgresql":
            key = "md5(c.key || f.key) || md5(f.key || c.key)"
            at = "now() - (row_number() OVER (ORDER BY c.key, f.key) / 3) * interval '1 second'"
            now = "now()"
        else:
            key = "substr(c.key, 1, 32) || substr(f.key, 1, 32)"
            at = ("strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (row_number() OVER "
                  "(ORDER BY c.key, f.key) / 3) || ' seconds')")
            now = "strftime('%Y-%m-%d %H:%M:%f', 'now')"
        s.execute(text(
            "INSERT INTO entries (entry_key, cell_key, fingerprint_key, store_url, total_bytes,"
            " file_count, compile_seconds, producer, created_at, recorded_at, restore_count)"
            f" SELECT {key}, c.key, f.key, 's3://bulk/neff', 4096, 1, 30.0, '{{}}', {at},"
            f" {now}, 0 FROM cells c CROSS JOIN fingerprints f LIMIT :n"), {"n": n})


DEMO_TABLE = [  # 6 cells of "demo" (current version 2) x 2 fingerprints
    (READY, READY), (READY, FAILED), (FAILED, MISSING),
    (MISSING, READY), (READY, MISSING), (MISSING, MISSING),
]
DEMO_RESTORES = [  # (host, fingerprint number, restored, missing, bytes, seconds, exit code)
    ("i-hit", 0, 3, 0, 30_000, 0.8, 0),
    ("i-partial", 1, 2, 1, 20_000, 4.0, 3),
    ("i-error", 0, 0, 0, 0, 12.0, 6),
]


def seed_demo(ix: Index) -> Seeded:
    """The ops tests' standard index: matrix "demo" registered twice (version 1 with 4 cells,
    then version 2 with 6, statuses DEMO_TABLE), matrix "other" (2 cells, nothing built),
    and the restore reports DEMO_RESTORES."""
    v1 = matrix_text("demo", modes=("compile", "eager"), shapes=2)
    register_matrix(ix, parse_matrix(v1, "demo.toml"), v1)
    fps = (sdk_fingerprint(1), sdk_fingerprint(2))
    seeded = seed(ix, matrix_text("demo", modes=("compile", "eager"), shapes=3), fps,
                  lambda n, i: DEMO_TABLE[n][i], size=lambda n, i: 1000 * (n + 1) + i,
                  log=lambda c, fp: f"compiling {c.id}\nneuronx-cc: error: out of memory\n")
    other = matrix_text("other", shapes=2, first=7)
    register_matrix(ix, parse_matrix(other, "other.toml"), other)
    cells = [c.id for c in seeded.matrix.cells]
    for host, fp_n, restored, missing, nbytes, secs, code in DEMO_RESTORES:
        ix.record_restore({"host": host, "matrix": "demo", "fingerprint_key": fps[fp_n].key,
                           "cells_restored": cells[:restored],
                           "cells_missing": cells[restored:restored + missing],
                           "bytes_fetched": nbytes, "seconds": secs, "exit_code": code})
    return seeded


@dataclass(frozen=True)
class OpsExtras:
    leased: Fingerprint  # a fingerprint with one live and one expired lease on "demo"
    reported: Fingerprint  # named only by a restore report of "other": nothing built for it


EXTRA_RESTORES = [("i-cold", 0, 0, 0, 0, 1.5, 5)]  # DEMO_RESTORES' shape: a miss on "other"


def seed_ops_extras(ix: Index, seeded: Seeded) -> OpsExtras:
    """On top of ``seed_demo``: fingerprint 3 queued on "demo" with one live lease (10 min)
    and one held past its expiry, a precompile run of "demo" started now, and a restore
    report of "other" for fingerprint 4, which nothing was built for."""
    leased, reported = sdk_fingerprint(3), sdk_fingerprint(4)
    cells = seeded.matrix.cells
    keys = [c.key for c in cells]
    ix.queue_claims("demo", cells, leased, keys)
    for holder, seconds in (("live", 600.0), ("dead", -60.0)):
        claim = ix.claim_next(keys, leased.key, holder=holder, host=f"w-{holder}",
                              lease_seconds=seconds, max_attempts=3)
        assert claim.lease is not None
    ix.start_run("ci-2", leased, "demo")
    for host, _, restored, missing, nbytes, secs, code in EXTRA_RESTORES:
        ix.record_restore({"host": host, "matrix": "other", "fingerprint_key": reported.key,
                           "cells_restored": restored, "cells_missing": missing,
                           "bytes_fetched": nbytes, "seconds": secs, "exit_code": code})
    return OpsExtras(leased, reported)


FLAGS = ("--optlevel 1", "--optlevel 2")


def flag_fingerprints() -> tuple[Fingerprint, Fingerprint, Fingerprint]:
    """Two fingerprints alike but for their NEURON_CC_FLAGS (cards that read the same), and
    one of another SDK."""
    def fp(sdk: str, flags: str) -> Fingerprint:
        return build_fingerprint("neuron", {"version.neuronx-cc": sdk, "version.torch": "2.9.0",
                                            "target": "trn2", "cc_flags": flags})
    return fp("2.5.0", FLAGS[0]), fp("2.5.0", FLAGS[1]), fp("2.6.0", FLAGS[0])


def seed_problems(ix: Index) -> tuple[Seeded, str, str]:
    """The demo index (failed cells on "demo", "other" restored with a fingerprint nothing was
    built for, an expired lease on "demo"), matrix "flags" fully built for the three
    ``flag_fingerprints``, and a precompile run of "demo" that was cancelled; returns the
    demo's seed, the fingerprint only restore reports name, and the cancelled run's id."""
    data = seed_demo(ix)
    extras = seed_ops_extras(ix, data)
    seed(ix, matrix_text("flags", shapes=3, first=20), flag_fingerprints(),
         lambda n, i: READY)
    run = ix.start_run("ci-9", data.fingerprints[0], "demo")
    ix.finish_run(run, 0, 0, cancelled=2)
    return data, extras.reported.key, run
