"""distributed_communication_single_node: all-reduce of fp32 tensors, Gloo on CPUs, NCCL on GPUs.

One cell is one backend x world size; its ranks (:func:`cs336report.distributed.launch.launch`)
all-reduce a tensor of each configured size: ``warmup`` untimed calls, then ``iterations`` timed
ones, each between a barrier and a device synchronize (``async_op=False`` returns when the
collective is queued on a GPU, not when it has run). Every rank times itself; rank 0 gathers
all ranks' samples (``all_gather_object``) and they are kept raw. A call's latency is its
slowest rank's time, and the report derives algorithm and bus bandwidth from it. A cell that
needs more GPUs than the host has is recorded as not run.

    python -m cs336report run distributed_communication_single_node --name nccl-w2 --cell '{...}' --out r.json
"""

from __future__ import annotations

import timeit

import torch
import torch.distributed as dist

from ..distributed.launch import launch
from ..distributed.link import describe
from ..measure.timing import summarize, synchronize

NAME = "distributed_communication_single_node"
MB = 10**6  # tensor sizes and bandwidths are decimal: 1 MB = 10^6 bytes, GB/s = 10^9 bytes/s


def cells(cfg) -> dict[str, dict]:
    grid = cfg.grid(NAME)
    if not grid:
        return {}
    out = {}
    for backend in grid["backends"]:
        for world_size in grid["world_sizes"]:
            out[f"{backend}-w{world_size}"] = {
                "device": "cuda" if backend == "nccl" else "cpu", "backend": backend, "world_size": world_size,
                "sizes_mb": grid["sizes_mb"], "warmup": grid["warmup"], "iterations": grid["iterations"],
                "timeout_s": grid["timeout_s"],
            }
    return out


def _rank(rank: int, world_size: int, device: torch.device, sizes_mb: list, warmup: int, iterations: int) -> list:
    dev = str(device)
    samples = []
    for size_mb in sizes_mb:
        n = int(size_mb * MB) // 4  # fp32 elements
        data = torch.full((n,), float(rank + 1), dtype=torch.float32, device=device)
        dist.all_reduce(data)
        synchronize(dev)
        correct = bool(torch.all(data == world_size * (world_size + 1) / 2).item())
        times = []
        for i in range(warmup + iterations):
            dist.barrier()
            synchronize(dev)
            start = timeit.default_timer()
            dist.all_reduce(data)
            synchronize(dev)
            if i >= warmup:
                times.append(timeit.default_timer() - start)
        samples.append({"size_mb": size_mb, "bytes": n * 4, "correct": correct, "times_s": times})
        del data
    gathered: list = [None] * world_size
    dist.all_gather_object(gathered, samples)
    return gathered if rank == 0 else []


def latencies(per_rank_times: list[list[float]]) -> list[float]:
    """Per call, the slowest rank's time: the collective is done when every rank is."""
    return [max(call) for call in zip(*per_rank_times)]


def run(cell: dict) -> dict:
    world_size = cell["world_size"]
    gathered = launch(_rank, world_size, backend=cell["backend"], timeout_s=cell["timeout_s"],
                      args=(cell["sizes_mb"], cell["warmup"], cell["iterations"]))[0]
    sizes = []
    for i, size_mb in enumerate(cell["sizes_mb"]):
        per_rank = [rank_samples[i]["times_s"] for rank_samples in gathered]
        lat = latencies(per_rank)
        sizes.append({"size_mb": size_mb, "bytes": gathered[0][i]["bytes"],
                      "correct": all(r[i]["correct"] for r in gathered),
                      "times_s_per_rank": per_rank, "latency_s": lat, "latency_stats_s": summarize(lat)})
    return {"link": describe(cell["backend"], world_size), "sizes": sizes}


EXPERIMENTS = {NAME: (cells, run)}
