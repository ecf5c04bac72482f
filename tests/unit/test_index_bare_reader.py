"""``ls`` on the bare driver: the statements SQLAlchemy compiled (kept in the
StatementCache) give the same entries as SQLAlchemy on SQLite and Postgres, for every plan
and filter; a second ``ls`` imports no SQLAlchemy; a database at another schema, a changed
or damaged cache, and an unreachable server fall back to SQLAlchemy or fail in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from neffcache.errors import UnavailableError
from neffcache.index import EntrySummary, Index, listing, open_index, upgrade_index
from neffcache.index.bare_reader import BareReader, open_bare
from neffcache.index.compiled import StatementCache, code_digest
from tests.unit.test_index_queries import check_listing, fill


def _never() -> Any:
    raise AssertionError("a statement was not in the cache: the bare path fell back")


def _bare_lister(reader: BareReader) -> Callable[..., list[EntrySummary]]:
    def entries(cell_glob: str | None = None, fingerprint_key: str | None = None,
                limit: int | None = None, after: str | None = None) -> list[EntrySummary]:
        return list(listing.iter_entries(reader, cell_glob, fingerprint_key, limit, after))
    return entries


def _both_paths_agree(ix: Index, url: str, tmp_path: Path) -> None:
    cache = StatementCache(tmp_path / "sql.json")
    ix.statements = cache
    check_listing(ix.entries)  # through SQLAlchemy: compiles and keeps every statement
    doc = json.loads((tmp_path / "sql.json").read_text())
    saved = StatementCache(tmp_path / "sql.json", doc["head"], cache._statements)
    assert len(doc["statements"]) >= 10  # every plan and filter's shape
    bare = open_bare(url, saved, fallback=_never)
    assert bare is not None
    with bare:
        check_listing(_bare_lister(bare))  # the same rows, on the driver alone


def test_the_bare_driver_lists_what_sqlalchemy_lists_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'index.db'}"
    with open_index(url, auto_upgrade=True) as ix:
        fill(ix)
        _both_paths_agree(ix, url, tmp_path)


@pytest.mark.postgres
def test_the_bare_driver_lists_what_sqlalchemy_lists_on_postgres(  # type: ignore[no-untyped-def]
        pg_new_database, tmp_path: Path) -> None:
    url = pg_new_database()
    upgrade_index(url)
    with open_index(url, auto_upgrade=False) as ix:
        fill(ix)
        _both_paths_agree(ix, url, tmp_path)


_PROBE = ("import sys\nfrom neffcache.cli import run\nrc = run(sys.argv[1:])\n"
          "print('RC', rc, any(m.startswith('sqlalchemy') for m in sys.modules))")


def _ls(home: Path, *argv: str) -> tuple[str, str]:
    done = subprocess.run([sys.executable, "-c", _PROBE, "ls", *argv], capture_output=True,
                          text=True, env={"NEFFCACHE_HOME": str(home), "PATH": "/usr/bin:/bin"},
                          check=False)
    *out, last = done.stdout.strip().splitlines()
    return "\n".join(out), last + " | " + done.stderr.strip()


def test_the_second_ls_imports_no_sqlalchemy_and_prints_the_same(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with open_index(f"sqlite:///{home / 'index.db'}", auto_upgrade=True) as ix:
        fill(ix)
    for argv in (["--json"], ["--cell", "flux2-klein/*", "--limit", "5", "--json"],
                 ["--cell", "sd[!_]xl/*", "--jsonl"]):
        first, rc1 = _ls(home, *argv)
        again, rc2 = _ls(home, *argv)
        assert rc1.startswith("RC 0 True"), rc1  # SQLAlchemy compiled the statements
        assert rc2.startswith("RC 0 False"), rc2  # the driver alone ran them
        assert first == again and '"entry_key"' in first
    assert [p.name for p in (home / "sql").iterdir()] == [f"{code_digest()}.json"]
    assert (home / "sql" / f"{code_digest()}.json").stat().st_mode & 0o077 == 0


def test_a_database_at_another_schema_goes_to_sqlalchemy_which_refuses_it(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    url = f"sqlite:///{home / 'index.db'}"
    with open_index(url, auto_upgrade=True) as ix:
        fill(ix)
    assert _ls(home, "--limit", "1")[1].startswith("RC 0 True")
    named = tmp_path / "named.db"  # a named index: never upgraded by a read
    named.write_bytes((home / "index.db").read_bytes())
    with open_index(f"sqlite:///{named}", auto_upgrade=False) as ix, ix.connection() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'ffffffffffff'"))
        conn.commit()
    cache = StatementCache.load(home)
    assert open_bare(f"sqlite:///{named}", cache, fallback=_never) is None
    done = subprocess.run([sys.executable, "-m", "neffcache.cli", "ls", "--index",
                           f"sqlite:///{named}"], capture_output=True, text=True,
                          env={"NEFFCACHE_HOME": str(home), "PATH": "/usr/bin:/bin"},
                          check=False)
    assert done.returncode == 7, done.stderr
    assert "ffffffffffff" in done.stderr and len(done.stderr.strip().splitlines()) <= 2


def test_a_damaged_cache_is_ignored_and_rewritten(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with open_index(f"sqlite:///{home / 'index.db'}", auto_upgrade=True) as ix:
        fill(ix)
    path = home / "sql" / f"{code_digest()}.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"format": 1, "head": "x", "statements": {"sqlite|entries|[]": {}}}')
    out, rc = _ls(home, "--limit", "3", "--json")
    assert rc.startswith("RC 0 True") and len(json.loads(out)["entries"]) == 3
    assert _ls(home, "--limit", "3", "--json") == (out, rc.replace("True", "False"))


def test_an_unreachable_postgres_is_one_line_with_the_password_hidden(tmp_path: Path) -> None:
    cache = StatementCache(None, head="anything")
    url = "postgresql+psycopg://neffcache:s3cret@127.0.0.1:9/index"  # port 9: nothing there
    with pytest.raises(UnavailableError) as caught:
        open_bare(url, cache, fallback=_never)
    message = str(caught.value)
    assert "s3cret" not in message and "127.0.0.1:9" in message and "\n" not in message


def test_a_cache_others_may_write_is_never_read(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with open_index(f"sqlite:///{home / 'index.db'}", auto_upgrade=True) as ix:
        fill(ix)
    assert _ls(home, "--limit", "1")[1].startswith("RC 0 True")
    path = home / "sql" / f"{code_digest()}.json"
    assert StatementCache.load(home).head is not None
    path.chmod(0o666)
    assert StatementCache.load(home).head is None
    assert _ls(home, "--limit", "1")[1].startswith("RC 0 True")  # through SQLAlchemy again
    assert path.stat().st_mode & 0o077 == 0  # and written back privately


def test_other_versions_files_are_pruned_after_30_days(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with open_index(f"sqlite:///{home / 'index.db'}", auto_upgrade=True) as ix:
        fill(ix)
    (home / "sql").mkdir(parents=True)
    old, recent = home / "sql" / ("0" * 64 + ".json"), home / "sql" / ("1" * 64 + ".json")
    for p in (old, recent):
        p.write_text("{}")
    os.utime(old, (1, 1))
    assert _ls(home, "--limit", "1")[1].startswith("RC 0 True")
    assert sorted(p.name for p in (home / "sql").iterdir()) == sorted(
        [recent.name, f"{code_digest()}.json"])
