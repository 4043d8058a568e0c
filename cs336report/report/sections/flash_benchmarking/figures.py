"""flash_benchmarking's figures: latency and peak memory against sequence length, log-log."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ....names.flash import IMPLEMENTATIONS, PASSES
from .frames import ORDER, PASS_LABELS, present_implementations


def latency_figure(df: pd.DataFrame, dtype: str):
    """Log-log latency against seq: one row of panels per pass, one column per d_head, one line per implementation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sub = df[(df["dtype"] == dtype) & (df["status"] == "ok")]
    ds = sorted(set(df[df["dtype"] == dtype]["d"]))
    impls = present_implementations(df[df["dtype"] == dtype])
    colors = {impl: plt.get_cmap("tab10")(i % 10) for i, impl in enumerate(ORDER)}
    fig, axes = plt.subplots(len(PASSES), len(ds), figsize=(3.4 * len(ds), 2.8 * len(PASSES)), squeeze=False,
                             sharex=True, sharey="row")
    for row, p in enumerate(PASSES):
        for col, d in enumerate(ds):
            ax = axes[row][col]
            for impl in impls:
                g = sub[(sub["pass"] == p) & (sub["d"] == d) & (sub["implementation"] == impl)].sort_values("seq")
                if not g.empty:
                    ax.plot(g["seq"], g["median_s"] * 1e3, marker="o", markersize=3, color=colors[impl],
                            label=IMPLEMENTATIONS[impl])
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            if row == 0:
                ax.set_title(f"d_head {d}")
            if row == len(PASSES) - 1:
                ax.set_xlabel("sequence length (tokens)")
            if col == 0:
                ax.set_ylabel(f"{PASS_LABELS[p]} (ms)")
    _figure_legend(fig, axes)
    return fig


def _figure_legend(fig, axes) -> None:
    """One legend under the panels with every label any panel drew."""
    handles, labels = [], []
    for ax in axes.flat:
        for h, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(h)
                labels.append(label)
    lines = max(1, math.ceil(len(labels) / 3))
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize="small")
    # laid out when saved (RenderContext.figure), above the figure legend
    fig.set_layout_engine("tight", rect=(0, min(0.3, (0.22 * lines + 0.1) / fig.get_figheight()), 1, 1))


def memory_figure(mem: pd.DataFrame, d: int, device_bytes: int | None):
    """Log-log peak memory against seq at one d_head, one panel per dtype, with ∝ seq and ∝ seq² guides."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sub = mem[mem["d"] == d]
    dtypes = sorted(set(sub["dtype"]))
    colors = {impl: plt.get_cmap("tab10")(i % 10) for i, impl in enumerate(ORDER)}
    fig, axes = plt.subplots(1, len(dtypes), figsize=(5.2 * len(dtypes), 4.6), squeeze=False, sharey=True)
    for ax, dtype in zip(axes[0], dtypes):
        g_all = sub[sub["dtype"] == dtype]
        for impl in present_implementations(g_all):
            g = g_all[g_all["implementation"] == impl].sort_values("seq")
            ax.plot(g["seq"], g["peak_bytes"] / 2**30, marker="o", markersize=3, color=colors[impl],
                    label=IMPLEMENTATIONS[impl])
        seqs = np.array(sorted(set(g_all["seq"])), dtype=float)
        if len(seqs) >= 2:
            anchor = g_all[g_all["seq"] == seqs[0]]["peak_bytes"].min() / 2**30
            ax.plot(seqs, anchor * seqs / seqs[0], "k--", alpha=0.4, linewidth=1, label="∝ seq")
            ax.plot(seqs, anchor * (seqs / seqs[0]) ** 2, "k:", alpha=0.5, linewidth=1, label="∝ seq²")
        if device_bytes:
            ax.axhline(device_bytes / 2**30, color="red", alpha=0.4, linewidth=1, label="device memory")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length (tokens)")
        ax.set_title(f"{dtype}, d_head {d}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("peak allocated, forward + backward (GiB)")
    _figure_legend(fig, axes)
    return fig
