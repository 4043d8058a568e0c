"""GPU time per kernel of a callable, from torch.profiler.

    times = kernel_times(step, steps=5)  # {kernel name: {"ms": per call of step, "calls": per call}}

The callable runs ``steps`` times under ``torch.profiler.profile`` with CUDA activity only (the
host side is not traced, so the overhead is the profiler's start and stop); each kernel's device
time and launch count are summed over the calls and divided by ``steps``. Memset and memcpy
activities count as kernels of their own names.

    timeline = idle_time(step, steps=3)  # where the GPU ran no kernel during a synchronized call

:func:`idle_time` profiles each call on its own, synchronized at its end as a timed step is, and
splits the call's wall time into the kernels' busy time and three kinds of idle time: gaps of
under :data:`SHORT_GAP_US` between consecutive kernels (a kernel already queued starts that long
after the one before it ends: launch latency), longer gaps inside the call (the GPU waited for the
host to launch the next kernel), and the time before the first kernel and after the last (the
host's work before it launches anything, and the synchronization).
"""

from __future__ import annotations

import timeit
from typing import Callable

import torch

_CUDA = torch.autograd.DeviceType.CUDA
# A gap between two kernels shorter than this is the device's own latency between queued kernels.
SHORT_GAP_US = 10.0


def recorded_events(prof) -> list | None:
    """The events of a finished ``torch.profiler.profile`` as its profiler recorded them (objects
    with ``name()`` and ``shapes()``), or None where this torch keeps them elsewhere."""
    results = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    events = getattr(results, "events", None)
    return events() if callable(events) else None


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
    return summarize_activities(device_activities(prof), steps)


def kernel_total(fn: Callable[[], object], steps: int = 5) -> tuple[float, float]:
    """Seconds of GPU time and kernel launches per call of ``fn``, all its kernels together; CUDA only."""
    kernels = kernel_times(fn, steps)
    return sum(k["ms"] for k in kernels.values()) / 1e3, sum(k["calls"] for k in kernels.values())


def device_activities(prof) -> list[tuple[str, float, float]]:
    """``(name, start µs, end µs)`` of every GPU activity (kernel, memcpy, memset) of a finished
    ``torch.profiler.profile``, times from the profile's first event.

    Read as the profiler recorded them (:func:`recorded_events`), with names
    demangled as torch.profiler's own event list has them. That list (``prof.events()``) first builds
    a Python object for every event, the host's launch of each kernel too, and links them into a tree:
    about 0.1 ms a kernel launch, more than a large model's step itself takes for its thousands of
    launches. Where this torch keeps no recorded list, that list is read."""
    recorded = recorded_events(prof)
    if recorded is None:
        return [(e.name, e.time_range.start, e.time_range.end) for e in prof.events() if e.device_type == _CUDA]
    events = [e for e in recorded if e.device_type() == _CUDA and not getattr(e, "is_hidden_event", lambda: False)()]
    if not events:
        return []
    base = min(e.start_ns() for e in events)  # integer nanoseconds: as floats, epoch times lose the sub-µs
    names: dict[str, str] = {}
    out = []
    for e in events:
        raw = e.name()
        if raw not in names:
            names[raw] = _demangle(raw)
        out.append((names[raw], (e.start_ns() - base) / 1e3, (e.end_ns() - base) / 1e3))
    return out


def _demangle(name: str) -> str:
    """A kernel's name as torch.profiler's event list gives it (a mangled C++ name demangled)."""
    demangle = getattr(torch._C, "_demangle", None)
    return demangle(name) if demangle is not None and len(name) > 1 else name


def summarize_activities(activities, steps: int) -> dict[str, dict]:
    """Sum GPU activities ``(name, start µs, end µs)`` by name: ms and calls per step, slowest first."""
    totals: dict[str, list] = {}
    for name, start, end in activities:
        t = totals.setdefault(name, [0.0, 0])
        t[0] += end - start  # microseconds
        t[1] += 1
    ordered = sorted(totals.items(), key=lambda kv: -kv[1][0])
    return {name: {"ms": us / steps / 1e3, "calls": n / steps} for name, (us, n) in ordered}


def idle_time(fn: Callable[[], object], steps: int = 3) -> dict:
    """Mean wall, busy and idle time (ms) of ``steps`` calls of ``fn``, each profiled and synchronized
    on its own (:func:`split_idle`); CUDA only."""
    from torch.profiler import ProfilerActivity, profile

    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    calls = []
    for _ in range(steps):
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            start = timeit.default_timer()
            fn()
            torch.cuda.synchronize()
            wall_ms = (timeit.default_timer() - start) * 1e3
        spans = [(start, end) for _, start, end in device_activities(prof)]
        calls.append(split_idle(spans, wall_ms))
    out = {k: sum(c[k] for c in calls) / steps for k in calls[0]}
    return {**out, "steps": steps, "short_gap_us": SHORT_GAP_US}


def split_idle(spans: list[tuple[float, float]], wall_ms: float, short_us: float = SHORT_GAP_US) -> dict:
    """One call's time by what the GPU did: ``spans`` are its kernels' (start, end) in µs, ``wall_ms``
    the call's wall time. Busy is the union of the spans; the idle time inside them is split at
    ``short_us`` into short and long gaps; ``outside_ms`` is the wall time before the first kernel
    and after the last. The four parts add up to ``wall_ms`` (outside_ms absorbs the difference of
    the two clocks, and is at least 0)."""
    spans = sorted(spans)
    busy = short = long = 0.0
    n_short = n_long = 0
    if spans:
        start, end = spans[0]
        for s, e in spans[1:]:
            if s > end:
                busy += end - start
                gap = s - end
                if gap < short_us:
                    short, n_short = short + gap, n_short + 1
                else:
                    long, n_long = long + gap, n_long + 1
                start, end = s, e
            else:
                end = max(end, e)
        busy += end - start
    span_ms = (busy + short + long) / 1e3
    return {"wall_ms": wall_ms, "busy_ms": busy / 1e3, "short_gaps_ms": short / 1e3, "short_gaps": n_short,
            "long_gaps_ms": long / 1e3, "long_gaps": n_long, "outside_ms": max(wall_ms - span_ms, 0.0)}
