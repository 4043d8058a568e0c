"""nsys_profile's frames (cells, kernels, kernel classes), the kernel selections and formatting its parts share."""

from __future__ import annotations

import math

import pandas as pd

from ....parsers.kernel_ranges import LAUNCH_API
from ....parsers.kernel_records import kernel_frame as record_kernels
from ...tables import sig

MODE_LABELS = {"forward": "forward", "forward_backward": "forward + backward", "train_step": "train step"}

# Records parsed before the launch counts kept only the largest API rows, this many of them.
API_TOP = 8


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
    return stats["std"] / stats["mean"] if is_number(stats.get("std")) and stats.get("mean") else None


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
            "precision": c.get("precision"), "gpu": (r.get("provenance") or {}).get("gpu"),
            "path": r.get("_path", ""),
        })
    df = pd.DataFrame(rows)
    if not df.empty:
        df["size"] = pd.Categorical(df["size"], categories=_order(records), ordered=True)
        df = df.sort_values(["size", "context", "mode"]).reset_index(drop=True)
    return df


def kernel_frame(records: list[dict]) -> pd.DataFrame:
    """One row per (range, kernel) of every profiled cell that ran, with its size, context and mode."""
    frames = []
    for r in records:
        if r["status"] != "ok":
            continue
        c = r["config"]
        kernels = record_kernels((r["data"] or {}).get("kernels"))
        if kernels.empty:
            continue
        for column, value in (("mode", c.get("mode")), ("context", c.get("context")), ("size", c.get("size"))):
            kernels.insert(0, column, value)
        kernels["path"] = r.get("_path", "")
        frames.append(kernels)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def class_frame(records: list[dict]) -> pd.DataFrame:
    rows = []
    for r in records:
        if r["status"] != "ok":
            continue
        c = r["config"]
        for k in (r["data"] or {}).get("classes", []):
            rows.append({"size": c.get("size"), "context": c.get("context"), "mode": c.get("mode"), **k})
    return pd.DataFrame(rows)


def fmt_ms(ns) -> str:
    return "–" if ns is None or (isinstance(ns, float) and math.isnan(ns)) else sig(ns / 1e6)


def span(values, fmt) -> str:
    """``lo to hi`` of formatted values, or the one value when they agree."""
    lo, hi = fmt(min(values)), fmt(max(values))
    return lo if lo == hi else f"{lo} to {hi}"


def is_number(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))



def select_kernels(kernels: pd.DataFrame, size, context, mode, rng) -> pd.DataFrame:
    if kernels.empty:
        return kernels
    sel = kernels[(kernels["size"].astype(str) == str(size)) & (kernels["context"] == context)
                  & (kernels["mode"] == mode) & (kernels["range"] == rng)]
    return sel.sort_values("total_ns", ascending=False)


def forward_source(frame: pd.DataFrame) -> str:
    """The mode whose forward range answers the forward-pass questions: the forward-only cells where
    any was profiled, else the training steps (their ``forward`` NVTX range, as the handout's NVTX
    filters pick the forward pass out of a profile of the whole step). Only cells that ran count, as in
    the kernel and class frames, which hold those alone."""
    ran = frame[frame["status"] == "ok"] if "status" in frame else frame
    return "forward" if not ran.empty and (ran["mode"] == "forward").any() else "train_step"


def forward_kernels(kernels: pd.DataFrame, size, context) -> pd.DataFrame:
    """Kernels of the forward pass: the forward-only cell if there is one, else a training step's forward range."""
    for mode in ("forward", "forward_backward", "train_step"):
        sel = select_kernels(kernels, size, context, mode, "forward")
        if not sel.empty:
            return sel
    return kernels.iloc[0:0]


def fb_kernels(kernels: pd.DataFrame, size, context) -> tuple[pd.DataFrame, str | None]:
    """Kernels of forward + backward, summed per name, from a forward_backward or train_step cell."""
    for mode in ("forward_backward", "train_step"):
        sel = pd.concat([select_kernels(kernels, size, context, mode, r) for r in ("forward", "backward")])
        if not sel.empty and not select_kernels(kernels, size, context, mode, "backward").empty:
            out = (sel.groupby(["name", "short_name", "class"], as_index=False)[["total_ns", "per_step_instances"]]
                   .sum().sort_values("total_ns", ascending=False).reset_index(drop=True))
            out["share"] = out["total_ns"] / out["total_ns"].sum()
            return out, mode
    return kernels.iloc[0:0], None
