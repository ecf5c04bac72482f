"""Pure parts of precompile, the worker and the hit check: plans, specs, commands, verdicts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from neffcache.backends import INDUCTOR, NEURON, cache_environment, compile_call
from neffcache.demo import parse_shapes, render_demo_matrix
from neffcache.errors import UsageError, WorkerError
from neffcache.fingerprint import build_fingerprint
from neffcache.manifest import entry_key
from neffcache.matrix import Cell, parse_matrix
from neffcache.precompile.hit_check import (
    CompileActivity,
    FileDiff,
    FileState,
    diff_files,
    judge_activity,
)
from neffcache.precompile.launch import verdict_of, worker_environment
from neffcache.precompile.plan import SKIP, WARM, plan_precompile, resolve_model
from neffcache.precompile.session import parse_shard
from neffcache.precompile.worker import (
    WorkerSpec,
    build_call_kwargs,
    check_environment,
    launch_command,
)

FP = build_fingerprint("inductor", {"version.torch": "2.13.0"})


def _cell(h: int = 64, w: int = 64, tp: int = 1, mode: str = "compile") -> Cell:
    return Cell("tiny", "diffusers:Flux2KleinPipeline", "./tiny", "main", "float32", mode,
                ("transformer",), h, w, 1, tp)


def test_plan_skips_cells_whose_entry_exists_unless_forced() -> None:
    a, b = _cell(64, 64), _cell(96, 128)
    plans = plan_precompile([a, b], FP, {entry_key(a, FP)})
    assert [(p.cell.id, p.ready, p.action) for p in plans] == [
        (a.id, True, SKIP), (b.id, False, WARM)]
    assert [p.action for p in plan_precompile([a, b], FP, {entry_key(a, FP)}, force=True)] == \
        [WARM, WARM]
    other = build_fingerprint("inductor", {"version.torch": "2.14.0"})
    assert [p.action for p in plan_precompile([a], other, {entry_key(a, FP)})] == [WARM]


def test_resolve_model(tmp_path: Path) -> None:
    (tmp_path / "tiny").mkdir()
    matrix = str(tmp_path / "m.toml")
    assert resolve_model("./tiny", matrix) == str((tmp_path / "tiny").resolve())
    assert resolve_model("../x", str(tmp_path / "sub" / "m.toml")) == str(tmp_path / "x")
    assert resolve_model(str(tmp_path / "tiny"), matrix) == str(tmp_path / "tiny")
    assert resolve_model("black-forest-labs/FLUX.2-klein-4B", matrix) == \
        "black-forest-labs/FLUX.2-klein-4B"


def test_call_kwargs_cell_shape_always_wins() -> None:
    cell = Cell("p", "m:C", "x", "main", "bfloat16", "compile", ("transformer",), 512, 768, 2, 1)
    kw = build_call_kwargs(cell, 1, {"guidance_scale": 1.0, "height": 9, "prompt": "hi"})
    assert kw == {"prompt": "hi", "num_inference_steps": 1, "guidance_scale": 1.0,
                  "height": 512, "width": 768, "num_images_per_prompt": 2}


def test_compile_call_per_mode() -> None:
    assert compile_call(INDUCTOR, "eager") is None
    assert compile_call(NEURON, "compile") == (
        "compile", {"backend": "neuron", "fullgraph": True, "dynamic": False})
    assert compile_call(INDUCTOR, "regional") == (
        "compile_repeated_blocks", {"backend": "inductor", "fullgraph": True, "dynamic": False})
    with pytest.raises(UsageError):
        compile_call(INDUCTOR, "aot")


def test_launch_command_single_process_and_torchrun_hook() -> None:
    assert launch_command("/s.json", _cell(), INDUCTOR, python="py") == [
        "py", "-m", "neffcache.precompile.worker", "--spec", "/s.json"]
    cmd = launch_command("/s.json", _cell(tp=4), NEURON, python="py")
    assert cmd[:5] == ["py", "-m", "torch.distributed.run", "--standalone",
                       "--nproc_per_node=4"]
    assert cmd[5:] == ["-m", "neffcache.precompile.worker", "--spec", "/s.json"]
    assert launch_command("/s", _cell(), NEURON)[0] == sys.executable


def test_worker_spec_round_trip() -> None:
    spec = WorkerSpec(cell=_cell(), backend="inductor", model="/m", base="/b",
                      result_path="/r.json", warmup_steps=2,
                      call_kwargs=(("guidance_scale", 1.0),), seed=3)
    assert WorkerSpec.from_json(spec.to_json()) == spec
    with pytest.raises(UsageError, match="schema_version"):
        WorkerSpec.from_json({**spec.to_json(), "schema_version": 99})


def test_worker_environment_points_every_root_and_wins_over_inherited() -> None:
    env = worker_environment(NEURON, Path("/w/c1"), {"TORCH_NEURONX_NEFF_CACHE_DIR": "/tmp/x",
                                                     "KEEP": "1"}, {"OMP_NUM_THREADS": "1"})
    assert env["TORCH_NEURONX_NEFF_CACHE_DIR"] == "/w/c1/neff"
    assert env["TORCH_NEURONX_HLO_CACHE_DIR"] == "/w/c1/hlo"
    assert env["TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR"] == "/w/c1/neff-locks"
    assert env["KEEP"] == "1" and env["OMP_NUM_THREADS"] == "1"
    assert cache_environment(INDUCTOR, "/w") == {"TORCHINDUCTOR_CACHE_DIR": "/w/inductor",
                                                 "TMPDIR": "/w/pch"}


def test_worker_refuses_an_environment_not_pointing_at_its_roots() -> None:
    good = cache_environment(INDUCTOR, "/w")
    assert check_environment(INDUCTOR, "/w", good) == good
    with pytest.raises(WorkerError, match="TORCHINDUCTOR_CACHE_DIR"):
        check_environment(INDUCTOR, "/w", {**good, "TORCHINDUCTOR_CACHE_DIR": "/tmp/x"})
    with pytest.raises(WorkerError, match="TMPDIR"):
        check_environment(INDUCTOR, "/w", {"TORCHINDUCTOR_CACHE_DIR": "/w/inductor"})


def test_inductor_captures_cache_and_precompiled_headers_only() -> None:
    assert INDUCTOR.captures("inductor", "fxgraph/ab/fabc/tmpq2x")  # a hash starting "tmp"
    assert INDUCTOR.captures("pch", "torchinductor_root/precompiled_headers/c1.h.gch")
    assert not INDUCTOR.captures("pch", "torchinductor_root/precompiled_headers/locks/c1.lock")
    assert not INDUCTOR.captures("pch", "tmpa1b2/header.i")  # other temp files
    assert not INDUCTOR.captures("pch", "something-else.bin")
    assert not INDUCTOR.captures("inductor", "locks/c1.lock")
    assert not INDUCTOR.captures("inductor", "ab/.1234.5678.tmp")
    assert NEURON.captures("neff", "ab/cd/abcd0123456789abcdef0123456789ab.neff")
    assert not NEURON.captures("neff", "ab/cd/x.neff.123.tmp")


def _state(path: str, size: int = 1, mtime: int = 1, root: str = "inductor") -> FileState:
    return FileState(root, path, size, mtime)


def test_diff_files_new_changed_removed() -> None:
    d = diff_files([_state("a"), _state("b"), _state("c")],
                   [_state("a"), _state("b", size=2), _state("d")])
    assert d == FileDiff(new=("inductor/d",), changed=("inductor/b",), removed=("inductor/c",))


def test_a_clean_hit_is_not_compiled_even_with_dynamo_tracing() -> None:
    activity = CompileActivity.from_json({
        "counters": {"inductor": {"fxgraph_cache_hit": 1},
                     "aot_autograd": {"autograd_cache_hit": 1},
                     "stats": {"unique_graphs": 1, "calls_captured": 540}},
        "cpp_outputs": ["tmpx/header.i"], "cpp_probe": True})  # preprocessing only
    v = judge_activity(diff_files([_state("a")], [_state("a")]), activity)
    assert not v.compiled and v.reasons == ()
    assert dict(v.hits)["inductor.fxgraph_cache_hit"] == 1
    assert v.summary().startswith("no ")


@pytest.mark.parametrize(("files", "activity", "reason"), [
    (([], [_state("x")]), {}, "1 new file"),
    (([_state("x")], [_state("x", mtime=2)]), {}, "rewritten"),
    (([], []), {"counters": {"inductor": {"fxgraph_cache_miss": 1}}},
     "inductor.fxgraph_cache_miss = 1"),
    (([], []), {"counters": {"aot_autograd": {"autograd_cache_miss": 2}}},
     "autograd_cache_miss = 2"),
    # hit counters say "hit" while a kernel library is rebuilt: still compiled
    (([], []), {"counters": {"inductor": {"fxgraph_cache_hit": 1}},
                "cpp_outputs": ["pch/torchinductor_root/precompiled_headers/c.h.gch"]},
     "1 C++ compile"),
])
def test_any_evidence_of_work_means_compiled(files: tuple[list[FileState], list[FileState]],
                                              activity: dict, reason: str) -> None:
    v = judge_activity(diff_files(*files), CompileActivity.from_json(activity))
    assert v.compiled
    assert any(reason in r for r in v.reasons), v.reasons
    assert v.summary().startswith("YES")


def test_verdict_of_a_worker_result() -> None:
    result = {"files_before": [["inductor", "a", 1, 1]],
              "files_after": [["inductor", "a", 1, 1], ["pch", "p/x.h.gch", 5, 2]],
              "activity": {"counters": {}, "cpp_outputs": [], "cpp_probe": True}}
    v = verdict_of(result)
    assert v.compiled and v.new_files == 1


def test_parse_shard_and_shapes() -> None:
    assert parse_shard(None) is None
    assert parse_shard("1/4") == (1, 4)
    with pytest.raises(UsageError, match="I/N"):
        parse_shard("1-4")
    assert parse_shapes("64x64, 96x128") == ("64x64", "96x128")
    with pytest.raises(UsageError, match="--shapes"):
        parse_shapes("64")


def test_demo_matrix_template_parses_with_its_shapes_replaced() -> None:
    from importlib import resources

    template = resources.files("neffcache.demo").joinpath("matrix.toml").read_text("utf-8")
    default = parse_matrix(template)
    assert default.backend == "inductor" and len(default.cells) == 2
    assert {c.mode for c in default.cells} == {"compile"}
    one = parse_matrix(render_demo_matrix(template, ["128x128"]))
    assert [c.id for c in one.cells] == ["tiny-flux2-klein/compile/128x128/b1/tp1"]
    assert one.cells[0].model == "./tiny-flux2-klein"


@pytest.mark.parametrize("name", ["flux2-klein-4b-trn2.toml", "tiny-demo.toml"])
def test_example_matrices_parse(name: str) -> None:
    from importlib import resources

    text = resources.files("neffcache").joinpath("examples", name).read_text("utf-8")
    matrix = parse_matrix(text, source=name)
    assert matrix.cells
    assert all(c.pipeline_class == "diffusers:Flux2KleinPipeline" for c in matrix.cells)


class _Tty:
    def __init__(self, tty: bool) -> None:
        self.text = ""
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty

    def write(self, s: str) -> None:
        self.text += s

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("tty", [False, True])
def test_progress_display_lines_and_terminal_status(tty: bool) -> None:
    from neffcache.cli.precompile import ProgressDisplay

    stream = _Tty(tty)
    with ProgressDisplay(2, stream=stream) as display:  # type: ignore[arg-type]
        display(("start", "a/compile/64x64/b1/tp1", "warming"))
        display(("done", "a/compile/64x64/b1/tp1", "published"))
        display(("failed", "b/compile/64x64/b1/tp1", "boom (exit 1)"))
    lines = [ln.split("\r\x1b[K")[-1] for ln in stream.text.split("\n") if ln.strip()]
    assert any("done  a/compile/64x64/b1/tp1  published" in ln for ln in lines)
    assert any("failed  b/compile/64x64/b1/tp1  boom (exit 1)" in ln for ln in lines)
    assert ("running: a/compile/64x64/b1/tp1" in stream.text) == tty
    assert ("\x1b[K" in stream.text) == tty


def test_neuron_overrides() -> None:
    from neffcache.precompile.session import neuron_overrides

    assert neuron_overrides("neuron", "trn2", True) == {
        "NEURON_PLATFORM_TARGET_OVERRIDE": "trn2", "TORCH_NEURONX_COMPILE_ONLY": "1"}
    assert neuron_overrides("inductor", None, False) == {}
    with pytest.raises(UsageError, match="neuron backend"):
        neuron_overrides("inductor", "trn2", False)
