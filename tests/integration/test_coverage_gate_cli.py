"""`neffcache coverage NAME|FILE --fingerprint KEY|host --check` (a CI gate) and
`neffcache fingerprint --explain FINGERPRINT_KEY`, on the embedded index."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from neffcache.cli import run
from neffcache.fingerprint import collect_fingerprint
from neffcache.index import open_index
from neffcache.index.matrices import register_matrix
from neffcache.matrix import parse_matrix
from tests.support.ops_seed import matrix_text, sdk_fingerprint
from tests.unit.test_index_factories import make_manifest


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    code = run(list(args))
    out, err = capsys.readouterr()
    return code, json.loads(out) if "--json" in args and out else out, err


@pytest.fixture
def seeded(neffcache_home: Path) -> tuple[str, str, str]:
    """Matrix "prod" (3 cells) registered: fingerprint 1 has every cell, 2 has one."""
    text = matrix_text("prod", shapes=3)
    m = parse_matrix(text, "prod.toml")
    fp1, fp2 = sdk_fingerprint(1), sdk_fingerprint(2)
    with open_index(f"sqlite:///{neffcache_home / 'index.db'}", auto_upgrade=True) as ix:
        register_matrix(ix, m, text)
        ix.record_entries([make_manifest(c, fp1) for c in m.cells]
                          + [make_manifest(m.cells[0], fp2)], "file:///s")
    return fp1.key, fp2.key, m.cells[1].id


def test_a_registered_matrix_by_name_and_one_fingerprint_column(
        capsys: pytest.CaptureFixture[str], seeded: tuple[str, str, str]) -> None:
    fp1, fp2, _ = seeded
    code, doc, err = cli(capsys, "coverage", "prod", "--fingerprint", fp2[:12], "--json")
    assert code == 0, err
    assert doc["matrix"] == "prod" and doc["here"] is None
    assert [(f["key"], f["ready"], f["missing"]) for f in doc["fingerprints"]] == [(fp2, 1, 2)]
    assert len(doc["rows"]) == 3 and "check" not in doc


def test_check_passes_for_a_covered_fingerprint_and_fails_with_exit_3_otherwise(
        capsys: pytest.CaptureFixture[str], seeded: tuple[str, str, str]) -> None:
    fp1, fp2, missing_cell = seeded
    code, doc, err = cli(capsys, "coverage", "prod", "--fingerprint", fp1, "--check", "--json")
    assert (code, doc["check"]) == (0, {"ok": True, "not_ready": []}), err
    code, doc, err = cli(capsys, "coverage", "prod", "--fingerprint", fp2, "--check", "--json")
    assert code == 3 and doc["check"]["ok"] is False
    assert missing_cell in {r["cell_id"] for r in doc["check"]["not_ready"]}
    assert "not ready" in err and err.count("\n") <= 3
    code, _, err = cli(capsys, "coverage", "prod", "--fingerprint", fp1, "--fingerprint", fp2,
                       "--check")
    assert code == 3


def test_check_defaults_to_this_hosts_fingerprint(
        capsys: pytest.CaptureFixture[str], seeded: tuple[str, str, str]) -> None:
    code, doc, _ = cli(capsys, "coverage", "prod", "--check", "--json")
    here = collect_fingerprint("neuron", os.environ).key
    assert code == 3 and doc["here"] == here
    assert {r["fingerprint_key"] for r in doc["check"]["not_ready"]} == {here}


def test_check_of_a_fingerprint_nothing_was_built_for_exits_3(
        capsys: pytest.CaptureFixture[str], seeded: tuple[str, str, str]) -> None:
    new = sdk_fingerprint(7).key  # well formed, never indexed
    code, doc, err = cli(capsys, "coverage", "prod", "--fingerprint", new, "--check", "--json")
    assert code == 3, err
    assert "not ready" in err and doc["check"]["ok"] is False
    assert {r["fingerprint_key"] for r in doc["check"]["not_ready"]} == {new}
    code, out, err = cli(capsys, "coverage", "prod", "--fingerprint", new)
    assert code == 0 and new[:12] in out and "missing" in out, err


def test_unknown_names_and_keys_are_one_line_usage_errors(
        capsys: pytest.CaptureFixture[str], seeded: tuple[str, str, str]) -> None:
    code, _, err = cli(capsys, "coverage", "nope")
    assert code == 2 and "no matrix of that name is registered" in err
    code, _, err = cli(capsys, "coverage", "prod", "--fingerprint", "ffffffffffff")
    assert code == 2 and "--fingerprint ffffffffffff" in err and "full 64-hex key" in err
    code, _, err = cli(capsys, "coverage", "prod", "--fingerprint", "x" * 64, "--check")
    assert code == 2 and "--fingerprint" in err


def test_explain_accepts_a_fingerprint_key(capsys: pytest.CaptureFixture[str],
                                           seeded: tuple[str, str, str]) -> None:
    fp1, _, _ = seeded
    code, doc, err = cli(capsys, "fingerprint", "--backend", "neuron", "--explain", fp1[:12],
                         "--json")
    assert code == 0, err
    assert doc["there"] == fp1 and doc["entry_key"] is None and doc["match"] is False
    assert "version.neuronx-cc" in {d["field"] for d in doc["differences"]}
