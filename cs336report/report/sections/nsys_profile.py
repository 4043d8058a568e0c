"""nsys_profile: where the GPU time of a forward pass and of a training step goes, by kernel.

Reads the parsed profiles (``results/nsys_parse/<cell>.json``, experiment ``nsys_profile``)
and, for question (a), the benchmarking_script results of the same cells. Every number the
template quotes is computed here from those records:

(a) the profiler's ``forward`` range against the Python timer around the same forward passes
    of the same (profiled) run; then, apart, that run against benchmarking_script's run of the
    cell without a profiler (a different process): forward time, kernel time and kernel launches;
(b) the kernel with the most time in the forward pass, its calls per forward pass, and its
    place among the kernels of forward + backward (training-step cells);
(c) the non-GEMM kernels with a non-trivial share of forward time;
(d) the GEMM share of kernel time in forward-only cells against full training steps, and the
    kernels and classes that gain share;
(e) softmax against the two attention matmuls: time ratio against FLOP ratio.
"""

from __future__ import annotations

import math

import pandas as pd

from ... import accounting
from ...kernels import CLASSES
from ...parsers.kernel_ranges import LAUNCH_API
from ...spec import ModelSpec
from ..plots import legend_outside
from ..tables import Cell, Table, fmt_count, fmt_pct, fmt_seconds, sig, status_cell

ID = "nsys_profile"
TITLE = "nsys_profile"
EXPERIMENTS = ("nsys_profile",)
POINTS = 5
SUBQUESTIONS = ("a", "b", "c", "d", "e")

MODE_LABELS = {"forward": "forward", "forward_backward": "forward + backward", "train_step": "train step"}
# A kernel (or class) is "non-trivial" when it takes at least this share of forward kernel time.
NON_TRIVIAL = 0.01
TOP_GAINS = 6
# A forward cell is GPU-bound when its kernels fill at least this share of benchmarking's forward time.
GPU_BOUND = 0.9
# Records parsed before the launch counts kept only the largest API rows, this many of them.
API_TOP = 8


def skip_reason(ctx) -> str:
    return "the active grid has no nsys_profile section"


def _order(records: list[dict]) -> list[str]:
    sizes = {}
    for r in records:
        m = r["config"].get("model") or {}
        sizes.setdefault(r["config"].get("size"), m.get("d_model", 0) * m.get("num_layers", 0))
    return [s for s, _ in sorted(sizes.items(), key=lambda kv: kv[1])]


def _launches(d: dict) -> tuple[float | None, float | None, bool]:
    """Kernel launch calls per measured step and their API time per step (ns), and whether exact.

    From the record's ``launches`` (the whole CUDA API summary); for a record parsed before
    those existed, from its ``api`` rows when they are the whole summary (fewer than the
    ``API_TOP`` rows kept) and the export held the measured steps only.
    """
    launches = d.get("launches")
    if launches:
        return launches.get("per_step"), launches.get("ns_per_step"), bool(launches.get("exact"))
    api, n = d.get("api") or [], d.get("measured_steps")
    outside = ((d.get("checks") or {}).get("kernels_outside_measured_steps") or {}).get("share")
    rows = [a for a in api if LAUNCH_API.match(str(a.get("name")))]
    if not rows or not n or len(api) >= API_TOP or not d.get("exact", True) or outside != 0:
        return None, None, False
    return sum(a["instances"] for a in rows) / n, sum(a["total_ns"] for a in rows) / n, True


def _forward_timer(data: dict) -> dict:
    return (data.get("phase_stats_s") or {}).get("forward") or {}


def _cv(stats: dict) -> float | None:
    return stats["std"] / stats["mean"] if _num(stats.get("std")) and stats.get("mean") else None


