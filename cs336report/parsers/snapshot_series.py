"""Shapes of a memory timeline: the points a plot keeps, and its ramps and drops."""

from __future__ import annotations

import math
from typing import Sequence

__all__ = ["downsample", "zigzag", "ramps"]


def downsample(y: Sequence[int], max_points: int) -> list[int]:
    n = len(y)
    if n <= max_points:
        return list(range(n))
    per = max(1, math.ceil(2 * n / max(max_points - 2, 2)))
    keep = {0, n - 1}
    for s in range(0, n, per):
        e = min(n, s + per)
        lo = hi = s
        for i in range(s + 1, e):
            v = y[i]
            if v > y[hi]:
                hi = i
            if v < y[lo]:
                lo = i
        keep.add(lo)
        keep.add(hi)
    return sorted(keep)


def zigzag(y: Sequence[int], threshold: int) -> list[int]:
    """Indices of alternating local extremes whose swings exceed ``threshold``."""
    n = len(y)
    if n == 0:
        return []
    pivots = [0]
    trend = 0
    hi = lo = 0
    cand = 0
    for i in range(1, n):
        v = y[i]
        if trend == 0:
            if v > y[hi]:
                hi = i
            if v < y[lo]:
                lo = i
            if y[hi] - y[lo] >= threshold and y[hi] != y[lo]:
                first, cand = (lo, hi) if lo < hi else (hi, lo)
                trend = 1 if lo < hi else -1
                if first > 0:
                    pivots.append(first)
        elif trend > 0:
            if v > y[cand]:
                cand = i
            elif y[cand] - v >= threshold:
                pivots.append(cand)
                trend, cand = -1, i
        else:
            if v < y[cand]:
                cand = i
            elif v - y[cand] >= threshold:
                pivots.append(cand)
                trend, cand = 1, i
    if trend != 0 and cand != pivots[-1]:
        pivots.append(cand)
    if pivots[-1] != n - 1:
        pivots.append(n - 1)
    return pivots


def ramps(y: Sequence[int], baseline: int, phases: Sequence[str], steps: Sequence[int],
          times: Sequence | None, ramp_threshold: float) -> dict:
    """The allocation sawtooth: runs between alternating extremes of ``y`` (bytes over the baseline).

    A swing must exceed ``ramp_threshold`` of the timeline's range, and 1 MiB, to end a ramp or a
    drop. ``phases``/``steps``: of every event; ``times``: of every event, or None.
    """
    n = len(y)
    rng = (max(y) - min(y)) if n else 0
    threshold = max(1 << 20, int(ramp_threshold * rng)) if rng else 1 << 20
    pivots = zigzag(y, threshold) if n else []
    segs = []
    for a, b in zip(pivots, pivots[1:]):
        # events a+1..b belong to this segment; a is the previous extreme
        d = y[b] - y[a]
        segs.append({
            "kind": "ramp" if d > 0 else ("drop" if d < 0 else "flat"),
            "start": a,
            "end": b,
            "start_bytes": baseline + y[a],
            "end_bytes": baseline + y[b],
            "bytes": d,
            "events": b - a,
            "duration_us": (times[b] - times[a]) if times is not None else None,
            "step": steps[min(a + 1, b)],
            "phase_start": phases[min(a + 1, b)],
            "phase_end": phases[b],
        })
    per_step: dict[int, dict] = {}
    for s in segs:
        if s["kind"] == "flat":
            continue
        d = per_step.setdefault(
            s["step"],
            {"step": s["step"], "ramp_events": 0, "drop_events": 0, "ramp_bytes": 0, "drop_bytes": 0,
             "ramp_us": 0 if times is not None else None, "drop_us": 0 if times is not None else None,
             "n_ramps": 0, "n_drops": 0},
        )
        k = s["kind"]
        d[f"{k}_events"] += s["events"]
        d[f"{k}_bytes"] += abs(s["bytes"])
        d[f"n_{k}s"] += 1
        if times is not None:
            d[f"{k}_us"] += s["duration_us"]
    return {"threshold_bytes": threshold, "segments": segs, "per_step": [per_step[k] for k in sorted(per_step)]}
