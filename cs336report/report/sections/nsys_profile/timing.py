"""nsys_profile (a): the profiler's range against the Python timer, and what profiling costs."""

from __future__ import annotations

import pandas as pd

from ...tables import Cell, Num, Table, fmt_count, fmt_pct, sig, status_cell
from .frames import MODE_LABELS, fmt_ms, forward_source, is_number, span

# A forward cell is GPU-bound when its kernels fill at least this share of benchmarking's forward time.
GPU_BOUND = 0.9


def _range_vs_timer(r) -> tuple[str, float, float] | None:
    """(range name, range median ns, same run's timer median s): the forward range against the
    forward timer; or the step range against the step timer for a record without the forward
    range's median, or whose export also holds warm-up steps (the forward range's median then
    covers warm-up forwards; the step range is the measured steps' only)."""
    if r["exact"] and is_number(r["fwd_range_med_ns"]) and is_number(r["fwd_timer_med_s"]):
        return "forward", r["fwd_range_med_ns"], r["fwd_timer_med_s"]
    if is_number(r["step_range_med_ns"]) and is_number(r["timer_med_s"]):
        return "step", r["step_range_med_ns"], r["timer_med_s"]
    return None


def _profiled_forward(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells whose forward pass (a) times: forward-only cells, else the training steps' forward range."""
    return cells[cells["mode"] == forward_source(cells)]


def timing_table(cells: pd.DataFrame) -> Table:
    """(a) within the profiled run: the profiler's range against the Python timer of the same steps."""
    rows, sources, names = [], [], []
    for _, r in _profiled_forward(cells).iterrows():
        sources.append(r["path"])
        head = [Cell(str(r["size"])), Cell(str(r["context"]))]
        pair = _range_vs_timer(r) if r["status"] == "ok" else None
        if pair is None:
            rows.append((head, [status_cell(r["status"] if r["status"] != "ok" else "missing")] * 3, None))
            continue
        name, range_ns, timer_s = pair
        names.append(name)
        diff = range_ns / 1e9 / timer_s - 1
        rows.append((head, [Cell(fmt_ms(range_ns)), Cell(sig(timer_s * 1e3)), Cell(sig(100 * diff, 2))], name))
    fallback = any(n == "step" for n in names)
    columns = ["size", "context"] + (["range"] if fallback else []) + [
        "profiler's range, median", "Python timer of the same run, median", "range against timer"]
    units = ["", "tokens"] + ([""] if fallback else []) + ["ms", "ms", "%"]
    note = ("Both columns are the profiled run's own measurements of its measured steps: the median duration of the "
            "forward range, and the median of the Python timer around the same forward passes, whose "
            "synchronizations the range encloses.")
    if fallback:
        note += (" Range 'step': the record has no median of the forward range over the measured steps alone (its "
                 "export also holds warm-up steps, or an older parser wrote it), so the step range is compared "
                 "with the same run's step timer.")
    return Table(
        title="(a) Forward pass: the profiler's range against the Python timer of the same run",
        columns=columns, units=units, sources=sorted(set(sources)), note=note,
        rows=[head + ([Cell(name or "–")] if fallback else []) + rest for head, rest, name in rows])


def _ratio(a, b) -> float | None:
    return a / b if is_number(a) and is_number(b) and b else None


def profiling_table(cells: pd.DataFrame) -> Table:
    """The profiled run against benchmarking_script's run of the same cell, forward-only cells."""
    rows, sources = [], []
    for _, r in _profiled_forward(cells).iterrows():
        if not isinstance(r["plain_path"], str) or not r["plain_path"]:
            continue  # benchmarking_script's grid has no such cell (the handout grid times one context)
        sources += [r["path"], r["plain_path"]]
        head = [Cell(str(r["size"])), Cell(str(r["context"]))]
        if r["plain_status"] != "ok" or not is_number(r["plain_fwd_med_s"]):
            rows.append(head + [status_cell(r["plain_status"] or "missing")] * 8)
            continue
        plain = Cell(f"{sig(r['plain_fwd_med_s'] * 1e3)} ({sig(r['plain_fwd_min_s'] * 1e3)}–"
                     f"{sig(r['plain_fwd_max_s'] * 1e3)})")
        if r["status"] != "ok":
            rows.append(head + [plain] + [status_cell(r["status"])] * 7)
            continue
        ratio = _ratio(r["fwd_timer_med_s"], r["plain_fwd_med_s"])
        floor = _ratio(r["fwd_timer_min_s"], r["plain_fwd_min_s"])
        fill = _ratio(r["forward_kernel_ns"] / 1e9 if is_number(r["forward_kernel_ns"]) else None, r["plain_fwd_med_s"])
        cv = (f"{sig(100 * r['fwd_timer_cv'], 2)} / {sig(100 * r['plain_fwd_cv'], 2)}"
              if is_number(r["fwd_timer_cv"]) and is_number(r["plain_fwd_cv"]) else "–")
        approx = "" if r["launches_exact"] else "≈"
        # a training step's launch counts are the whole step's: no per-forward figure to give
        per_forward = r["mode"] == "forward" and is_number(r["launches_per_step"])
        launches = Cell(approx + fmt_count(r["launches_per_step"]) if per_forward else "–")
        per_launch = _ratio(r["launch_ns_per_step"], r["launches_per_step"]) if per_forward else None
        api = Cell(f"{approx}{fmt_ms(r['launch_ns_per_step'])} ({sig(per_launch / 1e3, 2)})" if per_launch else "–")
        rows.append(head + [
            plain, Cell(sig(ratio) if ratio else "–"), Cell(sig(floor) if floor else "–"), Cell(cv),
            Cell(fmt_ms(r["forward_kernel_ns"])), Cell(sig(100 * fill) if fill else "–"), launches, api,
        ])
    return Table(
        title="Cost of profiling: the forward pass under the profiler against benchmarking_script's run",
        columns=["size", "context", "forward, benchmarking's run: median (min–max)",
                 "profiled run / benchmarking's run, medians", "the same, fastest steps",
                 "steps' coefficient of variation: profiled / benchmarking's run", "kernel time per forward",
                 "kernel time / benchmarking's forward", "kernel launches per forward",
                 "launch API time per forward (per launch)"],
        units=["", "tokens", "ms", "×", "×", "%", "ms", "%", "", "ms (µs)"], rows=rows,
        sources=sorted(set(sources)),
        note="the forward phase's time over the measured steps of two processes: the profiled run's, between "
             "synchronizations around the phase, and benchmarking_script's cell's, which ran without a profiler, "
             "between CUDA events recorded inside its timed steps (two methods: part of a ratio can be theirs). Kernel time: the profiled run's kernels "
             "per forward pass. Launches and launch API time: the kernel launch calls (cudaLaunchKernel and its "
             "variants) of the CUDA API summary per measured step, under the profiler; ≈: estimated from an "
             "export that holds more than the measured steps.")


def _group(g: pd.DataFrame) -> dict:
    return {"n": len(g), "ratio": span(g["ratio"], sig), "ratio_median": sig(g["ratio"].median()),
            "floor": span(g["floor"], sig), "cells": [f"{r['size']}/{r['context']}" for _, r in g.iterrows()]}


def timing_analysis(cells: pd.DataFrame) -> dict:
    """Numbers quoted under (a): range against the same run's timer, then the profiled process
    against benchmarking_script's."""
    fwd = _profiled_forward(cells)
    fwd = fwd[fwd["status"] == "ok"]
    out: dict = {"from_step": forward_source(cells) == "train_step"}
    pairs = [(r, _range_vs_timer(r)) for _, r in fwd.iterrows()]
    pairs = [(r, p) for r, p in pairs if p]
    if pairs:
        diff = pd.Series([p[1] / 1e9 / p[2] - 1 for _, p in pairs])
        worst = pairs[int(diff.abs().idxmax())][0]
        out["range"] = {
            "n": len(pairs), "median_abs": fmt_pct(diff.abs().median(), 2),
            "max_abs": Num(fmt_pct(diff.abs().max(), 2), worst["path"] or None),
            "max_cell": f"{worst['size']}, context {worst['context']}", "n_longer": int((diff > 0).sum()),
            "n_step": sum(p[0] == "step" for _, p in pairs),
        }
        forward = [(r, p) for r, p in pairs if p[0] == "forward"]
        if forward:  # the forward pass's own time, shortest and longest cell: the range and the timer
            ends = [min(forward, key=lambda x: x[1][1]), max(forward, key=lambda x: x[1][1])]
            out["range"]["forward_ms"] = [{"cell": f"{r['size']} at context {r['context']}",
                                           "range": Num(fmt_ms(p[1]), r["path"] or None),
                                           "timer": Num(sig(p[2] * 1e3), r["path"] or None)} for r, p in ends]
    both = fwd[(fwd["plain_status"] == "ok") & fwd["fwd_timer_med_s"].map(is_number)
               & fwd["plain_fwd_med_s"].map(is_number)]
    if both.empty:
        return out
    both = both.assign(ratio=both["fwd_timer_med_s"] / both["plain_fwd_med_s"],
                       floor=both["fwd_timer_min_s"] / both["plain_fwd_min_s"],
                       fill=both["forward_kernel_ns"] / 1e9 / both["plain_fwd_med_s"])
    # GPU kernels only: a CPU profile's operator self times say nothing of waiting on the host
    kernels = both[both["activity"] != "cpu"]
    gpu, host = kernels[kernels["fill"] >= GPU_BOUND], kernels[kernels["fill"] < GPU_BOUND]
    steps = pd.concat([both["measured_steps"], both["plain_fwd_n"]]).dropna()
    slow: dict = {"n": len(both), "n_slower": int((both["ratio"] > 1).sum()), "ratio": span(both["ratio"], sig),
                  "ratio_median": sig(both["ratio"].median()), "floor": span(both["floor"], sig),
                  "steps": span(steps, fmt_count) if len(steps) else None,
                  "bound": fmt_pct(GPU_BOUND, 2), "gpu": _group(gpu) if len(gpu) else None,
                  "host": _group(host) if len(host) else None}
    cv = both.dropna(subset=["fwd_timer_cv", "plain_fwd_cv"])
    if len(cv):
        hi, lo = cv.loc[cv["fwd_timer_cv"].idxmax()], cv.loc[cv["plain_fwd_cv"].idxmax()]
        slow["cv"] = {"profiled": fmt_pct(hi["fwd_timer_cv"], 2), "profiled_cell": f"{hi['size']}/{hi['context']}",
                      "plain": fmt_pct(lo["plain_fwd_cv"], 2), "plain_cell": f"{lo['size']}/{lo['context']}",
                      "n": len(cv), "n_less_steady": int((cv["fwd_timer_cv"] > cv["plain_fwd_cv"]).sum())}
    launch = both[both["launches_per_step"].map(is_number) & both["launch_ns_per_step"].map(is_number)]
    if len(launch) and not out["from_step"]:  # a training step's launches are the whole step's, not a forward's
        each_us = launch["launch_ns_per_step"] / launch["launches_per_step"] / 1e3
        slow["launches"] = {"n": len(launch), "per_forward": span(launch["launches_per_step"], fmt_count),
                            "ms": span(launch["launch_ns_per_step"] / 1e6, sig),
                            "us_each": span(each_us, lambda x: sig(x, 2)),
                            "estimated": not launch["launches_exact"].all()}
        # Where the GPU is busy, a launch call also waits for room in the launch queue: its API time is
        # then the GPU's pace, not the cost of tracing. The tracing cost reads from the launch-bound cells.
        fill = launch["forward_kernel_ns"] / 1e9 / launch["plain_fwd_med_s"]
        waiting, traced = each_us[fill >= GPU_BOUND], each_us[fill < GPU_BOUND]
        if len(traced) and len(waiting):
            slow["launches"].update(us_each_launch_bound=span(traced, lambda x: sig(x, 2)),
                                    us_each_gpu_bound_max=sig(waiting.max(), 2))
    out["slowdown"] = slow
    return out


def cost_table(cells: pd.DataFrame) -> Table:
    rows = []
    for _, r in cells.iterrows():
        ratio = (r["timer_mean_s"] / r["plain_mean_s"] if r["status"] == "ok" and r["plain_status"] == "ok"
                 and is_number(r["timer_mean_s"]) else None)
        rows.append([
            Cell(str(r["size"])), Cell(str(r["context"])), Cell(MODE_LABELS.get(r["mode"], r["mode"])),
            Cell(sig(r["profile_wall_s"]) if is_number(r["profile_wall_s"]) else "–", r["status"]),
            Cell(sig(r["export_wall_s"]) if is_number(r["export_wall_s"]) else "–"),
            Cell(sig(r["plain_wall_s"]) if is_number(r["plain_wall_s"]) else "–"),
            Cell(sig(ratio) if ratio else "–"),
        ])
    return Table(
        title="Cost of profiling: whole jobs",
        columns=["size", "context", "mode", "profiled run", "stats export", "same cell, no profiler (the cell alone)",
                 "step time, profiled run / benchmarking's run, means"],
        units=["", "tokens", "", "s", "s", "s", "×"], rows=rows, sources=sorted(cells["path"]),
        note="The profiled run is a whole job: starting the profiler and the process, building the model, the "
             "steps and writing the profile. The cell without a profiler is benchmarking_script's, its record's "
             "own wall time: the cell alone, without the start of the process that ran it (a warm worker ran "
             "most), and it may run more steps; the two columns are not a profiler's cost. The step times are "
             "each process's Python timer.")
