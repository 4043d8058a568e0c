"""Summaries of a torch.profiler trace in the layout of ``nsys stats``.

When Nsight Systems is not available, the profiled cells run under ``torch.profiler`` with
``record_function`` ranges of the same names as the NVTX ranges, and the trace is exported
as Chrome trace JSON (``prof.export_chrome_trace``). This module turns that trace into the
three summaries ``nsys stats`` would give for it, as frames of the canonical schema of
:mod:`cs336report.parsers.nsys`:

``cuda_gpu_kern_sum``
    one row per kernel name: instances and total/avg/median/min/max/std duration (ns);
``nvtx_sum``
    one row per range name: instances and durations of the ranges themselves;
``nvtx_kern_sum``
    one row per (range, thread, kernel name): the kernels launched while the range was open
    on the launching thread, and a row with an empty range for kernels launched outside
    every range (nsys's attribution rule).

Which events are "kernels": on a CUDA device, the GPU kernel events (category ``kernel``),
each attributed to the thread and time of the runtime call that launched it (matched by
``correlation``). Without GPU kernels in the trace (a CPU run), the operators (``cpu_op``
events) with their self time on the CPU: an operator's duration minus that of the operators
called inside it, so that the times add up to the time spent in operators and a matmul's
time is ``aten::bmm``'s, not that of the ``aten::einsum`` around it.
``activity(trace)`` says which of the two a trace holds.

:func:`write_exports` writes frames as the CSV files ``nsys stats --format csv --output
PREFIX`` writes, with nsys's column labels, so that :func:`cs336report.parsers.nsys.parse_exports`
reads both sources the same way.

    trace = load_trace("results/nsys_profile/<job>/<cell>/trace.json.gz")
    write_exports(stats_from_trace(trace), "results/nsys_stats/<cell>/stats")
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["TraceError", "activity", "load_trace", "stats_from_trace", "write_exports"]

_KERNEL_CATS = {"kernel"}
_LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "runtime"}
_OP_CATS = {"cpu_op", "operator"}
_RANGE_CATS = {"user_annotation"}


class TraceError(ValueError):
    """A file that is not a torch.profiler Chrome trace."""


def load_trace(path: str | Path) -> dict:
    """Read a Chrome trace written by ``export_chrome_trace`` (plain or ``.gz``)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            trace = json.load(fh)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: not a readable Chrome trace ({exc})") from None
    if isinstance(trace, list):
        trace = {"traceEvents": trace}
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise TraceError(f"{path}: expected a JSON object with a 'traceEvents' list")
    return trace


def _events(trace: dict) -> pd.DataFrame:
    rows = []
    for e in trace["traceEvents"]:
        if not isinstance(e, dict) or e.get("ph") != "X" or "ts" not in e or "dur" not in e:
            continue
        args = e.get("args") or {}
        rows.append((str(e.get("cat", "")).lower(), str(e.get("name", "")), e.get("pid"), e.get("tid"),
                     int(round(float(e["ts"]) * 1000)), int(round(float(e["dur"]) * 1000)),
                     args.get("correlation")))
    return pd.DataFrame(rows, columns=["cat", "name", "pid", "tid", "start", "dur", "correlation"])


def activity(trace: dict) -> str:
    """``"cuda"`` when the trace holds GPU kernels, else ``"cpu"`` (operators timed on the CPU)."""
    events = _events(trace)
    return "cuda" if events["cat"].isin(_KERNEL_CATS).any() else "cpu"


def _self_times(ops: pd.DataFrame) -> pd.DataFrame:
    """Operators with their self time: duration minus that of the operators directly inside them."""
    out = []
    for _, group in ops.groupby("tid", sort=False):
        group = group.sort_values(["start", "dur"], ascending=[True, False]).copy()
        starts, durs = group["start"].to_numpy(), group["dur"].to_numpy()
        ends = starts + durs
        self_ns = durs.copy()
        stack: list[int] = []
        for i in range(len(group)):
            while stack and ends[stack[-1]] <= starts[i]:
                stack.pop()
            if stack:
                self_ns[stack[-1]] -= durs[i]
            stack.append(i)
        group["dur"] = self_ns.clip(min=0)
        out.append(group)
    return pd.concat(out) if out else ops.iloc[0:0]


def _kernels(events: pd.DataFrame) -> pd.DataFrame:
    """Kernel name, duration, and the thread and time at which it was launched."""
    kernels = events[events["cat"].isin(_KERNEL_CATS)]
    if kernels.empty:
        ops = _self_times(events[events["cat"].isin(_OP_CATS)])
        return pd.DataFrame({"name": ops["name"], "dur": ops["dur"], "pid": ops["pid"], "tid": ops["tid"],
                             "launch": ops["start"]}).reset_index(drop=True)
    launches = events[events["cat"].isin(_LAUNCH_CATS) & events["correlation"].notna()]
    launches = launches.drop_duplicates("correlation")[["correlation", "pid", "tid", "start"]].rename(
        columns={"pid": "launch_pid", "tid": "launch_tid", "start": "launch"})
    matched = kernels.merge(launches, on="correlation", how="left")
    return pd.DataFrame({
        "name": matched["name"], "dur": matched["dur"],
        "pid": matched["launch_pid"], "tid": matched["launch_tid"], "launch": matched["launch"],
    }).reset_index(drop=True)


