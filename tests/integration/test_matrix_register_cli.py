"""`neffcache matrix register|ls|show` through the CLI on the embedded index and on the real
PostgreSQL: history, idempotence, JSON contract, exit codes; and `serve`'s help and bind
errors."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from neffcache.cli import COMMANDS, run
from neffcache.index import open_index
from neffcache.index.matrices import registered_cells
from neffcache.matrix import parse_matrix
from tests.support.coverage import coverage_of
from tests.support.ops_seed import matrix_text


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def as_json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    code, out, err = cli(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_register_ls_show_with_history(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                       neffcache_home: Path) -> None:
    f = tmp_path / "prod.toml"
    f.write_text(matrix_text("prod", shapes=2), encoding="utf-8")
    first = as_json(capsys, "matrix", "register", str(f))
    assert {k: first[k] for k in ("name", "version", "cells", "backend", "current", "changed")} \
        == {"name": "prod", "version": 1, "cells": 2, "backend": "neuron", "current": True,
            "changed": True}
    f.write_text("# reformatted\n" + matrix_text("prod", shapes=2), encoding="utf-8")
    code, out, _ = cli(capsys, "matrix", "register", str(f))
    assert code == 0 and out.startswith("unchanged: prod version 1 (2 cells")
    v2_text = matrix_text("prod", shapes=5)
    f.write_text(v2_text, encoding="utf-8")
    code, out, err = cli(capsys, "matrix", "register", str(f))  # other content, same name
    assert code == 2 and not out and err.startswith("Error: matrix 'prod' is registered")
    assert first["sha256"][:12] in err and str(f) in err and "--replace" in err
    second = as_json(capsys, "matrix", "register", str(f), "--replace")
    assert (second["version"], second["cells"], second["changed"]) == (2, 5, True)
    assert second["sha256"] != first["sha256"]

    listed = as_json(capsys, "matrix", "ls")
    assert [(m["name"], m["version"]) for m in listed] == [("prod", 2)]
    code, out, _ = cli(capsys, "matrix", "ls")
    assert code == 0 and out.splitlines()[0].split()[:3] == ["NAME", "VERSION", "CELLS"]
    history = as_json(capsys, "matrix", "show", "prod", "--versions")
    assert [(v["version"], v["current"]) for v in history] == [(1, False), (2, True)]
    code, out, _ = cli(capsys, "matrix", "show", "prod")
    assert code == 0 and out == v2_text
    assert as_json(capsys, "matrix", "show", "prod", "--version", "1")["cells"] == 2

    # The expected set is in the index: coverage needs no file.
    with open_index(f"sqlite:///{neffcache_home / 'index.db'}", auto_upgrade=False) as ix:
        cells = registered_cells(ix, "prod")
        assert [c.id for c in cells] == [c.id for c in parse_matrix(v2_text).cells]
        assert {r.status for r in coverage_of(ix, cells).rows} <= {"missing"}


def test_register_errors_name_the_file(capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path) -> None:
    code, _, err = cli(capsys, "matrix", "register", str(tmp_path / "nope.toml"))
    assert code == 2 and f"{tmp_path / 'nope.toml'}: matrix file not found" in err
    bad = tmp_path / "bad.toml"
    bad.write_text('backend = "neuron"\n', encoding="utf-8")
    code, _, err = cli(capsys, "matrix", "register", str(bad))
    assert code == 2 and "bad.toml: pipelines" in err
    code, _, err = cli(capsys, "matrix", "show", "unknown")
    assert code == 1 and "matrix 'unknown': not registered" in err
    assert err.count("\n") <= 2


@pytest.mark.postgres
def test_register_named_on_postgres(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                    pg_new_database: Callable[[], str]) -> None:
    url = pg_new_database()
    with open_index(url, auto_upgrade=True):
        pass  # a shared Postgres is upgraded by `neffcache db upgrade`, not by register
    f = tmp_path / "m.toml"
    f.write_text(matrix_text("m", shapes=3), encoding="utf-8")
    doc = as_json(capsys, "matrix", "register", str(f), "--name", "fleet", "--index", url)
    assert (doc["name"], doc["version"], doc["cells"]) == ("fleet", 1, 3)
    again = as_json(capsys, "matrix", "register", str(f), "--name", "fleet", "--index", url)
    assert (again["version"], again["changed"]) == (1, False)


@pytest.mark.parametrize("args", [["matrix", "--help"], ["matrix", "register", "--help"],
                                  ["matrix", "ls", "--help"], ["matrix", "show", "--help"],
                                  ["serve", "--help"]])
def test_help_has_examples(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    code, out, _ = cli(capsys, *args)
    assert code == 0 and "Examples:" in out and "Exit codes" in out


def test_commands_are_registered() -> None:
    assert {"matrix", "serve"} <= set(COMMANDS)


def test_serve_warns_off_loopback_and_reports_a_bind_failure(
        capsys: pytest.CaptureFixture[str]) -> None:
    # 192.0.2.1 is TEST-NET-1: never assigned to this host, so the bind fails before
    # anything listens; the warning is printed first.
    code, _, err = cli(capsys, "serve", "--host", "192.0.2.1", "--port", "8077")
    assert "warning: binding 192.0.2.1" in err
    assert code == 2 and "--host 192.0.2.1 --port 8077: cannot listen" in err


def test_serve_refuses_an_index_it_cannot_use(capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path) -> None:
    code, _, err = cli(capsys, "serve", "--index", f"sqlite:///{tmp_path / 'none.db'}")
    assert code == 7 and "neffcache db upgrade" in err
