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


EXPERIMENTS = {NAME: (cells, ".allreduce:run")}
