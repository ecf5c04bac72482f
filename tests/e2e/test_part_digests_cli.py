"""A manifest whose file over 24 MiB has no part digests is refused through the CLI on a local
store: restore exits 4 and installs nothing; verify reports it as a manifest problem."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.e2e.conftest import CELL_64, MATRIX

BIG = (24 << 20) + 4097  # over the 24 MiB above which part digests are required


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NEFFCACHE_INSTANCE_TYPE="trn2.48xlarge",
               NEFFCACHE_HOME=str(tmp_path / "home"), NEFFCACHE_STORE=str(tmp_path / "store"))
    return subprocess.run([sys.executable, "-m", "neffcache.cli", *args], env=env,
                          capture_output=True, text=True, timeout=300)


def test_restoring_an_entry_lacking_part_digests_exits_4_and_installs_nothing(
        tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(MATRIX, encoding="utf-8")
    src = tmp_path / "neff"
    (src / "ab").mkdir(parents=True)
    (src / "ab" / "graph.neff").write_bytes(os.urandom(BIG))
    (src / "op.neff").write_bytes(b"a small file")
    push = _cli(tmp_path, "push", "--matrix", str(matrix), "--cell", CELL_64, "--root",
                f"neff={src}", "--json")
    assert push.returncode == 0, push.stderr
    key = json.loads(push.stdout)["entry_key"]
    mpath = tmp_path / "store" / "manifests" / f"{key}.json"
    doc = json.loads(mpath.read_bytes())
    doc.pop("manifest_sha256", None)  # the field checks are under test, not the digest
    assert [len(p["digests"]) for p in doc["parts"]] == [2]  # publish wrote them
    good = _cli(tmp_path, "restore", str(matrix), "--to", str(tmp_path / "good"), "--cells",
                CELL_64)
    assert good.returncode == 0, good.stderr  # the control: the entry as published restores

    del doc["parts"]  # as a manifest from before part digests were required would be
    mpath.chmod(0o644)
    mpath.write_text(json.dumps(doc), encoding="utf-8")

    out = tmp_path / "out"
    r = _cli(tmp_path, "restore", str(matrix), "--to", str(out), "--cells", CELL_64, "--json")
    assert r.returncode == 4, r.stderr
    assert f"manifests/{key}.json" in r.stderr and "neff/ab/graph.neff" in r.stderr
    assert "has no part digests" in r.stderr
    assert not [p for p in out.rglob("*") if p.is_file() and p.name.endswith(".neff")]
    assert [p.name for p in (tmp_path / "good").rglob("*.neff")] != []  # where they would be

    v = _cli(tmp_path, "verify", "--json")
    assert v.returncode == 4, v.stderr
    problems = json.loads(v.stdout)["problems"]
    assert [(p["kind"], p["key"]) for p in problems] == [("manifest", f"manifests/{key}.json")]
    assert "neff/ab/graph.neff" in problems[0]["error"]
