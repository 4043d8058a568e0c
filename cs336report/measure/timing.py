"""Timing and memory measurement, the way a GPU needs it.

A step is timed the handout's way: ``timeit.default_timer`` before it and after one
``torch.cuda.synchronize()`` at its end, so the wall clock covers the kernels the step queued and
not only their launch, and nothing inside the step waits for the device. Raw per-step samples are
kept; statistics are derived from them by one function, :func:`summarize`.

    times = time_steps(step, warmup=5, measured=10, device="cuda")
    stats = summarize(times["measured_s"])

Beside the wall time of each step, :func:`time_steps` keeps the host's share of it: the time the
step's Python took to return (``issue_s``, before the synchronize) and, on CUDA, the device's time
between two events recorded around the step (``gpu_s``). A step whose host time is nearly all of
its wall time may have kept the GPU waiting for launches, or may have launched more kernels than
the queue holds and waited for room; the sum of its kernels' durations, read by torch.profiler in
one more step (:func:`kernels_alone`), tells the two apart. Where the kernels
alone are clearly faster than the step, the cell is host-bound (:func:`host_time`), and its time
says how fast the host launches kernels, not how fast the GPU runs them.
"""

from __future__ import annotations

import math
import statistics
import timeit
from contextlib import contextmanager
from typing import Callable

import torch

from ..machine.progress import progress
from .annotate import region
from .kernel_times import kernel_total, recorded_events

# A result whose inter-quartile range exceeds this fraction of the median is flagged noisy.
NOISE_THRESHOLD = 0.10

# A step whose host (launch) time is at least this fraction of its wall time is host-bound: the
# device finished each kernel before the host had launched the next, so the synchronize at the
# step's end waited for almost nothing.
HOST_BOUND_FRACTION = 0.9


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_steps(step: Callable[[], dict | None], warmup: int, measured: int, device: str) -> dict:
    """Run ``step`` ``warmup`` times, then ``measured`` timed times, with one synchronize each, at its end.

    ``step`` may return a dict of phase name -> seconds (its own, synchronized, phase timings), or
    a function that gives that dict once the step's synchronize has run (:class:`PhaseEvents`);
    those are kept per measured step under ``phases_s``. ``issue_s`` is the host time of each
    measured step (until ``step`` returned, before the synchronize); on CUDA, ``gpu_s`` is the
    device time between events recorded before and after it.
    """
    cuda = device.startswith("cuda")
    warmup_s: list[float] = []
    measured_s: list[float] = []
    issue_s: list[float] = []
    gpu_s: list[float] = []
    phases: dict[str, list[float]] = {}
    for i in range(warmup + measured):
        if i == 0 and warmup:
            progress(f"warm-up: {warmup} step{'s' if warmup != 1 else ''}")
        if i == warmup:
            progress(f"timing {measured} step{'s' if measured != 1 else ''}")
        events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if cuda else None
        with region("warmup" if i < warmup else "step"):
            start = timeit.default_timer()
            if events:
                events[0].record()
            phase_times = step()
            if events:
                events[1].record()
            issued = timeit.default_timer() - start
            synchronize(device)
            elapsed = timeit.default_timer() - start
        if callable(phase_times):  # phase events (PhaseEvents.resolve): readable now, after the synchronize
            phase_times = phase_times()
        if i < warmup:
            warmup_s.append(elapsed)
            continue
        measured_s.append(elapsed)
        issue_s.append(issued)
        if events:
            gpu_s.append(events[0].elapsed_time(events[1]) / 1e3)
        for name, seconds in (phase_times or {}).items():
            phases.setdefault(name, []).append(seconds)
    out = {"warmup_s": warmup_s, "measured_s": measured_s, "phases_s": phases, "issue_s": issue_s}
    if cuda:
        out["gpu_s"] = gpu_s
    return out


# A step that the host issues in at least HOST_BOUND_FRACTION of its wall time is host-bound only
# if its kernels, run back to back (the sum of their durations), would take at most
# (1 - LAUNCH_SHARE) of that wall time: the launches, not the kernels, then set it. (Issue time
# alone cannot tell: a step of more kernels than the launch queue holds keeps the host waiting for
# room in the queue, not the GPU waiting for it.)
LAUNCH_SHARE = 0.1


