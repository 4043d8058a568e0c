"""nsys_profile's frames (cells, kernels, kernel classes), the kernel selections and formatting its parts share."""

from __future__ import annotations

import math

import pandas as pd

from ....parsers.kernel_ranges import LAUNCH_API
from ....parsers.kernel_records import kernel_frame as record_kernels
from ....records.shapes import NsysProfile, Stats, StepConfig, read_as, typed
from ...record_frame import record_frame
from ...tables import sig

MODE_LABELS = {"forward": "forward", "forward_backward": "forward + backward", "train_step": "train step"}

# Records parsed before the launch counts kept only the largest API rows, this many of them.
API_TOP = 8


def _order(records: list[dict]) -> list[str]:
    df = record_frame(records, {"size": "config.size", "d_model": "config.model.d_model",
                                "num_layers": "config.model.num_layers"}, defaults={"d_model": 0, "num_layers": 0})
    sizes = {}
    for size, d_model, num_layers in df.itertuples(index=False):
        sizes.setdefault(size, d_model * num_layers)
    return [s for s, _ in sorted(sizes.items(), key=lambda kv: kv[1])]


def _launches(d: NsysProfile) -> tuple[float | None, float | None, bool]:
    """Kernel launch calls per measured step and their API time per step (ns), and whether exact.

    From the record's ``launches`` (the whole CUDA API summary); for a record parsed before
    those existed, from its ``api`` rows when they are the whole summary (fewer than the
    ``API_TOP`` rows kept) and the export held the measured steps only.
    """
    if d.launches:
        return d.launches["per_step"], d.launches["ns_per_step"], bool(d.launches["exact"])
    api, n = d.api or [], d.measured_steps
    outside = ((d.checks or {}).get("kernels_outside_measured_steps") or {}).get("share")
    rows = [a for a in api if LAUNCH_API.match(str(a["name"]))]
    exact = True if d.exact is None else d.exact
    if not rows or not n or len(api) >= API_TOP or not exact or outside != 0:
        return None, None, False
    return sum(a["instances"] for a in rows) / n, sum(a["total_ns"] for a in rows) / n, True


def _forward_timer(phase_stats_s: dict | None) -> Stats:
    return read_as(Stats, (phase_stats_s or {}).get("forward"))


def _cv(stats: Stats) -> float | None:
    return stats.std / stats.mean if is_number(stats.std) and stats.mean else None


# A profiled cell's fields a row holds: column -> dotted path (record_frame); and those of its
# plain benchmarking record
CELL_FIELDS = {
    "cell": "cell", "size": "config.size", "context": "config.context", "mode": "config.mode", "status": "status",
    "error": "error", "source": "data.source", "tool_source": "data.tool.source", "activity": "data.activity",
    "tool_activity": "data.tool.activity", "nsys_version": "data.tool.nsys_version",
    "torch_version": "data.tool.torch_version", "exact": "data.exact", "measured_steps": "data.measured_steps",
    "empty_reason": "data.empty_reason", "step_wall_ns": "data.phases.step.wall_ns_per_step",
    "step_kernel_ns": "data.phases.step.kernel_ns_per_step", "forward_kernel_ns": "data.phases.forward.kernel_ns_per_step",
    "fwd_range_med_ns": "data.ranges.forward.med_ns", "step_range_med_ns": "data.ranges.step.med_ns",
    "timer_mean_s": "data.python_timer.stats_s.mean", "timer_std_s": "data.python_timer.stats_s.std",
    "timer_med_s": "data.python_timer.stats_s.median",
    "fwd_timer_med_s": "data.python_timer.phase_stats_s.forward.median",
    "fwd_timer_min_s": "data.python_timer.phase_stats_s.forward.min",
    "fwd_timer_max_s": "data.python_timer.phase_stats_s.forward.max",
    "profile_wall_s": "data.tool.profile_wall_s", "export_wall_s": "data.tool.export_wall_s",
    "batch": "config.batch_size", "precision": "config.precision", "gpu": "provenance.gpu", "path": "_path",
}
PLAIN_FIELDS = {
    "plain_status": "status", "plain_mean_s": "data.stats_s.mean", "plain_std_s": "data.stats_s.std",
    "plain_fwd_med_s": "data.phase_stats_s.forward.median", "plain_fwd_min_s": "data.phase_stats_s.forward.min",
    "plain_fwd_max_s": "data.phase_stats_s.forward.max", "plain_fwd_n": "data.phase_stats_s.forward.n",
    "plain_wall_s": "wall_s", "plain_path": "_path",
}
CELL_COLUMNS = [
    "cell", "size", "context", "mode", "status", "error", "source", "activity", "nsys_version", "torch_version",
    "exact", "measured_steps", "warnings", "empty_reason", "step_wall_ns", "step_kernel_ns", "forward_kernel_ns",
    "fwd_range_med_ns", "step_range_med_ns", "timer_mean_s", "timer_std_s", "timer_med_s", "fwd_timer_med_s",
    "fwd_timer_min_s", "fwd_timer_max_s", "fwd_timer_cv", "launches_per_step", "launch_ns_per_step",
    "launches_exact", "plain_status", "plain_mean_s", "plain_std_s", "plain_fwd_med_s", "plain_fwd_min_s",
    "plain_fwd_max_s", "plain_fwd_cv", "plain_fwd_n", "plain_wall_s", "plain_path", "profile_wall_s",
    "export_wall_s", "checks", "model", "batch", "precision", "gpu", "path",
]


