"""The leaderboard's timed step on each rank (the package's docstring:
:mod:`cs336report.experiments.leaderboard`).

Each rank builds the model on its device in fp32, wraps it in our FSDP with the cell's
``compute_dtype``, takes its share of the global batch (random tokens and targets, as the handout's
harness draws), and runs ``warmup_steps`` then ``measured_steps`` steps: forward, the summed
cross-entropy, backward, ``finish_gradient_synchronization`` and AdamW's step. The handout times the
step with ``triton.testing.do_bench(rep=30000, warmup=10000)``, which picks how many steps to run from
its own estimate in each process; two ranks whose estimates differ would run different numbers of
collectives and hang, so the ranks here run the same fixed number of steps, each timed between CUDA
events after a barrier (wall clock on the CPU), and the record keeps every step of every rank.
"""

from __future__ import annotations

import contextlib
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ...distributed.fsdp import FSDP
from ...distributed.launch import launch
from ...lm.model import TransformerLM
from ...names.spec import ModelSpec

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}


def _timer(device: torch.device):
    """A function that times ``fn()`` on ``device`` in seconds (CUDA events, or the wall clock)."""
    if device.type == "cuda":
        def timed(fn) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
    else:
        def timed(fn) -> float:
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0
    return timed


def fsdp_rank(rank: int, world_size: int, device: torch.device, cell: dict):
    """What one rank of an FSDP cell trains with (the leaderboard's, fsdp_accounting (b)'s profile):
    the model in fp32 wrapped in our FSDP with the cell's ``compute_dtype``, AdamW over its shards,
    and ``step(forward_range)``, one training step whose forward pass runs inside ``forward_range()``
    on this rank's share of the global batch (random tokens and targets)."""
    torch.manual_seed(cell["seed"])  # every rank builds the same model; FSDP broadcasts rank 0's anyway
    spec = ModelSpec(**cell["model"])
    batch, context = cell["batch_size"], cell["context"]
    if batch % world_size:
        raise ValueError(f"batch {batch} does not split over {world_size} ranks")
    model = FSDP(TransformerLM(spec, context, impl=cell["implementation"], device=device),
                 compute_dtype=DTYPES[cell["compute_dtype"]])
    optimizer = torch.optim.AdamW(model.parameters())
    generator = torch.Generator(device=device).manual_seed(cell["seed"] + rank)
    shape = (batch // world_size, context)
    tokens = torch.randint(0, spec.vocab_size, shape, device=device, generator=generator)
    targets = torch.randint(0, spec.vocab_size, shape, device=device, generator=generator)

    def step(forward_range=contextlib.nullcontext) -> None:
        optimizer.zero_grad(set_to_none=True)
        with forward_range():
            logits = model(tokens)  # (batch / ranks, seq, vocab)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), reduction="sum")
        loss.backward()
        model.finish_gradient_synchronization()
        optimizer.step()

    return model, step


def rank_step(rank: int, world_size: int, device: torch.device, cell: dict) -> dict:
    """One rank's steps; returns its step times and memory."""
    model, step = fsdp_rank(rank, world_size, device, cell)

    timed = _timer(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for i in range(cell["warmup_steps"] + cell["measured_steps"]):
        dist.barrier()
        t = timed(step)
        if i >= cell["warmup_steps"]:
            times.append(t)
    return {"rank": rank, "step_s": times,
            "peak_allocated_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
            "parameter_bytes": model.parameter_bytes()}


def run(cell: dict) -> dict:
    """Launch the ranks (not run where the host lacks the GPUs) and gather their times."""
    ranks = launch(rank_step, cell["world_size"], backend=cell["backend"], args=(cell,), timeout_s=cell["timeout_s"])
    # a step ends when its slowest rank does: the step time is the largest over the ranks
    steps = [max(r["step_s"][i] for r in ranks) for i in range(cell["measured_steps"])]
    mean = sum(steps) / len(steps)
    std = (sum((s - mean) ** 2 for s in steps) / max(1, len(steps) - 1)) ** 0.5
    return {"ranks": ranks, "step_s": steps, "stats_s": {"mean": mean, "std": std, "min": min(steps), "n": len(steps)},
            "tokens_per_step": cell["batch_size"] * cell["context"],
            "timing": "fixed steps, all ranks after a barrier, each timed between CUDA events; a step's time is "
                      "its slowest rank's"}
