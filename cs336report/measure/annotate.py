"""Named ranges around regions of a step, for Nsight Systems and for torch.profiler.

The model and the experiments mark regions with ``region("forward")``,
``region("attention_scores")`` and so on. Outside a profiling run the ranges cost nothing;
``enable(nvtx=True)`` turns them into NVTX push/pop ranges (what ``nsys`` records) and
``enable(profiler=True)`` into ``torch.profiler.record_function`` ranges (what the profiler
fallback records), with the same names either way.

    enable(nvtx=True)
    with region("forward"):
        logits = model(tokens)
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

_STATE = {"nvtx": False, "profiler": False}

# Names of the ranges, shared with the parsers and the report.
STEP_RANGES = ("warmup", "forward", "backward", "optimizer_step")
ATTENTION_RANGES = ("attention_scores", "softmax", "attention_value")


def enable(nvtx: bool = False, profiler: bool = False) -> None:
    _STATE.update(nvtx=nvtx, profiler=profiler)


def enabled() -> bool:
    return _STATE["nvtx"] or _STATE["profiler"]


@contextmanager
def region(name: str):
    if not enabled():
        yield
        return
    if _STATE["nvtx"]:
        torch.cuda.nvtx.range_push(name)
    try:
        if _STATE["profiler"]:
            with torch.profiler.record_function(name):
                yield
        else:
            yield
    finally:
        if _STATE["nvtx"]:
            torch.cuda.nvtx.range_pop()
