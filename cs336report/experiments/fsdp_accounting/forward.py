"""fsdp_accounting (b): FSDP training steps marked for Nsight Systems on each rank (the package's
docstring: :mod:`cs336report.experiments.fsdp_accounting`).

Each rank builds the model in fp32 on its device, wraps it in our FSDP with the cell's
``compute_dtype`` (gathers and layers in that dtype, fp32 master weights), takes its share of the
global batch (random tokens and targets) and runs ``warmup_steps`` steps, then ``profile_steps``
steps: forward, the summed cross-entropy, backward, ``finish_gradient_synchronization`` and AdamW's
step. Each profiled step runs inside the NVTX range ``fsdp_step rank <r>`` and its forward pass
(the model's call, nothing after it) inside ``fsdp_forward rank <r>``; the step ends with a device
synchronisation, so the next step's GPU work starts after the range's. On a device without CUDA
(the tests' Gloo ranks on the CPU) the ranges are only counted: there is no NVTX to push them to.
"""

from __future__ import annotations

import contextlib
from collections import Counter

import torch
import torch.distributed as dist

from ...accounting.overlap import NVTX_FSDP_FORWARD, NVTX_FSDP_STEP
from ...distributed.launch import launch
from ..ddp_training.train import rank_start_method
from ..leaderboard.step import fsdp_rank


def _marker(device: torch.device, opened: Counter):
    """``mark(name)``: a context manager for an NVTX range of that name (on CUDA), counting each."""
    def mark(name: str):
        opened[name] += 1
        return torch.cuda.nvtx.range(name) if device.type == "cuda" else contextlib.nullcontext()
    return mark


def rank_profile(rank: int, world_size: int, device: torch.device, cell: dict) -> dict:
    """One rank's warm-up and profiled steps; returns what it ran (ranges, gathers, memory)."""
    model, train_step = fsdp_rank(rank, world_size, device, cell)
    opened: Counter = Counter()
    mark = _marker(device, opened)
    quiet = contextlib.nullcontext

    def step(range_step, range_forward) -> None:
        with range_step():
            train_step(range_forward)
            if device.type == "cuda":
                torch.cuda.synchronize(device)

    for _ in range(cell["warmup_steps"]):
        step(quiet, quiet)
    dist.barrier()
    for _ in range(cell["profile_steps"]):
        step(lambda: mark(NVTX_FSDP_STEP.format(rank=rank)), lambda: mark(NVTX_FSDP_FORWARD.format(rank=rank)))
    gathers = [w for event, w in model.events if event == "gather_forward"]
    return {"rank": rank, "device_index": device.index if device.type == "cuda" else None,
            "ranges": dict(opened), "forward_gathers": len(gathers), "sharded_weights": len(model.weights),
            "peak_allocated_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
            "parameter_bytes": model.parameter_bytes()}


def run(cell: dict) -> dict:
    """Launch the ranks (not run where the host lacks the GPUs) and return what each ran."""
    ranks = launch(rank_profile, cell["world_size"], backend=cell["backend"], args=(cell,),
                   timeout_s=cell["timeout_s"], start_method=rank_start_method(cell))
    return {"ranks": ranks, "tool": "nsys" if cell.get("profiler") == "nsys" else None,
            "nvtx": {"step": NVTX_FSDP_STEP, "forward": NVTX_FSDP_FORWARD}}
