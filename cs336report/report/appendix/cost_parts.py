"""Inside the cells: where a cell's time went besides its timed steps and first compiled calls.

Cells that record ``spent_s`` (:class:`cs336report.measure.timing.Spent`: the wall seconds of their named
parts) are summed per rule. ``steps`` and ``first_call`` are the timed work itself and are not
listed; ``do_bench`` counts only its calls besides the timed ones (its first call, the estimate, the
warm-up, and for Triton the autotuner's tuning of a new shape). A noisy cell's repeats in fresh
processes (``data.repeats.runs[].wall_s``) count as one more part, less the steps and first calls
the cost table counts of them. What no part names (in a fresh process, importing the experiment's
code; statistics, memory counters, the contention snapshots around the cell) is "unnamed". Time
outside the cell (process start-up, the warm worker's client and reset) is the cost table's job
time less the cell's own.
"""

from __future__ import annotations

import pandas as pd

from ..tables import Cell, Table, fmt_seconds
from .timed_steps import timed_seconds

# the parts of a cell, as the cost appendix names them
PART_LABELS = {
    "build": "model build",
    "graph_capture": "CUDA graph capture",
    "casts": "cast count (one profiled step)",
    "whole_steps": "steps again without phase timing",
    "kernel_steps": "kernel table steps",
    "kernels_alone": "host-bound check (profiled steps)",
    "precompile": "Triton candidates compiled ahead",
    "inputs": "inputs",
    "do_bench": "do_bench's calls besides the timed ones",
    "kernel_profile": "kernel profile of each pass",
    "memory": "memory read",
    "repeats": "repeats in fresh processes (start-up, build, warm-up)",
}
TIMED_PARTS = ("steps", "first_call")


def parts_frame(records: list[dict]) -> pd.DataFrame:
    """One row per rule and part (seconds summed over the rule's cells), of the records with ``spent_s``."""
    rows = []
    for r in records:
        data = r["data"]
        spent = data.get("spent_s")
        if not isinstance(spent, dict) or not spent:
            continue
        steps, compiled = timed_seconds(data)
        rule = r["experiment"]
        named = 0.0
        for part, seconds in spent.items():
            named += seconds
            if part in TIMED_PARTS:
                continue
            if part == "do_bench":  # the timed calls are among its calls
                seconds = max(seconds - steps, 0.0)
            rows.append({"rule": rule, "part": part, "s": float(seconds), "cell": r["cell"]})
        repeats = data.get("repeats")
        runs = [run for run in (repeats or {}).get("runs") or [] if isinstance(run, dict)]
        if any(isinstance(run.get("wall_s"), (int, float)) for run in runs):
            wall = sum(float(run.get("wall_s") or 0.0) for run in runs)
            rep_steps, rep_compiled = timed_seconds({"repeats": repeats})  # what the cost table counts as timed
            named += wall
            rows.append({"rule": rule, "part": "repeats", "s": max(wall - rep_steps - rep_compiled, 0.0),
                         "cell": r["cell"]})
        rows.append({"rule": rule, "part": "unnamed", "s": max(float(r.get("wall_s") or 0.0) - named, 0.0),
                     "cell": r["cell"]})
    return pd.DataFrame(rows, columns=["rule", "part", "s", "cell"])


def parts_table(records: list[dict]) -> Table | None:
    """Per rule: its cells, their time around the timed work and its parts, largest first; None when no
    record names its parts."""
    df = parts_frame(records)
    if df.empty:
        return None
    table_rows = []
    for rule, g in df.groupby("rule", sort=True):
        per_part = g.groupby("part")["s"].sum().sort_values(ascending=False)
        parts = ", ".join(f"{PART_LABELS.get(p, p.replace('_', ' '))} {fmt_seconds(s)}" for p, s in per_part.items()
                          if s >= 0.0005)
        table_rows.append([Cell(rule), Cell(str(g["cell"].nunique())), Cell(fmt_seconds(per_part.sum())),
                           Cell(parts or "–")])
    note = ("each cell times its parts with the wall clock; timed steps and first compiled calls are left out "
            "(do_bench: only its calls besides the timed ones: the first, the estimate, the warm-up and, for "
            "Triton, the autotuner's tuning of each new shape); repeats: a noisy cell's runs in fresh processes, "
            "less their measured steps; unnamed: the rest of the cell (in a fresh process, importing the "
            "experiment's code; statistics, memory counters, the contention snapshots around it); the process "
            "start-up and the worker's client and reset are outside the cell and not in this table")
    return Table(title="Inside the cells, around the timed work",
                 columns=["rule", "cells", "around the timed work", "parts, largest first"],
                 units=[""] * 4, rows=table_rows, sources=sorted(r["_path"] for r in records if "_path" in r),
                 note=note)
