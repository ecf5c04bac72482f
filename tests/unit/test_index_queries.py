"""Read queries: ``ls --cell GLOB --limit N`` gives the same rows whichever plan it takes (walk
the entries newest first, or sort the matching cells' entries), on SQLite and Postgres; the
Core tables are the one schema declaration, the models map them; reads import no ORM."""

from __future__ import annotations

import fnmatch
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from neffcache.index import EntrySummary, Index, entry_cursor, open_index, upgrade_index
from neffcache.index.listing import glob_filter, walk_plan
from neffcache.index.matrices import register_matrix
from neffcache.index.models import Base
from neffcache.index.sqla_reader import SqlaReader
from neffcache.index.tables import metadata
from neffcache.matrix import parse_matrix
from tests.support.ops_seed import matrix_text
from tests.support.rows import ALL
from tests.unit.test_index_factories import make_cell, make_fingerprint, make_manifest

GLOBS = ["flux2-klein/*", "flux2-klein/compile/64x*", "*/64x7[0-9]/*", "sdxl/*",
         "flux2-klein/compile/6[4]x1[!0]*", "nothing/*", "*", "?dxl/*/64x6?/*",
         # characters LIKE and GLOB treat specially, matched literally by fnmatch
         "sd_xl/*", "sd%xl/*", "sd\\xl/*", "sd[_%]xl/*", "sd?xl/compile/64x64/*", "sd*xl/*",
         "sd[[]xl/*", "sd[]]xl/*", "sd[!_]xl/*", "p0/*", "[ps]*"]
OLDEST = "flux2-klein/compile/64x[6-9]*"  # cells 0-4, whose entries are the oldest
ODD = ["sd_xl", "sd%xl", "sd\\xl", "sd[xl", "sd]xl", "sdaxl"]  # pipelines with odd names


def fill(ix: Index) -> None:
    """40 cells of flux2-klein, then 4 of sdxl, then 2 of each ODD pipeline x 3 fingerprints,
    created one second apart (some at the same second: ties are broken by entry key); the
    flux2-klein entries are the oldest."""
    manifests = []
    cells = [make_cell(n) for n in range(40)] + [make_cell(n, pipeline="sdxl") for n in range(4)]
    cells += [make_cell(n, pipeline=p) for p in ODD for n in range(2)]
    for i, cell in enumerate(cells):
        for j in range(3):
            t = (i * 3 + j) // 2
            manifests.append(make_manifest(cell, make_fingerprint(j),
                                           created_at=f"2026-03-01T10:{t // 60:02d}:"
                                                      f"{t % 60:02d}+00:00"))
    ix.record_entries(manifests, "s3://b/p")
    empty = matrix_text("empty", shapes=8)  # cells p0/compile/... without entries
    register_matrix(ix, parse_matrix(empty, "empty.toml"), empty)


def check_plans(ix: Index) -> None:
    """Both plans are taken, and ``ls``'s listing agrees with fnmatch over every entry."""
    with ix.connection() as conn:
        reader = SqlaReader(conn)

        def walks(glob: str, limit: int) -> bool:
            gshape, gparams, _ = glob_filter(reader.dialect, glob)
            return walk_plan(reader, gshape, gparams, limit, False) is not None

        plans = {walks(glob, 5) for glob in GLOBS}
        assert plans == {True, False}  # both plans are exercised below
        # Most cells, the oldest entries: the walk is chosen, finds nothing among the newest
        # entries its budget allows, and the per-cell plan answers.
        assert walks("flux2-klein/*", 1)
    check_listing(ix.entries)


