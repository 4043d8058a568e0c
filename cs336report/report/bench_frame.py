"""The tidy frame of benchmarking records (one row per step-time result), for benchmarking_script and bf16."""

from __future__ import annotations

import math

import pandas as pd

MODE_COLUMNS = {"forward": "forward", "forward_backward": "forward + backward", "train_step": "train step"}


def phase_method(record: dict) -> str:
    """How a record's phases were timed: "events" (CUDA events inside its timed steps, which wait for
    nothing), "wall clock" (the same steps on a CPU, which runs what it issues), or "synchronized"
    (records from before the split moved inside the timed steps: a synchronize around every phase)."""
    if "between events" not in ((record.get("data") or {}).get("timing") or ""):
        return "synchronized"
    return "events" if str((record.get("config") or {}).get("device", "")).startswith("cuda") else "wall clock"


def phase_timing(frame: pd.DataFrame) -> str:
    """The one phase method of a frame's records (:func:`phase_method`), or "mixed"."""
    methods = set(frame["phase_method"])
    return methods.pop() if len(methods) == 1 else "mixed"


def frame(records: list[dict]) -> pd.DataFrame:
    """One tidy row per benchmarking result."""
    rows = []
    for r in records:
        c, d = r["config"], r["data"]
        stats = d.get("stats_s", {})
        phases = d.get("phase_stats_s", {})
        repeats = d.get("repeats") or {}  # the cell measured again in fresh processes: each run's mean
        runs_s = [m for m in repeats.get("means_s") or [] if m == m]
        rows.append({
            "implementation": c["implementation"], "precision": c["precision"], "size": c["size"],
            "context": c["context"], "mode": c["mode"], "warmup": c["warmup_steps"],
            "tf32": c["tf32"], "status": r["status"], "error": r.get("error"),
            "params": d.get("params"), "flops": d.get("flops_per_step"),
            "mean_s": stats.get("mean", math.nan), "std_s": stats.get("std", math.nan),
            "median_s": stats.get("median", math.nan), "noisy": stats.get("noisy", False),
            "forward_mean_s": phases.get("forward", {}).get("mean", math.nan),
            "forward_std_s": phases.get("forward", {}).get("std", math.nan),
            "backward_mean_s": phases.get("backward", {}).get("mean", math.nan),
            "backward_std_s": phases.get("backward", {}).get("std", math.nan),
            "optimizer_mean_s": phases.get("optimizer_step", {}).get("mean", math.nan),
            "tflops": d.get("tflops", math.nan), "phase_method": phase_method(r),
            "all_s": (d.get("times_s", {}).get("warmup_s", []) + d.get("times_s", {}).get("measured_s", [])),
            "measured_s": d.get("times_s", {}).get("measured_s", []),
            "source": r["_path"], "wall_s": r.get("wall_s"),
            "runs": max(len(runs_s), 1), "runs_s": runs_s,
            "runs_mean_s": (repeats.get("stats_s") or {}).get("mean", math.nan) if runs_s else math.nan,
            "runs_std_s": (repeats.get("stats_s") or {}).get("std", math.nan) if runs_s else math.nan,
        })
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    order = df.assign(_d=[r["config"]["model"]["d_model"] * r["config"]["model"]["num_layers"] for r in records])
    order = order.sort_values("_d")["size"].drop_duplicates().tolist()
    df["size"] = pd.Categorical(df["size"], categories=order, ordered=True)
    return df