def cell_frame(records: list[dict], bench: list[dict]) -> pd.DataFrame:
    """One row per profiled cell: timings, sources, checks."""
    plain = {r["cell"]: r for r in bench}
    if not records:
        return pd.DataFrame()
    df = record_frame(records, CELL_FIELDS, defaults={"exact": True})
    df["source"] = df["source"].where(df["source"].notna(), df.pop("tool_source"))
    df["activity"] = df["activity"].where(df["activity"].notna(), df.pop("tool_activity"))
    df["warnings"] = [typed(r).warnings or [] for r in records]
    df["checks"] = [typed(r).checks or {} for r in records]
    df["model"] = [read_as(StepConfig, r["config"]).model for r in records]
    df["fwd_timer_cv"] = [_cv(_forward_timer((typed(r).python_timer or {}).get("phase_stats_s"))) for r in records]
    df["launches_per_step"], df["launch_ns_per_step"], df["launches_exact"] = zip(*(_launches(typed(r)) for r in records))
    matched = [plain.get(r["cell"]) for r in records]
    found = [b for b in matched if b]
    b_df = record_frame(found, PLAIN_FIELDS).set_index(pd.Index([i for i, b in enumerate(matched) if b]))
    b_df = b_df.reindex(range(len(records))).astype(object)
    b_df = b_df.where(b_df.notna(), None)
    b_df["plain_fwd_cv"] = [_cv(_forward_timer(typed(b).phase_stats_s)) if b else None for b in matched]
    df = pd.concat([df, b_df], axis=1)
    rows = df[CELL_COLUMNS].astype(object).where(df[CELL_COLUMNS].notna(), None).to_dict("records")
    df = pd.DataFrame(rows)
    if not df.empty:
        df["size"] = pd.Categorical(df["size"], categories=_order(records), ordered=True)
        df = df.sort_values(["size", "context", "mode"]).reset_index(drop=True)
    return df


def kernel_frame(records: list[dict]) -> pd.DataFrame:
    """One row per (range, kernel) of every profiled cell that ran, with its size, context and mode."""
    frames = []
    for r, key in zip(records, _cell_keys(records)):
        if r["status"] != "ok":
            continue
        kernels = record_kernels(typed(r).kernels)
        if kernels.empty:
            continue
        for column in ("mode", "context", "size"):
            kernels.insert(0, column, key[column])
        kernels["path"] = r["_path"]
        frames.append(kernels)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def class_frame(records: list[dict]) -> pd.DataFrame:
    rows = []
    for r, key in zip(records, _cell_keys(records)):
        if r["status"] != "ok":
            continue
        for k in typed(r).classes or []:
            rows.append({**key, **k})
    return pd.DataFrame(rows)


def _cell_keys(records: list[dict]) -> list[dict]:
    """Each record's size, context and mode (None where its config lacks one), as its config holds them."""
    return record_frame(records, {"size": "config.size", "context": "config.context", "mode": "config.mode"},
                        exact=True).to_dict("records")


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
