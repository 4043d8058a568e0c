"""distributed_communication_single_node's all-reduces: each rank all-reduces a tensor of each
size, timed between a barrier and a device synchronize (the package's docstring:
:mod:`cs336report.experiments.distributed_communication_single_node`).
"""

from __future__ import annotations

import timeit

import torch
import torch.distributed as dist

from ...distributed.launch import launch
from ...distributed.link import describe
from ...measure.timing import summarize, synchronize
from . import MB


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


