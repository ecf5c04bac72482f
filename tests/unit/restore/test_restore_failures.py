"""Failure is as lean as success (issue 38): a restore counts the files that failed and keeps a
record of the first few (and the first of each kind) only; the JSON report keeps its keys."""

from __future__ import annotations

import shutil
from pathlib import Path

from neffcache.backends import NEURON
from neffcache.errors import exit_code_for
from neffcache.fingerprint import build_fingerprint
from neffcache.matrix import Cell
from neffcache.precompile.publish import publish_entry
from neffcache.restore.install import LISTED_FAILURES, Failures, FailureTally, FileFailure
from neffcache.restore.run import restore_cells
from neffcache.store.local import LocalStore
from tests.support.synthetic import make_neff_cache

FP = build_fingerprint("neuron", {"target": "trn2"})
CELL = Cell("p", "diffusers:P", "m", "main", "bfloat16", "compile", ("transformer",),
            64, 64, 1, 1)


def failure(i: int, kind: str = "integrity") -> FileFailure:
    return FileFailure("neff", f"f{i}", kind, f"neff/f{i}: {kind}")


def test_a_tally_counts_every_failure_and_keeps_the_first_few_and_each_kinds_first() -> None:
    tally = FailureTally(listed=3)
    for i in range(10):
        tally.add(failure(i))
    tally.add(failure(10, "io"))
    tally.add(failure(11, "io"))
    done = tally.done()
    assert done.count == 12 and len(tally) == 12
    assert [f.path for f in done.listed] == ["f0", "f1", "f2", "f10"]  # and io's first


def test_failures_add_up_exactly() -> None:
    a, b = FailureTally(listed=2), FailureTally(listed=2)
    for i in range(5):
        a.add(failure(i))
    b.add(failure(5, "io"))
    merged = a.done() + b.done()
    assert merged.count == 6
    assert [f.path for f in merged.listed] == ["f0", "f1", "f5"]
    assert (Failures() + Failures()).count == 0


def test_a_restore_with_more_missing_blobs_than_it_lists_counts_them_all(
        tmp_path: Path) -> None:
    files = LISTED_FAILURES + 40
    cache = make_neff_cache(tmp_path / "src", seed=3, count=files, large=0,
                            duplicate_ratio=0.0, droppings=False)
    store = LocalStore(tmp_path / "store")
    publish_entry(store, CELL, FP, NEURON, {"neff": cache.root})
    for d in ("blobs", "packs"):  # every blob (and every pack holding them) is gone
        shutil.rmtree(tmp_path / "store" / d, ignore_errors=True)
    r = restore_cells(store, [CELL], NEURON, FP, tmp_path / "t", workers=4)
    doc = r.to_json()
    assert exit_code_for(r.error()) == 4 and r.files_fetched == 0  # type: ignore[arg-type]
    assert r.files_failed == len(cache.files) == doc["files_failed_count"]
    assert len(r.failures) == LISTED_FAILURES == len(doc["files_failed"])
    assert f"{len(cache.files)} problem(s) found" in str(r.error())