def cell_frame(records: list[dict], bench: list[dict]) -> pd.DataFrame:
    """One row per profiled cell: timings, sources, checks."""
    plain = {r["cell"]: r for r in bench}
    rows = []
    for r in records:
        c, d = r["config"], r["data"] or {}
        phases = d.get("phases") or {}
        ranges = d.get("ranges") or {}
        same_run = d.get("python_timer") or {}
        timer = same_run.get("stats_s") or {}
        fwd_timer = _forward_timer(same_run)
        tool = d.get("tool") or {}
        b = plain.get(r["cell"])
        b_data = (b or {}).get("data") or {}
        b_stats = b_data.get("stats_s") or {}
        b_fwd = _forward_timer(b_data)
        launches, launch_ns, launches_exact = _launches(d)
        rows.append({
            "cell": r["cell"], "size": c.get("size"), "context": c.get("context"), "mode": c.get("mode"),
            "status": r["status"], "error": r.get("error"), "source": d.get("source") or tool.get("source"),
            "activity": d.get("activity") or tool.get("activity"), "nsys_version": tool.get("nsys_version"),
            "torch_version": tool.get("torch_version"), "exact": d.get("exact", True),
            "measured_steps": d.get("measured_steps"), "warnings": d.get("warnings") or [],
            "empty_reason": d.get("empty_reason"),
            "step_wall_ns": (phases.get("step") or {}).get("wall_ns_per_step"),
            "step_kernel_ns": (phases.get("step") or {}).get("kernel_ns_per_step"),
            "forward_kernel_ns": (phases.get("forward") or {}).get("kernel_ns_per_step"),
            "fwd_range_med_ns": (ranges.get("forward") or {}).get("med_ns"),
            "step_range_med_ns": (ranges.get("step") or {}).get("med_ns"),
            "timer_mean_s": timer.get("mean"), "timer_std_s": timer.get("std"), "timer_med_s": timer.get("median"),
            "fwd_timer_med_s": fwd_timer.get("median"), "fwd_timer_min_s": fwd_timer.get("min"),
            "fwd_timer_max_s": fwd_timer.get("max"), "fwd_timer_cv": _cv(fwd_timer),
            "launches_per_step": launches, "launch_ns_per_step": launch_ns, "launches_exact": launches_exact,
            "plain_status": b["status"] if b else None,
            "plain_mean_s": b_stats.get("mean"), "plain_std_s": b_stats.get("std"),
            "plain_fwd_med_s": b_fwd.get("median"), "plain_fwd_min_s": b_fwd.get("min"),
            "plain_fwd_max_s": b_fwd.get("max"), "plain_fwd_cv": _cv(b_fwd), "plain_fwd_n": b_fwd.get("n"),
            "plain_wall_s": b.get("wall_s") if b else None, "plain_path": b.get("_path") if b else None,
            "profile_wall_s": tool.get("profile_wall_s"), "export_wall_s": tool.get("export_wall_s"),
            "checks": d.get("checks") or {}, "model": c.get("model"), "batch": c.get("batch_size"),
            "path": r.get("_path", ""),
        })
    df = pd.DataFrame(rows)
    if not df.empty:
        df["size"] = pd.Categorical(df["size"], categories=_order(records), ordered=True)
        df = df.sort_values(["size", "context", "mode"]).reset_index(drop=True)
    return df


def kernel_frame(records: list[dict]) -> pd.DataFrame:
    rows = []
    for r in records:
        if r["status"] != "ok":
            continue
        c = r["config"]
        for k in (r["data"] or {}).get("kernels", []):
            rows.append({"size": c.get("size"), "context": c.get("context"), "mode": c.get("mode"), **k})
    return pd.DataFrame(rows)


def class_frame(records: list[dict]) -> pd.DataFrame:
    rows = []
    for r in records:
        if r["status"] != "ok":
            continue
        c = r["config"]
        for k in (r["data"] or {}).get("classes", []):
            rows.append({"size": c.get("size"), "context": c.get("context"), "mode": c.get("mode"), **k})
    return pd.DataFrame(rows)


def _ms(ns) -> str:
    return "–" if ns is None or (isinstance(ns, float) and math.isnan(ns)) else sig(ns / 1e6)


def _span(values, fmt) -> str:
    """``lo to hi`` of formatted values, or the one value when they agree."""
    lo, hi = fmt(min(values)), fmt(max(values))
    return lo if lo == hi else f"{lo} to {hi}"


