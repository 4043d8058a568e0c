"""The memory timeline figure: allocated bytes over the recorded steps, stacked by category."""

from __future__ import annotations

import math

from .frame import CATEGORY_LABELS, MODE_LABELS, byte_unit, is_measured

PHASE_COLORS = {"forward": "#4C72B0", "backward": "#DD8452", "optimizer": "#55A868"}


def timeline_figure(rows: list, title: str):
    """Memory over time, one panel per cell: stacked by category, phases shaded, torch's peak dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    unit, scale = byte_unit([r["snap"]["peak"]["bytes"] for r in rows] + [r["peak_alloc"] for r in rows])
    fig, axes = plt.subplots(1, len(rows), figsize=(max(4.6 * len(rows), 8.0), 3.9), squeeze=False, sharey=True)
    cmap = plt.get_cmap("tab20")
    cats = list(CATEGORY_LABELS)
    colors = {c: ("#c8c8c8" if c == "Preexisting" else cmap(i % 20)) for i, c in enumerate(cats)}
    used = []
    for ax, r in zip(axes[0], rows):
        snap = r["snap"]
        tl = snap["timeline"]
        timed = bool(tl.get("t_us"))
        t0 = tl["t_us"][0] if timed and tl["t_us"] else 0
        x = [(t - t0) / 1e3 for t in tl["t_us"]] if timed else tl["x"]
        series = tl.get("by_category") or {}
        order = ["Preexisting"] + [c for c in cats if c != "Preexisting" and c in series] \
            + [c for c in series if c not in CATEGORY_LABELS]
        order = [c for c in order if c in series]
        if order:
            ax.stackplot(x, *[[v / scale for v in series[c]] for c in order], colors=[colors.get(c, "#888") for c in order],
                         linewidth=0)
            used += [c for c in order if c not in used]
        else:
            ax.plot(x, [v / scale for v in tl["y"]], color="black", linewidth=0.8)
        for p in snap["phases"]:
            if timed and p["start_us"] is not None:
                lo, hi = (p["start_us"] - t0) / 1e3, (p["end_us"] - t0) / 1e3
            else:
                lo, hi = p["start"], p["end"]
            ax.axvspan(lo, hi, color=PHASE_COLORS[p["phase"]], alpha=0.10, linewidth=0)
        starts = sorted({p["step"]: (p["start_us"] if timed else p["start"]) for p in snap["phases"]}.items())
        for step, start in starts[1:]:
            ax.axvline((start - t0) / 1e3 if timed else start, color="black", linewidth=0.6, linestyle=":")
        if is_measured(r["peak_alloc"]):
            ax.axhline(r["peak_alloc"] / scale, color="crimson", linewidth=0.8, linestyle="--")
        status = "" if r["status"] == "ok" else f" — {r['status'].upper()}"
        ax.set_title(f"{MODE_LABELS[r['label']]}{status}", fontsize="medium")
        ax.set_xlabel("time since recording started (ms)" if timed else "trace event")
        ax.grid(True, alpha=0.25)
    axes[0][0].set_ylabel(f"allocated ({unit})")
    handles = [Patch(color=colors.get(c, "#888"), label=CATEGORY_LABELS.get(c, c)) for c in used]
    handles += [Patch(color=PHASE_COLORS[p], alpha=0.25, label=f"{p} phase") for p in PHASE_COLORS]
    handles.append(matplotlib.lines.Line2D([], [], color="crimson", linestyle="--", label="torch peak counter"))
    ncol = 4
    fig.suptitle(title, fontsize="medium")
    fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize="x-small", frameon=False)
    # laid out when saved (RenderContext.figure), above the figure legend
    fig.set_layout_engine("tight", rect=(0, 0.045 * math.ceil(len(handles) / ncol) + 0.02, 1, 1))
    return fig
