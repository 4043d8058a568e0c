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
import torch.nn.functional as F

from ...accounting.overlap import NVTX_FSDP_FORWARD, NVTX_FSDP_STEP
from ...distributed.fsdp import FSDP
from ...distributed.launch import launch
from ...lm.model import TransformerLM
from ...names.spec import ModelSpec
from ..ddp_training.train import rank_start_method

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}


def _marker(device: torch.device, opened: Counter):
    """``mark(name)``: a context manager for an NVTX range of that name (on CUDA), counting each."""
    def mark(name: str):
        opened[name] += 1
        return torch.cuda.nvtx.range(name) if device.type == "cuda" else contextlib.nullcontext()
    return mark


def rank_profile(rank: int, world_size: int, device: torch.device, cell: dict) -> dict:
    """One rank's warm-up and profiled steps; returns what it ran (ranges, gathers, memory)."""
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
    opened: Counter = Counter()
    mark = _marker(device, opened)
    quiet = contextlib.nullcontext

    def step(range_step, range_forward) -> None:
        with range_step():
            optimizer.zero_grad(set_to_none=True)
            with range_forward():
                logits = model(tokens)  # (batch / ranks, seq, vocab)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                                   reduction="sum")
            loss.backward()
            model.finish_gradient_synchronization()
            optimizer.step()
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