def kernels_alone(step: Callable[[], object], device: str, steps: int = 1) -> dict | None:
    """The device time of ``step``'s kernels alone: the sum of their durations per step, read by
    torch.profiler over ``steps`` more steps (:func:`cs336report.measure.kernel_times.kernel_total`). It is
    what the step would take were its kernels run back to back, whatever kept the GPU waiting
    between them. None off CUDA (a CPU runs what it issues).

    (Holding the GPU busy while the step is issued, so that its kernels queue up and then run back
    to back, does not serve: a step of more kernels than the launch queue holds, 2,000 small ones on
    an H100, fills the queue and is issued as the GPU drains it.)
    """
    if not device.startswith("cuda"):
        return None
    kernels_s, launches = kernel_total(step, steps)
    return {"kernels_s": kernels_s, "launches": launches, "steps": steps,
            "method": "torch.profiler: the sum of the step's kernel durations"}


def host_time(times: dict, alone: dict | None = None) -> dict | None:
    """Host against device time per step of :func:`time_steps`'s samples: the medians of the wall,
    host (launch) and, on CUDA, event-timed device time, the host's fraction of the wall time and
    whether the steps were host-bound. A step issued in less than ``HOST_BOUND_FRACTION`` of its
    wall time is not (the host was ahead, the GPU set the time); one issued in more is host-bound
    where ``alone`` (:func:`kernels_alone`) shows its kernels would take at most ``1 - LAUNCH_SHARE``
    of the wall time, or, without that, by its issue time alone. None without host samples."""
    wall, issue = times.get("measured_s") or [], times.get("issue_s") or []
    if not wall or not issue:
        return None
    wall_m, issue_m = statistics.median(wall), statistics.median(issue)
    gpu = times.get("gpu_s") or []
    fraction = issue_m / wall_m if wall_m > 0 else math.nan
    rule = f"host time >= {HOST_BOUND_FRACTION:g} x wall time"
    out = {"wall_s": wall_m, "host_s": issue_m, "gpu_s": statistics.median(gpu) if gpu else None,
           "host_fraction": fraction, "rule": rule}
    if not gpu:  # on a CPU the step runs as it is issued: its host time is its wall time, and says nothing
        return {**out, "host_bound": None}
    if fraction < HOST_BOUND_FRACTION or not alone:
        return {**out, "host_bound": bool(fraction >= HOST_BOUND_FRACTION)}
    return {**out, "kernels_alone": alone, "host_bound": bool(alone["kernels_s"] <= (1 - LAUNCH_SHARE) * wall_m),
            "rule": f"{rule}, and the kernels alone <= {1 - LAUNCH_SHARE:g} x wall time"}


# The op every dtype conversion goes through (``Tensor.to``, ``.float()``, autocast's casts).
CAST_OP = "aten::_to_copy"


def count_casts(step: Callable[[], object], device: str) -> dict:
    """Dtype conversions one call of ``step`` runs, counted with torch.profiler: the ``aten::_to_copy``
    calls (each launches one conversion kernel on CUDA) and the elements they wrote. A step under
    autocast converts each weight that enters a matrix product and the inputs and outputs of the
    ops autocast keeps in fp32; the same step in fp32 counts the casts the model makes itself.

    The profile's events are read as recorded (:func:`recorded_events`): torch.profiler's own event
    list builds a Python object and a tree for every operator, about 70 µs an event on a CPU, seconds
    for a large model's step (a few hundred milliseconds for a two-layer model's 7,000 events,
    against 10-20 ms read as recorded)."""
    from torch.profiler import ProfilerActivity, profile

    synchronize(device)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        step()
        synchronize(device)
    calls, elements = 0, 0
    recorded = recorded_events(prof)
    if recorded is not None:
        shapes = (e.shapes() for e in recorded if e.name() == CAST_OP)
    else:
        shapes = (e.input_shapes for e in prof.events() if e.name == CAST_OP)
    for inputs in shapes:
        calls += 1
        shape = (inputs or [[]])[0]
        elements += math.prod(shape) if shape else 0
    return {"op": CAST_OP, "calls": calls, "elements": elements}


