"""Two measured yardsticks of the DDP answers, read from the records: the noise of a training step
(pooled over the cells of one setting, from their per-step times), and the all-reduce's cost per call
``o`` and bandwidth ``w`` (from distributed_communication_single_node at the DDP cells' world size)."""

from __future__ import annotations

import math

import pandas as pd

from ..records.shapes import DDPTraining, typed
from .ddp import allreduce_frame


def step_noise(records: list[dict]) -> dict | None:
    """The noise of one step: the root-mean-square over the cells that ran of each cell's standard
    deviation of its per-step times (the slowest rank's, per step, of the cell's first run); None
    without two cells of two steps or more."""
    stds = []
    for r in records:
        if r["status"] != "ok":
            continue
        ranks = typed(r, DDPTraining).ranks
        steps = [max(rank["measured"][i]["step"] for rank in ranks) for i in range(len(ranks[0]["measured"]))]
        if len(steps) > 1:
            stds.append(float(pd.Series(steps).std()))
    if len(stds) < 2:
        return None
    return {"s": math.sqrt(sum(s * s for s in stds) / len(stds)), "cells": len(stds)}


def link_rates(records: list[dict], world: int) -> dict | None:
    """The NCCL all-reduce on ``world`` GPUs: ``w``, the algorithm bandwidth (bytes/s) of its largest
    measured size, and ``o``, the fixed cost of one call: the smallest size's time less its bytes at
    ``w`` (at least 0). None where no such all-reduce ran at two sizes or more."""
    df = allreduce_frame(records) if records else None
    if df is None or df.empty:
        return None
    calls = df[(df["status"] == "ok") & (df["backend"] == "nccl") & (df["world_size"] == world)]
    if calls["size_mb"].nunique() < 2:
        return None
    big, small = calls.loc[calls["size_mb"].idxmax()], calls.loc[calls["size_mb"].idxmin()]
    w = float(big["bytes"] / big["median_s"])
    return {"w_bytes_s": w, "o_s": max(0.0, float(small["median_s"] - small["bytes"] / w)),
            "w_size_mb": float(big["size_mb"]), "w_source": big["source"],
            "o_size_mb": float(small["size_mb"]), "o_latency_s": float(small["median_s"]),
            "o_source": small["source"], "world": world}