def _num(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def _key(size, context) -> tuple:
    return (str(size), int(context))


def _pick(kernels: pd.DataFrame, size, context, mode, rng) -> pd.DataFrame:
    if kernels.empty:
        return kernels
    sel = kernels[(kernels["size"].astype(str) == str(size)) & (kernels["context"] == context)
                  & (kernels["mode"] == mode) & (kernels["range"] == rng)]
    return sel.sort_values("total_ns", ascending=False)


def _forward_kernels(kernels: pd.DataFrame, size, context) -> pd.DataFrame:
    """Kernels of the forward pass: the forward-only cell if there is one, else a training step's forward range."""
    for mode in ("forward", "forward_backward", "train_step"):
        sel = _pick(kernels, size, context, mode, "forward")
        if not sel.empty:
            return sel
    return kernels.iloc[0:0]


def _fb_kernels(kernels: pd.DataFrame, size, context) -> tuple[pd.DataFrame, str | None]:
    """Kernels of forward + backward, summed per name, from a forward_backward or train_step cell."""
    for mode in ("forward_backward", "train_step"):
        sel = pd.concat([_pick(kernels, size, context, mode, r) for r in ("forward", "backward")])
        if not sel.empty and not _pick(kernels, size, context, mode, "backward").empty:
            out = (sel.groupby(["name", "short_name", "class"], as_index=False)[["total_ns", "per_step_instances"]]
                   .sum().sort_values("total_ns", ascending=False).reset_index(drop=True))
            out["share"] = out["total_ns"] / out["total_ns"].sum()
            return out, mode
    return kernels.iloc[0:0], None


# --------------------------------------------------------------------------- (a)

def _range_vs_timer(r) -> tuple[str, float, float] | None:
    """(range name, range median ns, same run's timer median s): the forward range against the
    forward timer; or the step range against the step timer for a record without the forward
    range's median, or whose export also holds warm-up steps (the forward range's median then
    covers warm-up forwards; the step range is the measured steps' only)."""
    if r["exact"] and _num(r["fwd_range_med_ns"]) and _num(r["fwd_timer_med_s"]):
        return "forward", r["fwd_range_med_ns"], r["fwd_timer_med_s"]
    if _num(r["step_range_med_ns"]) and _num(r["timer_med_s"]):
        return "step", r["step_range_med_ns"], r["timer_med_s"]
    return None


def _profiled_forward(cells: pd.DataFrame) -> pd.DataFrame:
    return cells[cells["mode"] == "forward"]


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
        rows.append((head, [Cell(_ms(range_ns)), Cell(sig(timer_s * 1e3)), Cell(sig(100 * diff, 2))], name))
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
    return a / b if _num(a) and _num(b) and b else None


def profiling_table(cells: pd.DataFrame) -> Table:
    """The profiled run against benchmarking_script's run of the same cell, forward-only cells."""
    rows, sources = [], []
    for _, r in _profiled_forward(cells).iterrows():
        sources.append(r["path"])
        if r["plain_path"]:
            sources.append(r["plain_path"])
        head = [Cell(str(r["size"])), Cell(str(r["context"]))]
        if r["plain_status"] != "ok" or not _num(r["plain_fwd_med_s"]):
            rows.append(head + [status_cell(r["plain_status"] or "missing")] * 8)
            continue
        plain = Cell(f"{sig(r['plain_fwd_med_s'] * 1e3)} ({sig(r['plain_fwd_min_s'] * 1e3)}–"
                     f"{sig(r['plain_fwd_max_s'] * 1e3)})")
        if r["status"] != "ok":
            rows.append(head + [plain] + [status_cell(r["status"])] * 7)
            continue
        ratio = _ratio(r["fwd_timer_med_s"], r["plain_fwd_med_s"])
        floor = _ratio(r["fwd_timer_min_s"], r["plain_fwd_min_s"])
        fill = _ratio(r["forward_kernel_ns"] / 1e9 if _num(r["forward_kernel_ns"]) else None, r["plain_fwd_med_s"])
        cv = (f"{sig(100 * r['fwd_timer_cv'], 2)} / {sig(100 * r['plain_fwd_cv'], 2)}"
              if _num(r["fwd_timer_cv"]) and _num(r["plain_fwd_cv"]) else "–")
        approx = "" if r["launches_exact"] else "≈"
        launches = Cell(approx + fmt_count(r["launches_per_step"]) if _num(r["launches_per_step"]) else "–")
        per_launch = _ratio(r["launch_ns_per_step"], r["launches_per_step"])
        api = Cell(f"{approx}{_ms(r['launch_ns_per_step'])} ({sig(per_launch / 1e3, 2)})" if per_launch else "–")
        rows.append(head + [
            plain, Cell(sig(ratio) if ratio else "–"), Cell(sig(floor) if floor else "–"), Cell(cv),
            Cell(_ms(r["forward_kernel_ns"])), Cell(sig(100 * fill) if fill else "–"), launches, api,
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
        note="Python timer around the forward pass over the measured steps of two processes: the profiled run and "
             "benchmarking_script's cell, which ran without a profiler. Kernel time: the profiled run's kernels "
             "per forward pass. Launches and launch API time: the kernel launch calls (cudaLaunchKernel and its "
             "variants) of the CUDA API summary per measured step, under the profiler; ≈: estimated from an "
             "export that holds more than the measured steps.")


def _group(g: pd.DataFrame) -> dict:
    return {"n": len(g), "ratio": _span(g["ratio"], sig), "ratio_median": sig(g["ratio"].median()),
            "floor": _span(g["floor"], sig), "cells": [f"{r['size']}/{r['context']}" for _, r in g.iterrows()]}


def timing_analysis(cells: pd.DataFrame) -> dict:
    """Numbers quoted under (a): range against the same run's timer, then the profiled process
    against benchmarking_script's."""
    fwd = cells[(cells["mode"] == "forward") & (cells["status"] == "ok")]
    out: dict = {}
    pairs = [(r, _range_vs_timer(r)) for _, r in fwd.iterrows()]
    pairs = [(r, p) for r, p in pairs if p]
    if pairs:
        diff = pd.Series([p[1] / 1e9 / p[2] - 1 for _, p in pairs])
        worst = pairs[int(diff.abs().idxmax())][0]
        out["range"] = {
            "n": len(pairs), "median_abs": fmt_pct(diff.abs().median(), 2), "max_abs": fmt_pct(diff.abs().max(), 2),
            "max_cell": f"{worst['size']}, context {worst['context']}", "n_longer": int((diff > 0).sum()),
            "n_step": sum(p[0] == "step" for _, p in pairs),
        }
    both = fwd[(fwd["plain_status"] == "ok") & fwd["fwd_timer_med_s"].map(_num) & fwd["plain_fwd_med_s"].map(_num)]
    if both.empty:
        return out
    both = both.assign(ratio=both["fwd_timer_med_s"] / both["plain_fwd_med_s"],
                       floor=both["fwd_timer_min_s"] / both["plain_fwd_min_s"],
                       fill=both["forward_kernel_ns"] / 1e9 / both["plain_fwd_med_s"])
    # GPU kernels only: a CPU profile's operator self times say nothing of waiting on the host
    kernels = both[both["activity"] != "cpu"]
    gpu, host = kernels[kernels["fill"] >= GPU_BOUND], kernels[kernels["fill"] < GPU_BOUND]
    steps = pd.concat([both["measured_steps"], both["plain_fwd_n"]]).dropna()
    slow: dict = {"n": len(both), "n_slower": int((both["ratio"] > 1).sum()), "ratio": _span(both["ratio"], sig),
                  "ratio_median": sig(both["ratio"].median()), "floor": _span(both["floor"], sig),
                  "steps": _span(steps, fmt_count) if len(steps) else None,
                  "bound": fmt_pct(GPU_BOUND, 2), "gpu": _group(gpu) if len(gpu) else None,
                  "host": _group(host) if len(host) else None}
    cv = both.dropna(subset=["fwd_timer_cv", "plain_fwd_cv"])
    if len(cv):
        hi, lo = cv.loc[cv["fwd_timer_cv"].idxmax()], cv.loc[cv["plain_fwd_cv"].idxmax()]
        slow["cv"] = {"profiled": fmt_pct(hi["fwd_timer_cv"], 2), "profiled_cell": f"{hi['size']}/{hi['context']}",
                      "plain": fmt_pct(lo["plain_fwd_cv"], 2), "plain_cell": f"{lo['size']}/{lo['context']}",
                      "steadier_without": bool(hi["fwd_timer_cv"] > lo["plain_fwd_cv"])}
    launch = both[both["launches_per_step"].map(_num) & both["launch_ns_per_step"].map(_num)]
    if len(launch):
        each_us = launch["launch_ns_per_step"] / launch["launches_per_step"] / 1e3
        slow["launches"] = {"n": len(launch), "per_forward": _span(launch["launches_per_step"], fmt_count),
                            "ms": _span(launch["launch_ns_per_step"] / 1e6, sig),
                            "us_each": _span(each_us, lambda x: sig(x, 2)),
                            "estimated": not launch["launches_exact"].all()}
        # Where the GPU is busy, a launch call also waits for room in the launch queue: its API time is
        # then the GPU's pace, not the cost of tracing. The tracing cost reads from the launch-bound cells.
        fill = launch["forward_kernel_ns"] / 1e9 / launch["plain_fwd_med_s"]
        waiting, traced = each_us[fill >= GPU_BOUND], each_us[fill < GPU_BOUND]
        if len(traced) and len(waiting):
            slow["launches"].update(us_each_launch_bound=_span(traced, lambda x: sig(x, 2)),
                                    us_each_gpu_bound_max=sig(waiting.max(), 2))
    out["slowdown"] = slow
    return out


def cost_table(cells: pd.DataFrame) -> Table:
    rows = []
    for _, r in cells.iterrows():
        ratio = (r["timer_mean_s"] / r["plain_mean_s"] if r["status"] == "ok" and r["plain_status"] == "ok"
                 and _num(r["timer_mean_s"]) else None)
        rows.append([
            Cell(str(r["size"])), Cell(str(r["context"])), Cell(MODE_LABELS.get(r["mode"], r["mode"])),
            Cell(sig(r["profile_wall_s"]) if _num(r["profile_wall_s"]) else "–", r["status"]),
            Cell(sig(r["export_wall_s"]) if _num(r["export_wall_s"]) else "–"),
            Cell(sig(r["plain_wall_s"]) if _num(r["plain_wall_s"]) else "–"),
            Cell(sig(ratio) if ratio else "–"),
        ])
    return Table(
        title="Cost of profiling: whole jobs",
        columns=["size", "context", "mode", "profiled run", "stats export", "same cell, no profiler",
                 "step time, profiled run / benchmarking's run, means"],
        units=["", "tokens", "", "s", "s", "s", "×"], rows=rows, sources=sorted(cells["path"]),
        note="Wall times of whole jobs: the profiled run includes starting the profiler and the process, building "
             "the model and writing the profile; the cell without a profiler is benchmarking_script's, which may "
             "run more steps. The step times are each process's Python timer.")


# --------------------------------------------------------------------------- (b)

def top_kernel_table(cells: pd.DataFrame, kernels: pd.DataFrame) -> tuple[Table, dict]:
    rows, facts = [], []
    for (size, context), _ in cells.groupby(["size", "context"], observed=True, sort=True):
        fwd = _forward_kernels(kernels, size, context)
        if fwd.empty:
            continue
        top = fwd.iloc[0]
        fb, fb_mode = _fb_kernels(kernels, size, context)
        row = [Cell(str(size)), Cell(str(context)), Cell(top["short_name"]), Cell(top["class"]),
               Cell(fmt_pct(top["share"])), Cell(fmt_count(top["per_step_instances"]))]
        fact = {"size": str(size), "context": int(context), "name": top["short_name"], "class": top["class"],
                "calls": top["per_step_instances"], "share": top["share"], "same": None}
        if fb_mode:
            fb_top = fb.iloc[0]
            rank = fb.index[fb["name"] == top["name"]]
            place = int(rank[0]) + 1 if len(rank) else None
            share = fb.loc[rank[0], "share"] if len(rank) else None
            fact.update(same=fb_top["name"] == top["name"], fb_top=fb_top["short_name"], fb_rank=place)
            row += [Cell(fb_top["short_name"]), Cell("yes" if fact["same"] else "no"),
                    Cell(f"{place} ({fmt_pct(share)})" if place else "absent")]
        else:
            row += [status_cell("missing")] * 3
        rows.append(row)
        facts.append(fact)
    table = Table(
        title="(b) The kernel with the most forward time, and forward + backward",
        columns=["size", "context", "top forward kernel", "class", "share of forward kernel time",
                 "calls per forward pass", "top kernel, forward + backward", "same kernel",
                 "forward's top kernel in forward + backward: rank (share)"],
        units=["", "tokens", "", "", "%", "", "", "", ""], rows=rows,
        sources=sorted(cells.loc[cells["status"] == "ok", "path"]),
        note="Calls per forward pass: the kernel's instances in the forward range divided by the measured steps. "
             "Forward + backward: the training-step cell's forward range plus its backward pass. Names are "
             "shortened; the result files hold the full names.")
    out: dict = {}
    if facts:
        f = pd.DataFrame(facts)
        out = {"n": len(f), "n_gemm": int((f["class"] == "gemm").sum()),
               "names": sorted(set(f["name"])), "n_same": int((f["same"] == True).sum()),  # noqa: E712
               "n_compared": int(f["same"].notna().sum())}
        calls = []
        for size, g in f.groupby("size", sort=False):
            cfg = cells.loc[cells["size"].astype(str) == size, "model"].iloc[0] or {}
            counts = sorted({fmt_count(c) for c in g["calls"]}, key=float)
            calls.append({"size": size, "calls": ", ".join(counts), "layers": cfg.get("num_layers"),
                          "contexts": len(g), "constant": len(counts) == 1})
        out["calls"] = calls
        out["calls_constant"] = all(c["constant"] for c in calls) and any(c["contexts"] > 1 for c in calls)
        moved = f[f["same"] == False]  # noqa: E712
        out["moved"] = [{"size": r["size"], "context": r["context"], "fb_top": r["fb_top"], "rank": r["fb_rank"]}
                        for _, r in moved.iterrows()]
    return table, out


# --------------------------------------------------------------------------- (c), (d)

def _reference(cells: pd.DataFrame, kernels: pd.DataFrame) -> tuple | None:
    """The cell whose kernels are listed: the smallest size at its longest context with forward kernels."""
    ok = cells[cells["status"] == "ok"]
    for size, g in ok.groupby("size", observed=True, sort=True):
        for context in sorted(g["context"], reverse=True):
            if not _forward_kernels(kernels, size, context).empty:
                return size, int(context)
    return None


def non_gemm_table(kernels: pd.DataFrame, ref: tuple) -> tuple[Table, list[dict]]:
    fwd = _forward_kernels(kernels, *ref)
    rest = fwd[(fwd["class"] != "gemm") & (fwd["share"] >= NON_TRIVIAL)]
    rows = [[Cell(k["short_name"]), Cell(k["class"]), Cell(fmt_pct(k["share"])),
             Cell(fmt_count(k["per_step_instances"])), Cell(fmt_seconds(k["avg_ns"] / 1e9))] for _, k in rest.iterrows()]
    table = Table(
        title=f"(c) Non-GEMM kernels with at least {fmt_pct(NON_TRIVIAL, 2)} of forward kernel time "
              f"({ref[0]}, context {ref[1]})",
        columns=["kernel", "class", "share of forward kernel time", "calls per forward pass", "average duration"],
        units=["", "", "%", "", ""], rows=rows, sources=[],
        note="Names are shortened; the result file holds the full names.")
    facts = [{"name": k["short_name"], "class": k["class"], "share": fmt_pct(k["share"])} for _, k in rest.head(5).iterrows()]
    return table, facts


def class_table(classes: pd.DataFrame, cells: pd.DataFrame) -> Table:
    """Share of kernel time per class: forward-only (forward range) and full step, per cell."""
    rows = []
    shown = [c for c in CLASSES if c in set(classes["class"])] if not classes.empty else []
    for _, r in cells[cells["status"] == "ok"].iterrows():
        rng = "forward" if r["mode"] == "forward" else "step"
        sel = classes[(classes["size"].astype(str) == str(r["size"])) & (classes["context"] == r["context"])
                      & (classes["mode"] == r["mode"]) & (classes["range"] == rng)].set_index("class")
        if sel.empty:
            continue
        rows.append([Cell(str(r["size"])), Cell(str(r["context"])), Cell(MODE_LABELS.get(r["mode"], r["mode"])),
                     Cell(_ms(sel["per_step_ns"].sum()))]
                    + [Cell(fmt_pct(sel.loc[c, "share"], 2) if c in sel.index else "0 %") for c in shown])
    return Table(
        title="Kernel time by class",
        columns=["size", "context", "cell", "kernel time per step"] + shown,
        units=["", "tokens", "", "ms"] + ["%"] * len(shown), rows=rows,
        sources=sorted(cells.loc[cells["status"] == "ok", "path"]),
        note="Forward cells: the forward range; training-step cells: every kernel of the step. Classes come "
             "from the kernel names (cs336report.kernels), so the softmax class holds only kernels named for a "
             "softmax (such as the loss's log-softmax); the model's hand-written softmax runs as exponential, "
             "subtraction, division, maximum and sum kernels, counted as elementwise and reduction here and "
             "within its own range in (e).")


def gemm_shift_table(classes: pd.DataFrame, cells: pd.DataFrame) -> tuple[Table, dict]:
    rows, facts = [], []

    def optimizer_share(size, context) -> float:
        """Kernel time of the optimizer_step range over that of the whole training step."""
        sel = classes[(classes["size"].astype(str) == str(size)) & (classes["context"] == context)
                      & (classes["mode"] == "train_step")]
        step = sel.loc[sel["range"] == "step", "total_ns"].sum()
        return sel.loc[sel["range"] == "optimizer_step", "total_ns"].sum() / step if step else 0.0

    def shares(size, context, mode, rng) -> pd.Series:
        sel = classes[(classes["size"].astype(str) == str(size)) & (classes["context"] == context)
                      & (classes["mode"] == mode) & (classes["range"] == rng)]
        return sel.set_index("class")["share"]

    for (size, context), g in cells[cells["status"] == "ok"].groupby(["size", "context"], observed=True, sort=True):
        modes = set(g["mode"])
        if "forward" not in modes or "train_step" not in modes:
            continue
        f, t = shares(size, context, "forward", "forward"), shares(size, context, "train_step", "step")
        if f.empty or t.empty:
            continue
        gain = t.sub(f, fill_value=0.0).drop("gemm", errors="ignore").sort_values(ascending=False)
        best = gain.index[0] if len(gain) else None
        fg, tg = f.get("gemm", 0.0), t.get("gemm", 0.0)
        opt = optimizer_share(size, context)
        rows.append([Cell(str(size)), Cell(str(context)), Cell(fmt_pct(fg)), Cell(fmt_pct(tg)),
                     Cell(sig(100 * (tg - fg), 2)), Cell(f"{best} (+{sig(100 * gain[best], 2)})" if best else "–"),
                     Cell(fmt_pct(opt))])
        facts.append({"size": str(size), "context": int(context), "fwd": fg, "train": tg, "best": best,
                      "best_gain": gain[best] if best else 0.0, "optimizer": opt})
    table = Table(
        title="(d) GEMM share of kernel time: forward only against a training step",
        columns=["size", "context", "GEMM, forward only", "GEMM, training step", "change",
                 "class gaining most (points)", "optimizer_step range, training step"],
        units=["", "tokens", "%", "%", "points", "", "%"], rows=rows,
        sources=sorted(cells.loc[cells["status"] == "ok", "path"]))
    out: dict = {}
    if facts:
        f = pd.DataFrame(facts)
        change = f["train"] - f["fwd"]
        out = {"n": len(f), "n_down": int((change < 0).sum()), "fwd": _span(f["fwd"], fmt_pct),
               "train": _span(f["train"], fmt_pct), "change": _span(100 * change, lambda x: sig(x, 2)),
               "best": f["best"].mode().iloc[0] if f["best"].notna().any() else None,
               "optimizer": _span(f["optimizer"], fmt_pct)}
    return table, out


def gain_table(kernels: pd.DataFrame, ref: tuple) -> tuple[Table | None, list[dict]]:
    fwd = _pick(kernels, *ref, "forward", "forward")
    step = _pick(kernels, *ref, "train_step", "step")
    if fwd.empty or step.empty:
        return None, []
    joined = step.set_index("name")[["short_name", "class", "share", "per_step_instances"]].join(
        fwd.set_index("name")[["share"]].rename(columns={"share": "fwd_share"}), how="left").fillna({"fwd_share": 0.0})
    joined["gain"] = joined["share"] - joined["fwd_share"]
    top = joined.sort_values("gain", ascending=False).head(TOP_GAINS)
    top = top[top["gain"] > 0]
    rows = [[Cell(k["short_name"]), Cell(k["class"]), Cell(fmt_pct(k["fwd_share"])), Cell(fmt_pct(k["share"])),
             Cell(sig(100 * k["gain"], 2)), Cell(fmt_count(k["per_step_instances"]))] for _, k in top.iterrows()]
    table = Table(
        title=f"(d) Kernels that gain share in a training step ({ref[0]}, context {ref[1]})",
        columns=["kernel", "class", "share, forward only", "share, training step", "gain", "calls per step"],
        units=["", "", "%", "%", "points", ""], rows=rows, sources=[],
        note="A share of 0 in the forward-only column: the kernel does not run in the forward pass.")
    facts = [{"name": k["short_name"], "class": k["class"], "gain": sig(100 * k["gain"], 2),
              "new": k["fwd_share"] == 0} for _, k in top.head(3).iterrows()]
    return table, facts


# --------------------------------------------------------------------------- (e)

def attention_table(cells: pd.DataFrame, kernels: pd.DataFrame) -> tuple[Table, dict]:
    rows, facts = [], []
    for _, r in cells[(cells["status"] == "ok")].iterrows():
        if r["mode"] != "forward" and not cells[(cells["size"] == r["size"]) & (cells["context"] == r["context"])
                                                & (cells["mode"] == "forward") & (cells["status"] == "ok")].empty:
            continue  # the forward-only cell of this size and context answers (e)
        pick = lambda rng: _pick(kernels, r["size"], r["context"], r["mode"], rng)  # noqa: E731
        scores, soft, value = pick("attention_scores"), pick("softmax"), pick("attention_value")
        if soft.empty:
            continue
        if not scores.empty and not value.empty:
            mm_scores = scores.loc[scores["class"] == "gemm", "per_step_ns"].sum()
            mm_value = value.loc[value["class"] == "gemm", "per_step_ns"].sum()
            matmul_ns = mm_scores + mm_value
        else:  # a user's attention function: one range around both matmuls and the softmax
            sdpa = pick("scaled_dot_product_attention")
            if sdpa.empty:
                continue
            mm_scores = mm_value = None
            matmul_ns = sdpa.loc[sdpa["class"] == "gemm", "per_step_ns"].sum()
        soft_ns = soft["per_step_ns"].sum()
        if not r["model"] or not _num(r["batch"]):
            continue  # parsed without its run's record: the batch, so the FLOPs, are unknown
        spec = ModelSpec(**r["model"])
        flops = accounting.attention_flops(spec, int(r["batch"]), int(r["context"]))
        if matmul_ns <= 0:
            continue
        time_ratio = soft_ns / matmul_ns
        matmul_flops = flops["attention_scores"] + flops["attention_value"]
        flop_ratio = flops["softmax"] / matmul_flops
        matmul_rate, soft_rate = matmul_flops / matmul_ns * 1e-3, flops["softmax"] / soft_ns * 1e-3  # TFLOP/s
        rows.append([Cell(str(r["size"])), Cell(str(r["context"])), Cell(_ms(mm_scores)), Cell(_ms(mm_value)),
                     Cell(_ms(matmul_ns)), Cell(_ms(soft_ns)), Cell(sig(time_ratio)), Cell(sig(flop_ratio)),
                     Cell(sig(time_ratio / flop_ratio)), Cell(sig(matmul_rate)), Cell(sig(soft_rate))])
        facts.append({"size": str(r["size"]), "context": int(r["context"]), "time_ratio": time_ratio,
                      "flop_ratio": flop_ratio, "per_flop": time_ratio / flop_ratio,
                      "matmul_rate": matmul_rate, "soft_rate": soft_rate,
                      "soft_kernels": soft["per_step_instances"].sum() / spec.num_layers})
    table = Table(
        title="(e) Softmax against the attention matmuls, per forward pass",
        columns=["size", "context", "QKᵀ matmul kernels", "PV matmul kernels", "both matmuls", "softmax kernels",
                 "time: softmax / matmuls", "FLOPs: softmax / matmuls", "time per FLOP: softmax / matmuls",
                 "matmuls' throughput", "softmax's throughput"],
        units=["", "tokens", "ms", "ms", "ms", "ms", "×", "×", "×", "TFLOP/s", "TFLOP/s"], rows=rows,
        sources=sorted(cells.loc[cells["status"] == "ok", "path"]),
        note=f"Times: GEMM kernels launched inside the attention_scores and attention_value ranges (for a model "
             f"with its own attention function, inside its scaled_dot_product_attention range, so only both "
             f"together), and every kernel inside the softmax range, summed over the layers of one forward pass. "
             f"FLOPs: {accounting.ATTENTION_FLOP_FORMULA}.")
    out: dict = {}
    if facts:
        f = pd.DataFrame(facts)
        out = {"n": len(f), "time": _span(f["time_ratio"], sig), "flop": _span(f["flop_ratio"], sig),
               "per_flop": _span(f["per_flop"], sig), "matmul_rate": _span(f["matmul_rate"], sig),
               "soft_rate": _span(f["soft_rate"], lambda x: sig(x, 2)),
               "soft_kernels": _span(f["soft_kernels"], fmt_count)}
    return table, out


# --------------------------------------------------------------------------- checks

def checks_table(cells: pd.DataFrame) -> tuple[Table, dict]:
    rows = []
    bad_instances = 0
    for _, r in cells.iterrows():
        head = [Cell(str(r["size"])), Cell(str(r["context"])), Cell(MODE_LABELS.get(r["mode"], r["mode"]))]
        if r["status"] != "ok" or r["empty_reason"]:
            rows.append(head + [status_cell(r["status"]) if r["status"] != "ok" else Cell(r["empty_reason"])] * 5)
            continue
        ch = r["checks"]
        phases = ch.get("phases_over_step_wall") or {}
        outside = ch.get("kernels_outside_measured_steps") or {}
        inst = ch.get("range_instances") or {}
        wrong = [f"{k} {v['observed']}/{v['expected']}" for k, v in inst.items() if not v["ok"]]
        bad_instances += bool(wrong)
        whole = (ch.get("forward_kernel_instances") or {}).get("share_whole_per_step")
        rows.append(head + [
            Cell(fmt_pct(phases["ratio"]) if phases else "–"),
            Cell(fmt_pct(outside["share"], 2) if outside else "–"),
            Cell("all as expected" if inst and not wrong else ("; ".join(wrong) if wrong else "–")),
            Cell(fmt_pct(whole) if whole is not None else "–"),
            Cell(("exact" if r["exact"] else "scaled from warm-up + measured") + ("" if (ch.get("per_step") or {}).get("ok", True) else f"; {ch['per_step']['message']}")),
        ])
    table = Table(
        title="Sanity checks",
        columns=["size", "context", "mode", "phase ranges / step range", "kernel time outside the measured steps",
                 "range instances (observed/expected)", "forward kernel time in whole calls per step",
                 "phase tables"],
        units=["", "tokens", "", "%", "%", "", "%", ""], rows=rows, sources=sorted(cells["path"]),
        note="Phase ranges / step range: forward + backward + optimizer_step range durations over the step range "
             "(in the workflow's runs each phase range includes the synchronization that ends it). Range "
             "instances: step = measured steps, a phase = one per step, an attention range = one per layer and "
             "step. Whole calls: the share of forward kernel time in kernels whose number of calls is a multiple "
             "of the number of steps.")
    ok = cells[(cells["status"] == "ok") & cells["empty_reason"].isna()]
    ratios = [c.get("phases_over_step_wall", {}).get("ratio") for c in ok["checks"]]
    ratios = [x for x in ratios if x is not None]
    out = {"n": len(ok), "bad_instances": bad_instances, "phases": _span(ratios, fmt_pct) if ratios else None}
    return table, out


def class_figure(classes: pd.DataFrame, cells: pd.DataFrame):
    """Stacked shares of kernel time by class, forward only and training step, one bar per size and context."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = [m for m in ("forward", "train_step") if m in set(cells["mode"])]
    fig, axes = plt.subplots(1, len(modes), figsize=(5.2 * len(modes), 0.5 + 0.32 * max(4, cells[["size", "context"]]
                             .drop_duplicates().shape[0])), squeeze=False, sharey=True)
    shown = [c for c in CLASSES if c in set(classes["class"])]
    colors = dict(zip(CLASSES, plt.get_cmap("tab10").colors))
    order = cells[["size", "context"]].drop_duplicates().sort_values(["size", "context"])
    labels = [f"{s} / {c}" for s, c in zip(order["size"], order["context"])]
    for ax, mode in zip(axes[0], modes):
        rng = "forward" if mode == "forward" else "step"
        sub = classes[(classes["mode"] == mode) & (classes["range"] == rng)]
        left = [0.0] * len(order)
        for cls in shown:
            vals = []
            for s, c in zip(order["size"], order["context"]):
                v = sub[(sub["size"].astype(str) == str(s)) & (sub["context"] == c) & (sub["class"] == cls)]["share"]
                vals.append(100 * float(v.sum()) if len(v) else 0.0)
            ax.barh(range(len(order)), vals, left=left, color=colors[cls], label=cls)
            left = [a + b for a, b in zip(left, vals)]
        ax.set_yticks(range(len(order)), labels)
        ax.invert_yaxis()
        ax.set_xlim(0, 100)
        ax.set_xlabel("share of kernel time (%)")
        ax.set_title("forward pass" if mode == "forward" else "training step")
    axes[0][0].set_ylabel("size / context (tokens)")
    legend_outside(axes[0][-1], fontsize="small")
    fig.tight_layout()
    return fig


def build(ctx) -> dict:
    records = ctx.records("nsys_profile")
    cells = cell_frame(records, ctx.records("benchmarking"))
    kernels = kernel_frame(records)
    classes = class_frame(records)
    ok = cells[cells["status"] == "ok"] if not cells.empty else cells
    sources = sorted({(r["source"], r["activity"], r["nsys_version"] or r["torch_version"]) for _, r in ok.iterrows()
                      if r["source"]})
    out: dict = {
        "n_cells": len(cells), "n_ok": len(ok),
        "sources": [{"source": s, "activity": a, "version": v} for s, a, v in sources],
        "cpu": bool(len(ok)) and set(ok["activity"]) == {"cpu"},
        "failed": [{"size": str(r["size"]), "context": int(r["context"]), "mode": MODE_LABELS.get(r["mode"], r["mode"]),
                    "status": "OOM" if r["status"] == "oom" else r["status"]}
                   for _, r in cells[cells["status"] != "ok"].iterrows()] if not cells.empty else [],
        "estimated": bool(len(ok)) and not ok["exact"].all(),
        "warnings": sorted({w for ws in ok["warnings"] for w in ws}) if len(ok) else [],
        "settings": ctx.settings("nsys_profile"),
        "attention_formula": accounting.ATTENTION_FLOP_FORMULA,
        "non_trivial": fmt_pct(NON_TRIVIAL, 2),
    }
    if cells.empty or kernels.empty:
        return out
    out["timing_table"] = timing_table(cells)
    out["profiling_table"] = profiling_table(cells)
    out["timing"] = timing_analysis(cells)
    out["cost_table"] = cost_table(cells)
    out["top_table"], out["top"] = top_kernel_table(cells, kernels)
    ref = _reference(cells, kernels)
    if ref:
        out["ref"] = {"size": str(ref[0]), "context": ref[1]}
        out["non_gemm_table"], out["non_gemm"] = non_gemm_table(kernels, ref)
        out["gain_table"], out["gains"] = gain_table(kernels, ref)
        ref_path = cells[(cells["size"].astype(str) == str(ref[0])) & (cells["context"] == ref[1])]["path"]
        out["non_gemm_table"].sources = sorted(ref_path)
        if out["gain_table"]:
            out["gain_table"].sources = sorted(ref_path)
    out["class_table"] = class_table(classes, cells)
    fwd_classes = classes[(classes["mode"] == "forward") & (classes["range"] == "forward")]
    if not fwd_classes.empty:
        non_gemm = 1 - fwd_classes[fwd_classes["class"] == "gemm"].groupby(["size", "context"], observed=True)["share"].sum()
        by_class = fwd_classes[fwd_classes["class"] != "gemm"].groupby("class")["share"].median().sort_values(ascending=False)
        out["non_gemm_share"] = {"span": _span(non_gemm, fmt_pct),
                                 "largest": by_class.index[0] if len(by_class) else None,
                                 "largest_median": fmt_pct(by_class.iloc[0]) if len(by_class) else None}
    out["shift_table"], out["shift"] = gemm_shift_table(classes, cells)
    out["attention_table"], out["attention"] = attention_table(cells, kernels)
    out["checks_table"], out["checks"] = checks_table(cells)
    if not classes.empty:
        out["figure"] = ctx.figure("nsys_profile_classes", class_figure(classes, ok),
                                   "Share of kernel time by class: the forward pass of forward-only cells, and the "
                                   "whole training step.")
    return out
