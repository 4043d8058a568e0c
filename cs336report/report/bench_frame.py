"""The tidy frame of benchmarking records (one row per step-time result), for benchmarking_script and bf16."""

from __future__ import annotations

import math

import pandas as pd

from ..records.shapes import StepConfig, StepTimes, read_as, typed
from .record_frame import record_frame

MODE_COLUMNS = {"forward": "forward", "forward_backward": "forward + backward", "train_step": "train step"}


def phase_method(record: dict) -> str:
    """How a record's phases were timed: "events" (CUDA events inside its timed steps, which wait for
    nothing), "wall clock" (the same steps on a CPU, which runs what it issues), or "synchronized"
    (records from before the split moved inside the timed steps: a synchronize around every phase)."""
    if "between events" not in (typed(record, StepTimes).timing or ""):
        return "synchronized"
    return "events" if str(read_as(StepConfig, record["config"]).device or "").startswith("cuda") else "wall clock"


def phase_timing(frame: pd.DataFrame) -> str:
    """The one phase method of a frame's records (:func:`phase_method`), or "mixed"."""
    methods = set(frame["phase_method"])
    return methods.pop() if len(methods) == 1 else "mixed"


# The fields of a benchmarking record a row holds: column -> dotted path (record_frame)
FIELDS = {
    "implementation": "config.implementation", "precision": "config.precision", "size": "config.size",
    "context": "config.context", "mode": "config.mode", "warmup": "config.warmup_steps", "tf32": "config.tf32",
    "status": "status", "error": "error", "params": "data.params", "flops": "data.flops_per_step",
    "mean_s": "data.stats_s.mean", "std_s": "data.stats_s.std", "median_s": "data.stats_s.median",
    "noisy": "data.stats_s.noisy",
    "forward_mean_s": "data.phase_stats_s.forward.mean", "forward_std_s": "data.phase_stats_s.forward.std",
    "backward_mean_s": "data.phase_stats_s.backward.mean", "backward_std_s": "data.phase_stats_s.backward.std",
    "optimizer_mean_s": "data.phase_stats_s.optimizer_step.mean",
    "optimizer_std_s": "data.phase_stats_s.optimizer_step.std", "tflops": "data.tflops",
    "source": "_path", "wall_s": "wall_s",
    # the cell measured again in fresh processes: each run's mean, and their statistics
    "runs_mean_s": "data.repeats.stats_s.mean", "runs_std_s": "data.repeats.stats_s.std",
}


def frame(records: list[dict]) -> pd.DataFrame:
    """One tidy row per benchmarking result."""
    if not records:
        return pd.DataFrame()
    nan = dict.fromkeys(("mean_s", "std_s", "median_s", "forward_mean_s", "forward_std_s", "backward_mean_s",
                         "backward_std_s", "optimizer_mean_s", "optimizer_std_s", "tflops", "runs_mean_s", "runs_std_s"), math.nan)
    df = record_frame(records, FIELDS, defaults={**nan, "noisy": False})
    times = [typed(r).times_s or {} for r in records]
    df["all_s"] = [t.get("warmup_s", []) + t.get("measured_s", []) for t in times]
    df["measured_s"] = [t.get("measured_s", []) for t in times]
    df["phase_method"] = [phase_method(r) for r in records]
    runs = [[m for m in (typed(r).repeats or {}).get("means_s") or [] if m == m] for r in records]
    df["runs"], df["runs_s"] = [max(len(r), 1) for r in runs], runs
    df.loc[[not r for r in runs], ["runs_mean_s", "runs_std_s"]] = math.nan
    df = df[["implementation", "precision", "size", "context", "mode", "warmup", "tf32", "status", "error", "params",
             "flops", "mean_s", "std_s", "median_s", "noisy", "forward_mean_s", "forward_std_s", "backward_mean_s",
             "backward_std_s", "optimizer_mean_s", "optimizer_std_s", "tflops", "phase_method", "all_s", "measured_s", "source", "wall_s",
             "runs", "runs_s", "runs_mean_s", "runs_std_s"]]
    order = df.assign(_d=[r["config"]["model"]["d_model"] * r["config"]["model"]["num_layers"] for r in records])
    order = order.sort_values("_d")["size"].drop_duplicates().tolist()
    df["size"] = pd.Categorical(df["size"], categories=order, ordered=True)
    return df
