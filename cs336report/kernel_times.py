"""GPU time per kernel of a callable, from torch.profiler.

    times = kernel_times(step, steps=5)  # {kernel name: {"ms": per call of step, "calls": per call}}

The callable runs ``steps`` times under ``torch.profiler.profile`` with CUDA activity only (the
host side is not traced, so the overhead is the profiler's start and stop); each kernel's device
time and launch count are summed over the calls and divided by ``steps``. Memset and memcpy
activities count as kernels of their own names.
"""

from __future__ import annotations

from typing import Callable

import torch


def kernel_times(fn: Callable[[], object], steps: int = 5) -> dict[str, dict]:
    """Per-call GPU time (ms) and launch count of every kernel ``fn`` runs; CUDA only."""
    from torch.profiler import ProfilerActivity, profile

    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    return summarize_events(prof.events(), steps)


def summarize_events(events, steps: int) -> dict[str, dict]:
    """Sum the device events of a profile by name: ms and calls per step, slowest first."""
    totals: dict[str, list] = {}
    for e in events:
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        t = totals.setdefault(e.name, [0.0, 0])
        t[0] += e.device_time_total  # microseconds
        t[1] += 1
    ordered = sorted(totals.items(), key=lambda kv: -kv[1][0])
    return {name: {"ms": us / steps / 1e3, "calls": n / steps} for name, (us, n) in ordered}
