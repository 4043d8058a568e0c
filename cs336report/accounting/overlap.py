"""How much of a step's communication ran while the GPU computed: from one step's kernels
(stream, start, duration, NCCL or not; :func:`cs336report.experiments.ddp_training.kernels_of_last_step`).

Communication time is the union of the NCCL kernels' intervals, compute time that of every other
kernel; the hidden part is where the two unions overlap. An NCCL kernel's duration includes
waiting for the other ranks to arrive, so a rank's own communication time reads long when the
ranks are out of step.

For FSDP's forward pass (:func:`gather_wait`) the question is the other way round: how long the
compute stream sat idle while an all-gather ran, which is the time the forward waited for weights.
"""

from __future__ import annotations

# The NVTX range of one profiled step of rank r (cs336report.steps.ddp_timeline finds each rank's steps by it).
NVTX_STEP = "ddp_step rank {rank}"
# The FSDP profile's ranges (fsdp_accounting (b), cs336report.steps.fsdp_forward): a step of rank r, and
# inside it the forward pass, whose all-gathers the parse weighs against its compute.
NVTX_FSDP_STEP = "fsdp_step rank {rank}"
NVTX_FSDP_FORWARD = "fsdp_forward rank {rank}"


def union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Merged, sorted (start, end) intervals covering the same time as ``intervals``."""
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def length(intervals: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in intervals)


def intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total time covered by both of two merged interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def hidden_fraction(kernels: list[list]) -> dict:
    """Rows ``[stream, start_us, dur_us, nccl]`` -> communication, compute, the overlap of the two
    (µs), and the fraction of communication time hidden behind compute (None without NCCL kernels)."""
    comm = union([(k[1], k[1] + k[2]) for k in kernels if k[3]])
    compute = union([(k[1], k[1] + k[2]) for k in kernels if not k[3]])
    hidden = intersection(comm, compute)
    comm_us = length(comm)
    span = max((k[1] + k[2] for k in kernels), default=0.0) - min((k[1] for k in kernels), default=0.0)
    return {"comm_us": comm_us, "compute_us": length(compute), "hidden_us": hidden,
            "exposed_us": comm_us - hidden, "step_us": span,
            "hidden_fraction": hidden / comm_us if comm_us > 0 else None}


def compute_stream(kernels: list[list]) -> int | None:
    """The stream of the most non-NCCL kernel time (the one the model computes on), or None."""
    busy: dict[int, float] = {}
    for k in kernels:
        if not k[3]:
            busy[k[0]] = busy.get(k[0], 0.0) + k[2]
    return max(busy, key=busy.get) if busy else None


def gather_wait(kernels: list[list], span_us: float) -> dict:
    """Rows ``[stream, start_us, dur_us, nccl]`` of a range that runs from 0 to ``span_us`` -> the
    compute stream's idle time inside it while an NCCL kernel runs (µs; the time the computation
    waited for a collective, at most: a stream also idles while the host is late to launch), and
    its idle time in all."""
    stream = compute_stream(kernels)
    busy = union([(k[1], k[1] + k[2]) for k in kernels if not k[3] and k[0] == stream])
    idle, at = [], 0.0
    for start, end in busy:
        if at < start and at < span_us:
            idle.append((at, min(start, span_us)))
        at = max(at, end)
    if at < span_us:
        idle.append((at, span_us))
    comm = union([(k[1], k[1] + k[2]) for k in kernels if k[3]])
    return {"compute_stream": stream, "idle_us": length(idle), "waited_us": intersection(idle, comm)}