def _stats(durations: pd.core.groupby.SeriesGroupBy) -> pd.DataFrame:
    out = durations.agg(total_ns="sum", instances="count", avg_ns="mean", med_ns="median", min_ns="min",
                        max_ns="max", std_ns="std")
    out["std_ns"] = out["std_ns"].fillna(0.0)
    return out


def _with_share(frame: pd.DataFrame) -> pd.DataFrame:
    total = frame["total_ns"].sum()
    frame.insert(0, "time_pct", 100.0 * frame["total_ns"] / total if total > 0 else 0.0)
    return frame.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)


def stats_from_trace(trace: dict, source: str = "<trace>") -> dict[str, pd.DataFrame]:
    """``cuda_gpu_kern_sum``, ``nvtx_sum`` and ``nvtx_kern_sum`` frames of a Chrome trace."""
    events = _events(trace)
    kernels = _kernels(events)
    ranges = events[events["cat"].isin(_RANGE_CATS)]

    kern_sum = _with_share(_stats(kernels.groupby("name")["dur"]).reset_index())
    nvtx_sum = _with_share(_stats(ranges.groupby("name")["dur"]).reset_index())
    nvtx_sum["range"] = nvtx_sum["name"]
    nvtx_sum["style"] = "PushPop"

    member_range, member_kernel = [], []
    launch_order = kernels.sort_values("launch")
    for tid, group in ranges.groupby("tid", sort=False):
        on_thread = launch_order[launch_order["tid"] == tid]
        times, index = on_thread["launch"].to_numpy(), on_thread.index.to_numpy()
        lo = np.searchsorted(times, group["start"].to_numpy(), side="left")
        hi = np.searchsorted(times, (group["start"] + group["dur"]).to_numpy(), side="left")
        for name, a, b in zip(group["name"], lo, hi):
            member_range.extend([name] * (b - a))
            member_kernel.extend(index[a:b])
    members = pd.DataFrame({"range": member_range, "kernel": member_kernel}).drop_duplicates()
    outside = kernels.index.difference(members["kernel"])
    members = pd.concat([members, pd.DataFrame({"range": "", "kernel": outside})], ignore_index=True)
    joined = members.join(kernels, on="kernel")
    per_range = _stats(joined.groupby(["range", "pid", "tid", "name"], dropna=False)["dur"]).reset_index()
    range_counts = ranges.groupby(["name", "tid"]).size()
    per_range["nvtx_instances"] = [
        int(range_counts.get((r, t), 0)) if r else 0 for r, t in zip(per_range["range"], per_range["tid"])
    ]
    per_range["style"] = np.where(per_range["range"] == "", "", "PushPop")
    nvtx_kern_sum = _with_share(per_range)

    for report, frame in (("cuda_gpu_kern_sum", kern_sum), ("nvtx_sum", nvtx_sum), ("nvtx_kern_sum", nvtx_kern_sum)):
        frame.attrs.update(report=report, source=source, format="trace", line=None, title=None)
    return {"cuda_gpu_kern_sum": kern_sum, "nvtx_sum": nvtx_sum, "nvtx_kern_sum": nvtx_kern_sum}


_STAT_LABELS = [("total_ns", "Total Time (ns)"), ("instances", "Instances"), ("avg_ns", "Avg (ns)"),
                ("med_ns", "Med (ns)"), ("min_ns", "Min (ns)"), ("max_ns", "Max (ns)"), ("std_ns", "StdDev (ns)")]
_LAYOUT = {
    "cuda_gpu_kern_sum": [("time_pct", "Time (%)")] + _STAT_LABELS + [("name", "Name")],
    "nvtx_sum": [("time_pct", "Time (%)")] + _STAT_LABELS + [("style", "Style"), ("range", "Range")],
    "nvtx_kern_sum": [("range", "NVTX Range"), ("style", "Style"), ("pid", "PID"), ("tid", "TID"),
                      ("nvtx_instances", "NVTX Inst"), ("instances", "Kern Inst")]
    + [c for c in _STAT_LABELS if c[0] != "instances"] + [("name", "Kernel Name")],
}


def write_exports(frames: dict[str, pd.DataFrame], prefix: str | Path) -> list[Path]:
    """Write frames as ``PREFIX_<report>.csv`` with the column labels of ``nsys stats``."""
    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    written = []
    for report, layout in _LAYOUT.items():
        if report not in frames:
            continue
        frame = frames[report]
        out = pd.DataFrame({label: frame[col] for col, label in layout})
        if "Time (%)" in out:
            out["Time (%)"] = out["Time (%)"].round(1)
        path = prefix.parent / f"{prefix.name}_{report}.csv"
        out.to_csv(path, index=False)
        written.append(path)
    return written
