"""A precompile whose cells are all ready reads only its own cells' entries from the index
(never every entry key), and indexes the store's entries the index does not know, in
batches."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event, text

from neffcache.index import Index, api, open_index
from neffcache.manifest import encode_manifest
from neffcache.matrix import parse_matrix
from neffcache.precompile.plan import SKIPPED, PrecompileOptions
from neffcache.precompile.run import apply_precompile
from neffcache.store.base import manifest_key
from neffcache.store.local import LocalStore
from tests.unit.test_index_factories import make_cell, make_fingerprint, make_manifest

MATRIX = """name = "reads"
backend = "inductor"

[[pipelines]]
name = "tiny"
class = "diffusers:Flux2KleinPipeline"
model = "/models/tiny"
modes = ["compile"]
components = ["transformer"]
shapes = ["64x64", "96x128", "128x128"]
batch_sizes = [1, 2]
"""
OTHERS = 300  # entries of other cells and fingerprints, which planning must not read


class SelectLog:
    """Every SELECT run against an engine, with its parameters (to replay and count rows)."""

    def __init__(self) -> None:
        self.selects: list[tuple[str, Any]] = []

    def __call__(self, conn: Any, cursor: Any, statement: str, parameters: Any,
                 context: Any, executemany: bool) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            self.selects.append((statement, parameters))


@pytest.fixture
def log() -> Iterator[SelectLog]:
    selects = SelectLog()
    event.listen(Engine, "after_cursor_execute", selects)
    yield selects
    event.remove(Engine, "after_cursor_execute", selects)


def entry_rows_fetched(ix: Index, log: SelectLog) -> list[str]:
    """Replay every logged SELECT that reads the entries table; the entry keys it returned."""
    keys: list[str] = []
    with ix.engine.connect() as conn:  # replaying the index's own reads
        raw = conn.connection.driver_connection
        for statement, params in log.selects:
            if "FROM entries" not in statement or "entry_key" not in statement:
                continue
            keys.extend(str(row[0]) for row in raw.execute(statement, params).fetchall())
    return keys


def test_planning_reads_only_the_matrix_cells_entries(tmp_path: Path, log: SelectLog,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "reads.toml"
    source.write_text(MATRIX, encoding="utf-8")
    matrix = parse_matrix(MATRIX, str(source))
    fp = make_fingerprint(1)
    store = LocalStore(tmp_path / "store")
    mine = [make_manifest(c, fp) for c in matrix.cells]
    for m in mine:
        store.put(manifest_key(m.entry_key), io.BytesIO(encode_manifest(m)), if_absent=False)
    others = [make_manifest(make_cell(n), make_fingerprint(n % 3)) for n in range(OTHERS)]
    monkeypatch.setattr(api, "ENTRY_BATCH", 2)  # several transactions for 5 unknown entries
    with open_index(f"sqlite:///{tmp_path / 'index.db'}", auto_upgrade=True) as ix:
        ix.record_entries(others, "/elsewhere")
        ix.record_entry(mine[0], store.url)  # known; the other five only the store has
        log.selects.clear()
        report = apply_precompile(matrix, matrix.cells, store, ix, fp, PrecompileOptions(),
                                  environ={})
        fetched = entry_rows_fetched(ix, log)
        indexed = {e.entry_key for e in ix.entries()}
    assert [c.status for c in report.cells] == [SKIPPED] * len(matrix.cells)
    assert report.run_id is None  # nothing to warm: no run started
    # Every ready entry is indexed now, the others untouched ...
    assert indexed == {m.entry_key for m in mine} | {m.entry_key for m in others}
    # ... and no entry outside the matrix x this fingerprint was read to get there.
    assert fetched, "the planning step looked nothing up in the index"
    assert set(fetched) <= {m.entry_key for m in mine}
    assert len(fetched) <= 2 * len(mine)


def test_nothing_is_recorded_when_the_index_knows_every_ready_entry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "reads.toml"
    source.write_text(MATRIX, encoding="utf-8")
    matrix = parse_matrix(MATRIX, str(source))
    fp = make_fingerprint(1)
    store = LocalStore(tmp_path / "store")
    mine = [make_manifest(c, fp) for c in matrix.cells]
    for m in mine:
        store.put(manifest_key(m.entry_key), io.BytesIO(encode_manifest(m)), if_absent=False)
    with open_index(f"sqlite:///{tmp_path / 'index.db'}", auto_upgrade=True) as ix:
        ix.record_entries(mine, store.url)
        calls: list[int] = []
        real = ix.record_entries
        monkeypatch.setattr(ix, "record_entries",
                            lambda ms, url: calls.append(len(ms)) or real(ms, url))
        apply_precompile(matrix, matrix.cells, store, ix, fp, PrecompileOptions(), environ={})
        with ix.engine.connect() as conn:
            n = conn.execute(text("SELECT count(*) FROM entries")).scalar_one()
    assert calls == [] and n == len(mine)
