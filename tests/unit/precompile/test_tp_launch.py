"""Tensor-parallel cells: the torchrun command line (pure) and the rank checks a worker makes."""

from __future__ import annotations

import pytest

from neffcache.backends import INDUCTOR, NEURON
from neffcache.errors import UsageError, WorkerError
from neffcache.matrix import Cell
from neffcache.precompile.worker import Rank, check_rank, launch_command, torchrun_command


def _cell(tp: int) -> Cell:
    return Cell("klein", "diffusers:Flux2KleinPipeline", "m", "main", "bfloat16", "compile",
                ("transformer",), 1024, 1024, 1, tp)


def test_torchrun_command_line() -> None:
    worker = "neffcache.precompile.worker"
    assert torchrun_command("/py", 4, worker, ["--spec", "/w/spec.json"]) == [
        "/py", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4",
        "-m", "neffcache.precompile.worker", "--spec", "/w/spec.json"]
    with pytest.raises(UsageError):
        torchrun_command("/py", 0, "neffcache.precompile.worker", [])


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_tp_cells_on_neuron_run_one_rank_per_degree_under_torchrun(tp: int) -> None:
    cmd = launch_command("/w/spec.json", _cell(tp), NEURON, python="/py")
    assert cmd == torchrun_command("/py", tp, "neffcache.precompile.worker",
                                   ["--spec", "/w/spec.json"])
    assert f"--nproc_per_node={tp}" in cmd and "--standalone" in cmd


def test_tp1_and_backends_without_tensor_parallel_run_one_process() -> None:
    single = ["/py", "-m", "neffcache.precompile.worker", "--spec", "s.json"]
    assert launch_command("s.json", _cell(1), NEURON, python="/py") == single
    assert launch_command("s.json", _cell(2), INDUCTOR, python="/py") == single


def test_rank_from_torchrun_environment() -> None:
    assert Rank.from_environ({}) == Rank(0, 1, 0)
    r = Rank.from_environ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "3"})
    assert (r.rank, r.world_size, r.leader) == (3, 4, False)
    with pytest.raises(WorkerError):
        Rank.from_environ({"RANK": "x"})


def test_check_rank() -> None:
    check_rank(_cell(1), NEURON, Rank())
    check_rank(_cell(2), NEURON, Rank(1, 2, 1))
    with pytest.raises(WorkerError, match="WORLD_SIZE=1"):
        check_rank(_cell(2), NEURON, Rank())  # tp=2 started without torchrun
    with pytest.raises(WorkerError, match="not supported by the inductor backend"):
        check_rank(_cell(2), INDUCTOR, Rank(0, 2, 0))
