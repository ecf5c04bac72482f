"""`neffcache db upgrade|current` and the schema rules, through the CLI, on the real
PostgreSQL and on SQLite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect

from neffcache.cli import run
from neffcache.index import SCHEMA_REVISION

MATRIX = """
backend = "inductor"
[[pipelines]]
name = "tiny"
class = "diffusers:Flux2KleinPipeline"
model = "/models/tiny"
mode = "compile"
shapes = ["64x64"]
"""


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "neffcache.cli", *args], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=120)


@pytest.mark.postgres
def test_db_upgrade_on_postgres_via_the_cli(pg_new_database: Callable[[], str]) -> None:
    url = pg_new_database()
    done = cli("db", "upgrade", "--index", url, "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["from"], doc["to"], doc["changed"]) == (None, SCHEMA_REVISION, True)
    engine = create_engine(url)
    assert {"entries", "cells", "fingerprints", "cell_failures"} <= set(
        inspect(engine).get_table_names())
    engine.dispose()

    again = cli("db", "upgrade", env={"NEFFCACHE_INDEX": url})
    assert again.returncode == 0 and "already at revision" in again.stdout
    current = cli("db", "current", "--index", url, "--json", "--check")
    assert current.returncode == 0
    assert json.loads(current.stdout)["up_to_date"] is True


@pytest.mark.postgres
@pytest.mark.parametrize("command", [["ls"], ["coverage", "{matrix}"], ["reindex"]])
def test_outdated_postgres_schema_is_refused_with_exit_7(
        pg_new_database: Callable[[], str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        command: list[str]) -> None:
    url = pg_new_database()  # empty: never upgraded
    matrix = tmp_path / "m.toml"
    matrix.write_text(MATRIX)
    argv = [a.format(matrix=matrix) for a in command] + ["--index", url]
    assert run(argv) == 7
    err = capsys.readouterr().err
    assert "no neffcache schema" in err and "Hint: neffcache db upgrade" in err
    engine = create_engine(url)
    assert inspect(engine).get_table_names() == []  # nothing was created behind our back
    engine.dispose()


def test_db_current_check_on_a_missing_sqlite_file(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'nope.db'}"
    assert run(["db", "current", "--index", url, "--check"]) == 7
    captured = capsys.readouterr()
    assert "(empty)" in captured.out and "Hint: neffcache db upgrade" in captured.err
    assert not (tmp_path / "nope.db").exists()


def test_explicit_sqlite_index_is_not_created_by_ls(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'explicit.db'}"
    assert run(["ls", "--index", url]) == 7
    assert run(["db", "upgrade", "--index", url]) == 0
    assert run(["ls", "--index", url, "--json"]) == 0


def test_unreachable_index_exits_6_without_the_password(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    assert run(["ls", "--index", "postgresql+psycopg://neff:hunter2@127.0.0.1:1/neff"]) == 6
    err = capsys.readouterr().err
    assert err.startswith("Error: index postgresql+psycopg://neff:***@127.0.0.1:1/neff")
    assert "hunter2" not in err and len(err.strip().splitlines()) == 1
