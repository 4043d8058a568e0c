"""The attention scaling figure: time and memory against sequence length, log-log."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from ...plots import legend_outside  # noqa: E402
from .frame import label  # noqa: E402


def scaling_figure(df: pd.DataFrame, memory_key: str):
    """Log-log: forward time, backward time and memory against seq; colour = d_head, line style = implementation."""
    ok = df[df["status"] == "ok"]
    ds = sorted(ok["d"].unique())
    colours = {d: plt.cm.tab10(i % 10) for i, d in enumerate(ds)}
    styles = ["-", "--", ":", "-.", (0, (1, 1)), (0, (5, 1))]
    markers = ["o", "s", "^", "D", "v", "P"]
    variants = list(dict.fromkeys(zip(ok["variant"].astype(str), ok["dtype"])))
    memory_label = ("in use before backward, less inputs (MiB)" if memory_key == "activation_bytes"
                    else "saved for backward (MiB)")
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    panels = (("fwd_mean_s", "forward pass", "time per pass (ms)", 1e3),
              ("bwd_mean_s", "backward pass", "time per pass (ms)", 1e3),
              (memory_key, "memory", memory_label, 2.0**-20))
    for ax, (column, title, ylabel, scale) in zip(axes, panels):
        for i, (variant, dtype) in enumerate(variants):
            for d in ds:
                g = ok[(ok["variant"].astype(str) == variant) & (ok["dtype"] == dtype) & (ok["d"] == d)]
                g = g.sort_values("seq")
                if g[column].notna().any():
                    ax.plot(g["seq"], g[column] * scale, marker=markers[i % len(markers)], markersize=3,
                            color=colours[d], linestyle=styles[i % len(styles)])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length (tokens)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    handles = [plt.Line2D([], [], color=colours[d], marker="o", label=f"d_head {d}") for d in ds]
    handles += [plt.Line2D([], [], color="grey", linestyle=styles[i % len(styles)], marker=markers[i % len(markers)],
                           label=label(v, dt))
                for i, (v, dt) in enumerate(variants)]
    legend_outside(axes[-1], handles=handles, fontsize="small")
    return fig
