"""`neffcache demo` from an empty NEFFCACHE_HOME: build, precompile two shapes, restore as a
fresh instance, and nothing compiles after restore; a rerun reuses everything."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.tiny_home import run_cli, session_demo

pytest.importorskip("diffusers")
pytestmark = pytest.mark.compile

CELLS = ["tiny-flux2-klein/compile/64x64/b1/tp1", "tiny-flux2-klein/compile/96x128/b1/tp1"]


def test_demo_boots_a_fresh_instance_warm(tmp_path_factory: pytest.TempPathFactory) -> None:
    home, first = session_demo(tmp_path_factory)  # an empty home: builds the model too
    assert first.code == 0, first.stderr[-3000:]
    doc = first.doc  # stdout is exactly one JSON document
    assert "[1/4]" in first.stderr and "[4/4]" in first.stderr  # progress on stderr
    assert doc["ok"] is True
    assert doc["restore_exit_code"] == 0
    assert doc["precompile"]["counts"]["published"] == 2
    assert Path(doc["model"]) == home / "demo" / "tiny-flux2-klein"
    cells = doc["cells"]
    assert [c["cell_id"] for c in cells] == CELLS
    for c in cells:
        assert c["compiled_after_restore"] is False, c["evidence"]
        assert c["evidence"]["new_files"] == 0 and c["evidence"]["cpp_compiles"] == 0
        assert c["evidence"]["work_counters"]["inductor.fxgraph_cache_miss"] == 0
        assert c["cold_source"] == "this run"
        assert c["cold_seconds"] > 0 and c["restored_seconds"] > 0 and c["speedup"] > 0
    assert {r["status"] for r in doc["coverage"]["rows"]} == {"ready"}
    assert sorted(doc["restore"]["cells_restored"]) == CELLS


def test_demo_rerun_reuses_model_and_entries(tmp_path_factory: pytest.TempPathFactory,
                                             tmp_path: Path) -> None:
    home, first = session_demo(tmp_path_factory)
    assert first.code == 0, first.stderr[-3000:]
    # A copy of the home, so the shared one stays as the first run left it.
    import shutil

    copy = tmp_path / "home"
    shutil.copytree(home, copy, ignore=shutil.ignore_patterns("instance", "runs"))
    again = run_cli(copy, "demo", "--shapes", "64x64")  # text output
    assert again.code == 0, again.stderr[-3000:]
    out = again.stdout
    assert "COLD FIRST CALL" in out and "RESTORED FIRST CALL" in out and "SPEED-UP" in out
    assert "(entry)" in out  # the cold time was read back from the entry
    assert "ready" in out and "Demo passed" in out
    precompile_step = again.stderr.split("[2/4]")[1].split("[3/4]")[0]
    assert precompile_step.count("skip:") == 1 and "start:" not in precompile_step
