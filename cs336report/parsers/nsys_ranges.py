"""NVTX ranges of a profile: their names, their instances, and the warm-up steps they imply.

Profiles name their ranges our way (:mod:`cs336report.measure.annotate`) or the handout's way
(``computing softmax``...): :func:`canonical_range` maps both to ours. The number of
warm-up steps in an export is read from ranges that open once per step
(:func:`warmup_steps`), and :func:`per_step_check` says whether every range opened as
often as the steps imply.
"""

from __future__ import annotations

import math
import re

import pandas as pd

__all__ = ["RANGE_ALIASES", "canonical_range", "canonical_ranges", "warmup_steps", "per_step_check", "range_rows"]

# Range names of the handout's annotated attention, and of its warm-up, in our names.
RANGE_ALIASES = {
    "scaled dot product attention": "scaled_dot_product_attention",
    "computing attention scores": "attention_scores",
    "computing softmax": "softmax",
    "final matmul": "attention_value",
    "optimizer step": "optimizer_step",
    "optimizer": "optimizer_step",
    "warm-up": "warmup",
    "warm up": "warmup",
}
# Ranges that open once in every step, warm-up or measured, in the order they are trusted.
_PER_STEP = ("forward", "optimizer_step", "backward")


def _num(value) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) or math.isinf(value) else value



def canonical_range(name: str) -> str:
    """Our name of an annotated range: the handout's names (``computing softmax``) map to ours."""
    key = re.sub(r"\s+", " ", str(name).strip().lower())
    return RANGE_ALIASES.get(key, RANGE_ALIASES.get(key.replace("_", " "), str(name)))


def canonical_ranges(frames: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    out = dict(frames)
    for key in ("nvtx_sum", "nvtx_kern_sum"):
        frame = frames.get(key)
        if frame is not None and "range" in frame:
            renamed = frame.copy()
            renamed["range"] = frame["range"].map({r: canonical_range(r) for r in frame["range"].unique()})
            out[key] = renamed
    return out


def warmup_steps(ranges: dict[str, dict], n: int) -> tuple[int, dict, list[str]]:
    """Warm-up steps in the export, counted from the ranges that open once per step.

    A profile may wrap every warm-up step in its own ``warmup`` range or all of them in one:
    the number of ``warmup`` ranges says neither. The phase ranges open once in every step,
    warm-up or measured, so their instances less the measured steps are the warm-up steps.
    """
    ranges_w = ranges.get("warmup", {}).get("instances", 0)
    per_step = [r for r in _PER_STEP if ranges.get(r, {}).get("instances")]
    notes: list[str] = []
    if not per_step:
        if ranges_w:
            notes.append(f"no phase range repeats once per step: the {ranges_w} 'warmup' range(s) are taken to be "
                         "one per warm-up step")
        return ranges_w, {"warmup_ranges": ranges_w, "steps": ranges_w, "counted_from": "warmup"}, notes
    by = per_step[0]
    w = max(ranges[by]["instances"] - n, 0)
    if ranges_w and w != ranges_w:
        notes.append(f"the export's {ranges_w} 'warmup' range(s) hold {w} warm-up step(s), counted from the "
                     f"'{by}' ranges, which open once per step")
    return w, {"warmup_ranges": ranges_w, "steps": w, "counted_from": by}, notes


def per_step_check(instances: dict[str, dict]) -> dict:
    """One verdict on the per-step figures: they hold only if every range opened as often as expected."""
    wrong = [f"{r} {v['observed']}/{v['expected']}" for r, v in instances.items() if not v["ok"]]
    if not wrong:
        return {"ok": True, "message": "every range opened as often as the steps imply"}
    return {"ok": False, "message": "per-step figures are unreliable: range instances observed/expected "
                                    + ", ".join(wrong)}


def range_rows(ranges: pd.DataFrame | None) -> dict[str, dict]:
    if ranges is None or ranges.empty:
        return {}
    out = {}
    for name, g in ranges.groupby("range", sort=False):
        instances = g["instances"].sum()
        out[str(name)] = {
            "instances": int(instances), "total_ns": _num(g["total_ns"].sum()),
            "avg_ns": _num(g["total_ns"].sum() / instances) if instances else None,
            "med_ns": _num(g["med_ns"].iloc[0]) if len(g) == 1 else None,
            "min_ns": _num(g["min_ns"].min()), "max_ns": _num(g["max_ns"].max()),
        }
    return out