def summarize(samples: list[float]) -> dict:
    """Mean, std (sample), coefficient of variation (std / mean), median, min, max, IQR and a
    noise flag of raw samples."""
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
    mean = statistics.fmean(ordered)
    std = statistics.stdev(ordered) if n >= 2 else 0.0
    return {
        "n": n,
        "mean": mean,
        "std": std,
        "cv": std / mean if mean > 0 else 0.0,
        "median": median,
        "min": ordered[0],
        "max": ordered[-1],
        "iqr": iqr,
        "noisy": bool(median > 0 and iqr / median > NOISE_THRESHOLD),
    }


class PhaseEvents:
    """Times of named phases inside one timed step, without a synchronize: on CUDA, events recorded
    where each phase starts and ends, read once the step's own synchronize has run
    (:meth:`resolve`, which :func:`time_steps` calls); on a CPU, which runs what it issues, the
    wall clock. A phase's time is then the device's: from the moment it reached the phase's first
    event to the moment it reached its last, waits for the host's launches included."""

    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")
        self.marks: list[tuple[str, object, object]] = []

    def _mark(self):
        if not self.cuda:
            return timeit.default_timer()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    @contextmanager
    def phase(self, name: str):
        start = self._mark()
        yield
        self.marks.append((name, start, self._mark()))

    def resolve(self) -> dict[str, float]:
        """Seconds per phase (summed where a phase ran more than once); after the device's synchronize."""
        out: dict[str, float] = {}
        for name, start, end in self.marks:
            seconds = start.elapsed_time(end) / 1e3 if self.cuda else end - start
            out[name] = out.get(name, 0.0) + seconds
        return out


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
    """Free what the last measurement left (reference cycles, the allocator's cached blocks).

    What survives the collection is frozen (``gc.freeze``), so the next collection scans only the
    objects made since: a full one scans every object torch's imports made, about 0.2 s on an
    H100 host (8 s of a FlashAttention job's 40 shapes). :func:`thaw` ends it (each cell's end).
    In a process whose start-up objects are frozen for good (:func:`freeze_baseline`) a collection
    is cheap already, and nothing more is frozen.
    """
    import gc

    gc.collect()
    if not _baseline:
        gc.freeze()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def thaw() -> None:
    """Let the garbage collector see again what :func:`release_memory` froze (its next full
    collection frees what of it has become garbage); nothing where a baseline is frozen."""
    import gc

    if not _baseline:
        gc.unfreeze()


_baseline = False  # whether freeze_baseline has run in this process


def baseline_frozen() -> bool:
    """Whether this process froze its objects for good (:func:`freeze_baseline`)."""
    return _baseline


def freeze_baseline() -> None:
    """Collect, then freeze every object this process holds, for good: a warm worker calls it once
    its imports are done and again after each cell's reset, when what the cell made is gone, so
    that a collection (in the reset, in :func:`release_memory`) scans only what was made since
    instead of the 170,000 or more objects torch's imports made (0.2-0.4 s a collection). A frozen
    object is still freed when its last reference goes; one that becomes part of a reference cycle
    later is never collected, which is why only what outlived a reset is frozen (a tensor kept so
    shows as CUDA memory left allocated, after which the worker exits). From the first call on,
    :func:`release_memory` freezes nothing and :func:`thaw` does nothing."""
    import gc

    global _baseline
    gc.collect()
    gc.freeze()
    _baseline = True


class Spent:
    """Wall seconds of a cell's parts by name, summed over every time a part runs: where a cell's
    time goes besides its timed steps (building, compiling, counting casts, profiling).

        spent = Spent()
        with spent("build"):
            model = ...
        data["spent_s"] = spent.record()
    """

    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str):
        start = timeit.default_timer()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + timeit.default_timer() - start

    def record(self) -> dict[str, float]:
        return {name: round(s, 4) for name, s in self.seconds.items()}
