"""Figures of the report. Each function takes a tidy DataFrame and returns a matplotlib
Figure; the renderer saves it. Axes carry labels with units."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

def legend_outside(ax, **kwargs) -> None:
    """The axes' legend beside them, to the right, never over the data (the tight layout the
    renderer applies when it saves the figure makes room for it)."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kwargs)


MODE_LABELS = {"forward": "forward", "forward_backward": "forward + backward", "train_step": "train step (AdamW)"}


def time_vs_context(df: pd.DataFrame):
    """Log-log step time against context length, one line per size, one panel per mode."""
    modes = [m for m in MODE_LABELS if m in set(df["mode"])]
    fig, axes = plt.subplots(1, len(modes), figsize=(4.2 * len(modes), 3.6), squeeze=False, sharey=True)
    for ax, mode in zip(axes[0], modes):
        sub = df[(df["mode"] == mode) & (df["status"] == "ok")]
        for size, group in sub.groupby("size", sort=False):
            group = group.sort_values("context")
            ax.errorbar(group["context"], group["mean_s"] * 1e3, yerr=group["std_s"] * 1e3,
                        marker="o", capsize=2, label=str(size))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("context length (tokens)")
        ax.set_title(MODE_LABELS[mode])
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("time per step (ms)")
    if axes[0][-1].get_legend_handles_labels()[0]:
        legend_outside(axes[0][-1], title="size", fontsize="small")
    return fig


def warmup_steps(df: pd.DataFrame):
    """Time of every step (warm-up and measured) for each warm-up count."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for warmup, group in df.groupby("warmup"):
        times = list(group["all_s"].iloc[0])
        ax.plot(range(1, len(times) + 1), [t * 1e3 for t in times], marker="o", label=f"{warmup} warm-up")
        if warmup:
            ax.axvline(warmup + 0.5, color=ax.lines[-1].get_color(), alpha=0.3, linestyle="--")
    ax.set_yscale("log")
    ax.set_xlabel("step (warm-up steps, then measured steps)")
    ax.set_ylabel("step time (ms)")
    legend_outside(ax, fontsize="small")
    ax.grid(True, which="both", alpha=0.3)
    return fig