def check_listing(entries: Callable[..., list[EntrySummary]]) -> None:
    """``entries(cell_glob=, fingerprint_key=, limit=, after=)`` lists what fnmatch keeps of
    every entry, newest first, page by page (the per-cell plan, the walk, the cursor)."""
    listed = entries()  # no glob: newest first, the reference
    assert listed == sorted(listed, key=lambda e: (-e.created_at.timestamp(), e.entry_key))
    assert len(listed) == 3 * (44 + 2 * len(ODD))
    assert entries(limit=7) == listed[:7]
    assert entries(limit=7, after=entry_cursor(listed[6])) == listed[7:14]
    fp = make_fingerprint(2).key[:10]
    assert entries(fingerprint_key=fp) == [e for e in listed if e.fingerprint_key.startswith(fp)]
    assert entries(fingerprint_key="not-hex") == []
    for glob in [*GLOBS, OLDEST]:
        everything = [e for e in listed if fnmatch.fnmatchcase(e.cell_id, glob)]
        assert entries(cell_glob=glob) == everything, glob
        for limit in (1, 5, 200):
            assert entries(cell_glob=glob, limit=limit) == everything[:limit], (glob, limit)
        fp = make_fingerprint(1).key[:8]
        with_fp = [e for e in everything if e.fingerprint_key.startswith(fp)]
        assert entries(cell_glob=glob, fingerprint_key=fp, limit=3) == with_fp[:3]
        if len(everything) > 4:  # the next page, through the cursor
            after = entry_cursor(everything[3])
            assert entries(cell_glob=glob, limit=4, after=after) == everything[4:8], glob
    assert len(entries(cell_glob="flux2-klein/*")) == 120
    assert [e.cell_id.split("/")[0] for e in entries(cell_glob="sd_xl/*")] == ["sd_xl"] * 6
    assert len(entries(cell_glob=OLDEST, limit=1)) == 1


@pytest.fixture
def sqlite_ix(tmp_path: Path) -> Iterator[Index]:
    with open_index(f"sqlite:///{tmp_path / 'index.db'}", auto_upgrade=True) as index:
        fill(index)
        yield index


def test_ls_glob_limit_is_the_same_whichever_plan_on_sqlite(sqlite_ix: Index) -> None:
    check_plans(sqlite_ix)


@pytest.mark.postgres
def test_ls_glob_limit_is_the_same_whichever_plan_on_postgres(pg_new_database) -> None:  # type: ignore[no-untyped-def]
    url = pg_new_database()
    upgrade_index(url)
    with open_index(url, auto_upgrade=False) as ix:
        fill(ix)
        check_plans(ix)


def test_the_schema_is_declared_once() -> None:
    """The Core tables are the schema: every ORM class maps one of them as it is (no column of
    its own), and the models' metadata is theirs, so what Alembic compares is the tables."""
    assert Base.metadata is metadata
    mapped = {m.class_.__table__ for m in Base.registry.mappers}
    assert mapped <= set(ALL)
    for m in Base.registry.mappers:
        assert m.class_.__table__ is metadata.tables[m.class_.__table__.name]


# What ``ls`` has no use for (start-up: #25): coverage, ingest, reindex, the store, FastAPI.
LS_SKIPS = ("neffcache.index.coverage_engine",
            "neffcache.index.ingest", "neffcache.index.reindex", "neffcache.index.matrices",
            "neffcache.index.ops_values", "neffcache.store", "neffcache.fingerprint",
            "fastapi", "pydantic")


@pytest.mark.parametrize("argv", [["ls", "--cell", "sdxl/*", "--limit", "1", "--json"],
                                  ["coverage", "m", "--json"]])
def test_read_commands_import_no_orm(tmp_path: Path, argv: list[str]) -> None:
    home = tmp_path / "home"
    url = f"sqlite:///{home / 'index.db'}"
    with open_index(url, auto_upgrade=True) as ix:
        fill(ix)
        text = matrix_text("m", shapes=3)
        register_matrix(ix, parse_matrix(text, "m.toml"), text)
    code = (f"import sys\nfrom neffcache.cli import run\nLS_SKIPS = {LS_SKIPS!r}\n"
            "rc = run(sys.argv[1:])\n"
            "loaded = [m for m in sys.modules if m.startswith(('sqlalchemy.orm', 'alembic'))\n"
            "          or m in LS_SKIPS and sys.argv[1] == 'ls']\n"
            "print(rc, sorted(loaded))")
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          env={"NEFFCACHE_HOME": str(home), "PATH": "/usr/bin:/bin"},
                          check=False)
    assert '"fingerprint_key"' in done.stdout, done.stderr  # it did list / cover something
    assert done.stdout.strip().splitlines()[-1] == "0 []", done.stdout[-500:] + done.stderr
