"""memory_profiling (f)'s run inside Nsight Systems: the cell's step with each TransformerBlock's
forward and backward in NVTX ranges of its own, and PyTorch's operator ranges inside them.

The process runs under ``nsys profile --cuda-memory-usage=true --capture-range=cudaProfilerApi``
with ``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` (:mod:`cs336report.steps.nsys_memory_step`): every tensor is
then a cudaMalloc and a cudaFree that CUDA memory tracking records. The warm-up steps run outside the
capture (the AdamW moments exist before it starts); the captured step runs between
``cudaProfilerStart`` and ``cudaProfilerStop`` inside ``torch.autograd.profiler.emit_nvtx()``, which
is what nsys's ``--pytorch=autograd-nvtx`` turns on (Nsight Systems user guide, "PyTorch profiling":
``emit_nvtx(record_shapes=False)``); entering it here keeps the warm-up steps out of the ranges on any
nsys. The block ranges are named ``block <i> forward`` and ``block <i> backward``
(:data:`cs336report.parsers.nsys_memory.BLOCK`): the forward range from a forward pre-hook to a
forward hook of the block, the backward range from a full backward pre-hook (the gradient of the
block's output is ready) to a full backward hook (the gradient of its input is); both are NVTX
start/end ranges, matched by id (:func:`mark_blocks` says why).

    python -m cs336report capture-nsys-memory --name NAME --cell JSON --out-dir DIR --out RESULT
"""

from __future__ import annotations

import os
import shutil
import time

import torch

from ...accounting import transformer as accounting
from ...lm.model import ModelSpec
from ...measure.timing import peak_memory, reset_peak_memory, synchronize
from ..benchmarking_script.step import set_tf32
from .capture import warmed_step

NO_CACHING_ENV = "PYTORCH_NO_CUDA_MEMORY_CACHING"


class NeedsNsys(RuntimeError):
    """The cell cannot be captured on this machine (no CUDA device, or no nsys): the runner records it
    as "not_run" with this message."""

    result_status = "not_run"


def requirement(cell: dict) -> str | None:
    """Why ``cell`` cannot be captured here ("not run: ..."), or None where it can."""
    device = str(cell.get("device", "cpu"))
    nsys = cell.get("nsys", "nsys")
    if not device.startswith("cuda") or not torch.cuda.is_available():
        return f"not run: needs a GPU with nsys (the cell's device is {device!r})"
    if shutil.which(nsys) is None:
        return f"not run: needs a GPU with nsys (no executable {nsys!r} on PATH)"
    return None


def blocks_of(model) -> list:
    """The model's TransformerBlocks, in order: ``model.layers`` (ours and the course's
    BasicsTransformerLM)."""
    layers = getattr(model, "layers", None)
    if layers is None:
        raise ValueError(f"{type(model).__name__} has no `layers`: the capture marks the blocks of "
                         "model.layers")
    return list(layers)


def _start(name: str, key, open_ranges: dict):
    """A hook that starts the NVTX range ``name`` and keeps its id under ``key`` (it returns None: a hook's
    return value would replace the module's input, output or gradient)."""

    def hook(*_) -> None:
        open_ranges[key] = torch.cuda.nvtx.range_start(name)

    return hook


def _end(key, open_ranges: dict):
    """A hook that ends the NVTX range kept under ``key``."""

    def hook(*_) -> None:
        if key in open_ranges:
            torch.cuda.nvtx.range_end(open_ranges.pop(key))

    return hook


def mark_blocks(blocks: list) -> list:
    """NVTX ranges around each block's forward and backward; returns the hooks' handles.

    The ranges are start/end ranges, matched by id, not pushed and popped: autograd runs a backward hook
    inside its own ``autograd::engine::evaluate_function`` range, which ``emit_nvtx`` pushes on the same
    thread's stack, so a range pushed by the pre-hook would be popped when that node's evaluation ends,
    long before the block's backward does."""
    handles, open_ranges = [], {}
    for i, block in enumerate(blocks):
        handles += [
            block.register_forward_pre_hook(_start(f"block {i} forward", (i, "forward"), open_ranges)),
            block.register_forward_hook(_end((i, "forward"), open_ranges)),
            block.register_full_backward_pre_hook(_start(f"block {i} backward", (i, "backward"), open_ranges)),
            block.register_full_backward_hook(_end((i, "backward"), open_ranges)),
        ]
    return handles


def run(cell: dict) -> dict:
    """Warm up, then capture one step of the cell (the caller runs this process under nsys)."""
    missing = requirement(cell)
    if missing:
        raise NeedsNsys(missing)
    set_tf32(cell["tf32"])
    torch.manual_seed(cell["seed"])
    spec = ModelSpec(**cell["model"])
    device = cell["device"]
    model, model_info, step = warmed_step(cell)
    synchronize(device)
    blocks = blocks_of(model)
    handles = mark_blocks(blocks)
    reset_peak_memory(device)
    torch.cuda.profiler.start()
    t0 = time.perf_counter()
    try:
        with torch.autograd.profiler.emit_nvtx(record_shapes=False):
            for _ in range(cell["measured_steps"]):
                step()
        synchronize(device)
    finally:
        torch.cuda.profiler.stop()
        for handle in handles:
            handle.remove()
    return {
        "model": model_info,
        "params": sum(p.numel() for p in model.parameters()),
        "params_expected": accounting.param_count(spec),
        "grad_mode": cell.get("grad", "enabled"),
        "blocks": len(blocks),
        "captured_steps": cell["measured_steps"],
        "captured_s": time.perf_counter() - t0,
        "no_caching": os.environ.get(NO_CACHING_ENV) == "1",
        "peak_memory": peak_memory(device),
        "device_memory_bytes": torch.cuda.get_device_properties(torch.device(device)).total_memory,
    }
