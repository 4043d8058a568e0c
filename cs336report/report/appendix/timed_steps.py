"""What the cost appendix counts as timed in a record: the seconds of its timed steps (warm-up and
measured) and of its first compiled calls, each step counted once however many ranks or repeats
recorded it."""

from __future__ import annotations

from ...records.store import whole_step


# Lists of per-step or per-call seconds that results keep: warm-up and measured steps, and the
# per-call times of do_bench (flash) and of all-reduce calls (the slowest rank's, distributed_communication).
# Per-phase splits of a step (``phases_s``) are parts of these.
SAMPLE_KEYS = ("warmup_s", "measured_s", "times_s", "latency_s")
# A distributed cell's ranks keep their steps as lists of per-phase dicts (``step``: the whole step).
RANK_STEP_KEYS = ("warmup", "measured")


def _is_seconds(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, (int, float)) for v in value)


def _repeated_steps(repeats: dict) -> float:
    """Seconds of measured steps in a cell's repeats (``data.repeats``): each run after the first (the
    record's own process, whose steps the record lists) keeps only its statistics, so its steps count
    as their mean times their number; its warm-up steps are not known and are not counted."""
    total = 0.0
    for run in (repeats.get("runs") or [])[1:]:
        stats = whole_step(run.get("stats_s") if isinstance(run, dict) else None) or {}
        if isinstance(stats.get("mean"), (int, float)) and isinstance(stats.get("n"), (int, float)):
            total += float(stats["mean"]) * float(stats["n"])
    return total


def timed_seconds(data) -> tuple[float, float]:
    """(seconds of timed warm-up and measured steps, seconds of first compiled calls) in a record's data.

    The ranks of a distributed cell (``ranks``) time the same steps at the same time: they count
    once, as the rank whose steps took longest, not once each. A cell measured again in fresh
    processes counts those runs' measured steps too (:func:`_repeated_steps`)."""
    steps = compiled = 0.0
    stack = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key in SAMPLE_KEYS and _is_seconds(value):
                    steps += float(sum(value))
                elif key in RANK_STEP_KEYS and isinstance(value, list) and value and all(
                        isinstance(v, dict) and isinstance(v.get("step"), (int, float)) for v in value):
                    steps += float(sum(v["step"] for v in value))
                elif key == "ranks" and isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                    per_rank = [timed_seconds(rank) for rank in value]
                    steps += max(s for s, _ in per_rank)
                    compiled += max(c for _, c in per_rank)
                elif key == "first_call_s" and isinstance(value, (int, float)):
                    compiled += float(value)
                elif key == "repeats" and isinstance(value, dict):
                    steps += _repeated_steps(value)
                    stack.append(value)  # the runs' first compiled calls, where they compiled
                elif key not in ("phases_s", "earlier_first_calls"):  # parts of a step; other cells' calls
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
    return steps, compiled
