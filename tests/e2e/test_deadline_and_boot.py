"""Boot-path behaviour: deadline, no index configured, import cost, fingerprint mismatch."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import CELL_64, Cli, restored_tree, split_url, temps_under
from tests.support.synthetic import make_neff_cache

HEAVY = ("torch", "diffusers", "transformers", "sqlalchemy", "alembic", "boto3", "botocore")
RESTORE_PATH = ("neffcache.cli", "neffcache.cli.restore", "neffcache.restore",
                "neffcache.restore.session", "neffcache.store",
                "neffcache.reports", "neffcache.report_send",
                "neffcache.restore.run", "neffcache.restore.local", "neffcache.restore.apply",
                "neffcache.restore.fetch")
# Not heavy, but a boot pays for them: http.client parses headers with the email package.
NOT_ON_BOOT = ("http.client", "email")


def _imported(stderr: str) -> set[str]:
    """Top-level module names from `python -X importtime` output."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


def test_cli_and_restore_import_nothing_heavy() -> None:
    code = (f"import sys, {', '.join(RESTORE_PATH)}\n"
            f"print(*sorted(set({NOT_ON_BOOT!r}) & set(sys.modules)))")
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code],
                          capture_output=True, text=True, check=True)
    assert _imported(proc.stderr) & set(HEAVY) == set()
    assert "neffcache" in _imported(proc.stderr)
    assert proc.stdout.split() == []


def test_restore_help_imports_nothing_heavy() -> None:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "neffcache.cli", "restore",
                           "--help"], capture_output=True, text=True, check=True)
    assert "--report-to" in proc.stdout
    assert _imported(proc.stderr) & {*HEAVY, "botocore"} == set()


@pytest.mark.s3
def test_deadline_gives_partial_result_and_no_temp_files(cli: Cli, matrix: Path,
                                                         tmp_path: Path) -> None:
    cache = make_neff_cache(tmp_path / "neff", seed=31, count=300, large=2)
    assert cli("push", "--matrix", str(matrix), "--cell", CELL_64,
               "--root", f"neff={cache.root}").code == 0
    out = tmp_path / "out"
    r = cli("restore", str(matrix), "--to", str(out), "--cells", CELL_64, "--deadline",
            "0.001", "--json")
    assert r.code == 3, r.stderr
    doc = r.json
    assert doc["deadline_hit"] and doc["status"] == "partial"
    assert doc["cells_restored"] == []
    assert "deadline" in r.stderr
    assert temps_under(out) == []
    # Whatever was installed is complete and correct; a rerun without deadline finishes.
    partial = restored_tree(out / "neff")
    assert all(cache.files[k] == v for k, v in partial.items())
    done = cli("restore", str(matrix), "--to", str(out), "--cells", CELL_64, "--json")
    assert done.code == 0
    assert done.json["files_fetched"] + done.json["files_skipped"] == 300
    assert restored_tree(out / "neff") == cache.files


@pytest.mark.s3
def test_restore_with_no_index_configured(cli: Cli, matrix: Path, tmp_path: Path,
                                          e2e_env: dict[str, str]) -> None:
    cache = make_neff_cache(tmp_path / "neff", seed=32, count=20, large=0)
    build_home = tmp_path / "build-home"
    assert cli("push", "--matrix", str(matrix), "--cell", CELL_64, "--root",
               f"neff={cache.root}", env={"NEFFCACHE_HOME": str(build_home)}).code == 0
    boot_home = tmp_path / "boot-home"  # a fresh instance: empty, no index, no config
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "neffcache.cli", "restore", str(matrix),
         "--to", str(tmp_path / "out"), "--cells", CELL_64],
        env=dict(e2e_env, NEFFCACHE_HOME=str(boot_home)),
        capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert restored_tree(tmp_path / "out" / "neff") == cache.files
    assert not (boot_home / "index.db").exists()
    loaded = _imported(proc.stderr)
    assert "sqlalchemy" not in loaded and "alembic" not in loaded and "torch" not in loaded


@pytest.mark.s3
def test_entries_only_for_another_environment_exit_5_and_explain(
        cli: Cli, matrix: Path, tmp_path: Path) -> None:
    cache = make_neff_cache(tmp_path / "neff", seed=33, count=5, large=0)
    built = cli("push", "--matrix", str(matrix), "--cell", CELL_64, "--root",
                f"neff={cache.root}", "--json", env={"NEURON_CC_FLAGS": "-O1 --lnc=2"})
    assert built.code == 0
    here = {"NEURON_CC_FLAGS": "--lnc=2 -O2"}
    r = cli("restore", str(matrix), "--to", str(tmp_path / "out"), "--json", env=here)
    assert r.code == 5, r.stderr
    assert r.json["cells_elsewhere"] == {CELL_64: [built.json["fingerprint_key"]]}
    assert r.json["cells_restored"] == []
    hint = [line for line in r.stderr.splitlines() if line.startswith("Hint: ")][0]
    # a command that runs as printed: the store the restore read names itself
    words = shlex.split(hint.removeprefix("Hint: "))
    assert words[:4] == ["neffcache", "fingerprint", "--explain", built.json["entry_key"]]
    assert words[4:] == ["--store", words[5]] and words[5].startswith("s3://")
    same_order = cli("restore", str(matrix), "--to", str(tmp_path / "out2"), "--cells",
                     CELL_64, env={"NEURON_CC_FLAGS": "--lnc=2   -O1"})
    assert same_order.code == 0, same_order.stderr  # flag order does not matter

    explain = cli("fingerprint", "--explain", built.json["entry_key"][:12], "--json", env=here)
    assert explain.code == 0, explain.stderr
    fields = {d["field"]: (d["here"], d["there"]) for d in explain.json["differences"]}
    assert fields == {"cc_flags": ("--lnc=2 -O2", "--lnc=2 -O1"), "opt_level": ("2", "1")}
    text = cli("fingerprint", "--explain", built.json["entry_key"], env=here)
    assert text.code == 0 and "2 field(s) differ" in text.stdout


@pytest.mark.s3
def test_restore_report_goes_to_the_store_and_reindex_puts_it_in_the_index(
        cli: Cli, matrix: Path, tmp_path: Path, s3: Any, e2e_env: dict[str, str]) -> None:
    import sqlite3

    cache = make_neff_cache(tmp_path / "neff", seed=34, count=5, large=0)
    assert cli("push", "--matrix", str(matrix), "--cell", CELL_64,
               "--root", f"neff={cache.root}").code == 0
    db = tmp_path / "team.db"
    index = {"NEFFCACHE_INDEX": f"sqlite:///{db}"}
    assert cli("db", "upgrade", env=index).code == 0
    # A dead index named on the instance is never contacted: no warning, same result.
    dead = {"NEFFCACHE_INDEX": "postgresql+psycopg://nobody@127.0.0.1:1/none"}
    ok = cli("restore", str(matrix), "--to", str(tmp_path / "a"), "--cells", CELL_64, env=dead)
    assert ok.code == 0 and "warning" not in ok.stderr, ok.stderr
    assert restored_tree(tmp_path / "a" / "neff") == cache.files
    bucket, prefix = split_url(e2e_env["NEFFCACHE_STORE"])
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/reports/")
    assert [o["Key"].endswith(".json") for o in listed["Contents"]] == [True]

    assert cli("reindex", env=index).code == 0
    rows = sqlite3.connect(db).execute(
        "select files_fetched, exit_code, matrix from restore_reports").fetchall()
    assert rows == [(5, 0, str(matrix))]
