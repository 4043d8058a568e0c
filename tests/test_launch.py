"""The launcher: ranks join one group, results come back in rank order, a failing rank's own
error (whether it was an OOM, the status it names) reaches the caller, and a GPU cell that cannot have its GPUs
says so before starting anything."""

import pytest
import torch
import torch.distributed as dist

from cs336report.distributed.launch import NotEnoughDevices, RankFailed, launch
from cs336report.measure.timing import is_out_of_memory


def _all_reduce_rank(rank, world_size, device, base):
    t = torch.tensor([float(base + rank)], device=device)
    dist.all_reduce(t)
    return {"rank": rank, "sum": t.item(), "env_world": dist.get_world_size()}


def _fail_on_rank_one(rank, world_size, device):
    if rank == 1:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    dist.barrier()  # rank 0 waits here for a rank that never comes
    return rank


def test_ranks_reduce_together_and_return_in_order():
    out = launch(_all_reduce_rank, 3, backend="gloo", args=(10,), timeout_s=60)
    assert [r["rank"] for r in out] == [0, 1, 2]
    assert all(r["sum"] == 10 + 11 + 12 for r in out)
    assert all(r["env_world"] == 3 for r in out)


def test_failing_rank_reports_its_own_error_as_oom():
    with pytest.raises(RankFailed) as info:
        launch(_fail_on_rank_one, 2, backend="gloo", timeout_s=30)
    assert info.value.rank == 1 and info.value.oom
    assert "Tried to allocate 2.00 GiB" in str(info.value)
    assert is_out_of_memory(info.value)


def _parent_and_program(rank, world_size, device):
    import os

    with open("/proc/self/cmdline", "rb") as fh:
        return {"ppid": os.getppid(), "cmdline": fh.read().replace(b"\0", b" ").decode()}


def test_spawned_ranks_are_programs_the_caller_starts_and_forked_ones_are_not():
    # nsys follows a program a traced process starts; a rank forked from the fork server is neither
    import os

    spawned = launch(_parent_and_program, 2, backend="gloo", timeout_s=60, start_method="spawn")
    assert all(r["ppid"] == os.getpid() and "spawn_main" in r["cmdline"] for r in spawned)
    forked = launch(_parent_and_program, 2, backend="gloo", timeout_s=60)
    assert all(r["ppid"] != os.getpid() and "spawn_main" not in r["cmdline"] for r in forked)
    with pytest.raises(ValueError, match="start_method"):
        launch(_parent_and_program, 2, backend="gloo", start_method="fork")


def test_a_cell_profiled_by_nsys_spawns_its_ranks(monkeypatch):
    from cs336report.experiments.ddp_training import train

    seen = []

    def fake_launch(fn, world_size, **kwargs):
        seen.append(kwargs["start_method"])
        raise RuntimeError("stop here")

    monkeypatch.setattr(train, "launch", fake_launch)
    cell = {"variant": "naive", "world_size": 2, "backend": "gloo", "timeout_s": 30}
    for profiler in ("nsys", "torch", None):
        with pytest.raises(RuntimeError, match="stop here"):
            train.run_ddp({**cell, "profiler": profiler} if profiler else cell)
    assert seen == ["spawn", "forkserver", "forkserver"]


def test_nccl_without_enough_gpus_is_refused_before_start():
    needed = torch.cuda.device_count() + 1
    with pytest.raises(NotEnoughDevices, match=f"needs {needed} GPUs"):
        launch(_all_reduce_rank, needed, backend="nccl", args=(0,))


def _not_implemented_on_every_rank(rank, world_size, device):
    from cs336report.student.resolve import AdapterNotImplemented

    raise AdapterNotImplemented("get_ddp_bucketed raises NotImplementedError (repo:get_ddp_bucketed)")


def test_a_ranks_result_status_reaches_the_caller():
    from cs336report.student.resolve import AdapterNotImplemented, adapter_errors

    with pytest.raises(RankFailed) as info:
        launch(_not_implemented_on_every_rank, 2, backend="gloo", timeout_s=30)
    assert info.value.result_status == "not_implemented" and info.value.kind == "AdapterNotImplemented"
    with pytest.raises(AdapterNotImplemented, match=r"^get_ddp_bucketed raises NotImplementedError \(repo:"):
        with adapter_errors():  # as the distributed experiments run their ranks
            raise info.value
    with pytest.raises(RankFailed):  # any other failure passes through as it was
        with adapter_errors():
            raise RankFailed(0, "ZeroDivisionError", "division by zero", "", False)


def test_nccl_ranks_are_handed_their_gpu_indices(monkeypatch):
    """Without ``devices`` each NCCL rank gets GPU index = its rank (a rank indexes the list it is
    handed: given none, every NCCL launch failed in its ranks with a TypeError)."""
    from cs336report.distributed import launch as launch_module

    handed = []

    def fake_start(fn, nprocs, join, start_method, args):
        handed.append(args[4])
        raise RuntimeError("stop before any process starts")

    monkeypatch.setattr(launch_module, "enough_gpus", lambda *a, **k: True)
    monkeypatch.setattr(launch_module.mp, "start_processes", fake_start)
    for devices, expected in ((None, [0, 1]), ((2, 3), [2, 3])):
        with pytest.raises(RuntimeError, match="stop before"):
            launch(_all_reduce_rank, 2, backend="nccl", args=(0,), devices=devices)
        assert handed.pop() == expected
    with pytest.raises(RuntimeError, match="stop before"):
        launch(_all_reduce_rank, 2, backend="gloo", args=(0,))
    assert handed.pop() is None  # Gloo ranks run on the CPU
