"""Timing and memory measurement, the way a GPU needs it.

Every timed region ends with a device synchronize, so the wall clock (``timeit.default_timer``)
covers the kernels a step queued and not only their launch. Raw per-step samples are kept;
statistics are derived from them by one function, :func:`summarize`.

    times = time_steps(step, warmup=5, measured=10, device="cuda")
    stats = summarize(times["measured_s"])
"""

from __future__ import annotations

import statistics
import timeit
from contextlib import contextmanager
from typing import Callable

import torch

from .annotate import region
from .progress import progress

# A result whose inter-quartile range exceeds this fraction of the median is flagged noisy.
NOISE_THRESHOLD = 0.10


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_steps(step: Callable[[], dict | None], warmup: int, measured: int, device: str) -> dict:
    """Run ``step`` ``warmup`` times, then ``measured`` timed times, synchronizing after each.

    ``step`` may return a dict of phase name -> seconds (its own, synchronized, phase timings);
    those are kept per measured step under ``phases_s``.
    """
    warmup_s: list[float] = []
    measured_s: list[float] = []
    phases: dict[str, list[float]] = {}
    for i in range(warmup + measured):
        if i == 0 and warmup:
            progress(f"warm-up: {warmup} steps")
        if i == warmup:
            progress(f"timing {measured} steps")
        with region("warmup" if i < warmup else "step"):
            start = timeit.default_timer()
            phase_times = step()
            synchronize(device)
            elapsed = timeit.default_timer() - start
        if i < warmup:
            warmup_s.append(elapsed)
            continue
        measured_s.append(elapsed)
        for name, seconds in (phase_times or {}).items():
            phases.setdefault(name, []).append(seconds)
    return {"warmup_s": warmup_s, "measured_s": measured_s, "phases_s": phases}


def summarize(samples: list[float]) -> dict:
    """Mean, std (sample), median, min, max, IQR and a noise flag of raw samples."""
    if not samples:
        raise ValueError("summarize needs at least one sample")
    ordered = sorted(samples)
    n = len(ordered)
    if n >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    median = statistics.median(ordered)
    iqr = q3 - q1
    return {
        "n": n,
        "mean": statistics.fmean(ordered),
        "std": statistics.stdev(ordered) if n >= 2 else 0.0,
        "median": median,
        "min": ordered[0],
        "max": ordered[-1],
        "iqr": iqr,
        "noisy": bool(median > 0 and iqr / median > NOISE_THRESHOLD),
    }


class PhaseTimer:
    """Synchronized wall-clock timings of named phases inside one step."""

    def __init__(self, device: str):
        self.device = device
        self.times: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str):
        synchronize(self.device)
        start = timeit.default_timer()
        yield
        synchronize(self.device)
        self.times[name] = self.times.get(name, 0.0) + timeit.default_timer() - start


def reset_peak_memory(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()


def peak_memory(device: str) -> dict | None:
    """Peak allocated and reserved bytes since the last reset (CUDA only; None on CPU)."""
    if not device.startswith("cuda"):
        return None
    return {
        "allocated_bytes": torch.cuda.max_memory_allocated(),
        "reserved_bytes": torch.cuda.max_memory_reserved(),
    }


def is_out_of_memory(exc: BaseException) -> bool:
    """True for torch's OOM error and the older RuntimeError spelling of it."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def release_memory(device: str) -> None:
    import gc

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
