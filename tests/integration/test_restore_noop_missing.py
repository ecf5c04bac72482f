"""A no-op restore of a large matrix where some cells were never built (or failed) asks the
store nothing: the last full restore remembered which cells had no entry."""

from __future__ import annotations

import json
import time
from pathlib import Path

from neffcache.backends import NEURON
from neffcache.errors import exit_code_for
from neffcache.fingerprint import build_fingerprint
from neffcache.matrix import Cell
from neffcache.precompile.publish import publish_entry
from neffcache.restore.local import (
    LOCAL_ENTRIES,
    MISSING_FILE,
    MISSING_RECHECK_SECONDS,
    restore_local,
)
from neffcache.restore.run import restore_cells
from neffcache.store.local import LocalStore
from tests.support.faulty_store import FaultyStore
from tests.support.missing_record import read_missing

FP = build_fingerprint("neuron", {"target": "trn2"})
OTHER = build_fingerprint("neuron", {"target": "trn3"})
CELLS = 2000
NEVER_BUILT = set(range(0, CELLS, 100))  # 20 cells


def cell(i: int) -> Cell:
    return Cell.from_json({"pipeline": f"p{i // 100}", "class": "diffusers:Flux2KleinPipeline",
                           "model": "/models/p", "revision": None, "dtype": "bfloat16",
                           "mode": "compile", "components": ["transformer"],
                           "height": 512 + 8 * (i % 100), "width": 512, "batch": 1, "tp": 1,
                           "backend": "neuron"})


def publish(store: LocalStore, tmp: Path, c: Cell, fp: object, n: int) -> None:
    root = tmp / "src" / str(n)
    (root / "ab" / "cd").mkdir(parents=True)
    (root / "ab" / "cd" / f"{c.key[:32]}.neff").write_bytes(c.key.encode() * 4)
    publish_entry(store, c, fp, NEURON, {"neff": root}, workers=1)  # type: ignore[arg-type]


def test_noop_restore_with_never_built_cells_makes_zero_store_requests(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    cells = [cell(i) for i in range(CELLS)]
    assert len({c.key for c in cells}) == CELLS
    for i, c in enumerate(cells):
        if i not in NEVER_BUILT:
            publish(store, tmp_path, c, FP, i)
    publish(store, tmp_path, cells[0], OTHER, -1)  # built for another target only
    target = tmp_path / "cache"
    counted = FaultyStore(store)
    first = restore_cells(counted, cells, NEURON, FP, target, workers=4)
    assert len(first.resolution.missing) == len(NEVER_BUILT) and counted.calls
    assert exit_code_for(first.error()) == 3  # type: ignore[arg-type]

    counted.calls.clear()
    again = restore_local(cells, NEURON, FP, target, store_url=store.url)  # no store given
    assert again is not None and counted.calls == []
    assert (len(again.restored), len(again.resolution.missing)) == (CELLS - 20, 20)
    assert again.files_fetched == 0 and again.files_skipped == CELLS - 20
    assert exit_code_for(again.error()) == 3  # type: ignore[arg-type]
    assert again.to_json()["cells_missing"] == first.to_json()["cells_missing"]
    assert dict(again.resolution.elsewhere) == {cells[0].id: (OTHER.key,)}

    only_missing = restore_local([cells[0]], NEURON, FP, target, store_url=store.url)
    assert only_missing is not None and exit_code_for(only_missing.error()) == 5  # type: ignore[arg-type]


def test_the_missing_record_expires_and_is_tied_to_the_fingerprint(tmp_path: Path) -> None:
    from neffcache.restore.local import save_missing

    now = time.time()
    save_missing(tmp_path, FP.key, {"k1": (), "k2": (OTHER.key,)}, now)
    assert read_missing(tmp_path, FP.key, now + 1) == {"k1": (), "k2": (OTHER.key,)}
    assert read_missing(tmp_path, OTHER.key, now + 1) == {}
    assert read_missing(tmp_path, FP.key, now + MISSING_RECHECK_SECONDS + 1) == {}
    assert read_missing(tmp_path, FP.key, now - 60) == {}  # a clock set back: ask again
    doc = json.loads((tmp_path / LOCAL_ENTRIES / MISSING_FILE).read_text())
    assert doc["fingerprint_key"] == FP.key
    save_missing(tmp_path, FP.key, {}, now)  # nothing missing any more
    assert not (tmp_path / LOCAL_ENTRIES / MISSING_FILE).exists()
