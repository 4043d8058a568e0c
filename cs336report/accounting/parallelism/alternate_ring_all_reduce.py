"""alternate_ring_all_reduce (2026 handout §8.1, problem 22): an all-reduce that passes whole tensors round the ring.

In each of N - 1 steps every device forwards to its right-hand neighbour the whole tensor it received
last (its own in the first step) and adds the one it receives to its running sum. Every device sends
S bytes a step, all at once, so a step takes S/W and the all-reduce (N - 1)·S/W: N/2 times the
(N - 1)/N·2·S/W of the reduce-scatter and all-gather ring, the same for N = 2.

:func:`simulate` runs the schedule on numbers, checking that every device sends only what it holds
and ends with the sum; the derivation takes the bytes a device sends in a step from it.

    python -c "from cs336report.accounting.parallelism.alternate_ring_all_reduce import simulate; print(simulate(4))"
"""

from __future__ import annotations

from fractions import Fraction

import sympy as sp

from .records import Derivation, Part, value
from .setting import N, S, Setting, W

CHECKED_DEVICES = range(1, 9)  # the schedule is run for these device counts before it is used


def simulate(n: int, chunks: int = 4) -> dict:
    """Run the schedule on ``n`` devices, each tensor ``chunks`` distinct numbers; return each device's
    final sum, the true sum, and per step the share of a whole tensor each device sent."""
    if n < 1:
        raise ValueError(f"n must be at least 1, not {n}")
    x = [tuple(Fraction(10**i) * (c + 1) for c in range(chunks)) for i in range(n)]  # device i's tensor
    y = list(x)
    held = [x[i] for i in range(n)]  # what each device received last (its own before step 1)
    sent = []
    for t in range(1, n):
        outgoing = [x[(i - t + 1) % n] for i in range(n)]
        if outgoing != held:
            raise AssertionError(f"step {t}: a device sends a tensor it does not hold")
        incoming = [outgoing[(i - 1) % n] for i in range(n)]  # from the left-hand neighbour
        if incoming != [x[(i - t) % n] for i in range(n)]:
            raise AssertionError(f"step {t}: a device receives another tensor than the schedule says")
        y = [tuple(a + b for a, b in zip(y[i], incoming[i])) for i in range(n)]
        held = incoming
        sent.append([Fraction(len(out), chunks) for out in outgoing])
    total = tuple(sum(column) for column in zip(*x))
    return {"sums": y, "total": total, "sent": sent}


def _sent_per_step() -> Fraction:
    """Whole tensors each device sends per step, the same for every device, step and device count."""
    shares = {share for n in CHECKED_DEVICES for step in simulate(n)["sent"] for share in step}
    for n in CHECKED_DEVICES:
        result = simulate(n)
        if any(s != result["total"] for s in result["sums"]) or len(result["sent"]) != n - 1:
            raise AssertionError(f"the schedule does not all-reduce on {n} devices")
    if len(shares) != 1:
        raise AssertionError(f"devices send different amounts per step: {shares}")
    return shares.pop()


def alternate_ring_all_reduce(setting: Setting = Setting()) -> Derivation:
    per_step = _sent_per_step() * S
    total = sp.factor((N - 1) * per_step / W)
    ring = sp.factor(setting.all_reduce(S, N))
    steps = (value(setting, "bytes each device sends in one step: one whole tensor", per_step, "B"),
             value(setting, "time of one step, every device sending at once at W", per_step / W, "s"),
             value(setting, "steps", N - 1, "steps"),
             value(setting, "bytes each device sends in all", (N - 1) * per_step, "B"),
             value(setting, "the ring all-reduce of §8.1 (reduce-scatter, then all-gather), for comparison", ring,
                   "s"),
             value(setting, "bytes each device sends in that all-reduce", sp.factor(ring * W), "B"),
             value(setting, "this all-reduce's time over that one's", sp.cancel(total / ring)))
    answer = value(setting, "time of this all-reduce", total, "s",
                   "In each of the N - 1 steps every device sends one whole tensor of S bytes at W bytes/s, all "
                   "devices at once, against S/N bytes a step for the reduce-scatter and all-gather ring.")
    return Derivation("alternate_ring_all_reduce", "8.1", setting.as_dict(),
                      (Part("", "the time of an all-reduce that passes whole tensors round the ring, in S, N and W",
                            steps, (answer,)),))
