"""memory_profiling's answer: the two timeline images of (a) and the table of (b), built from the
same frame as the evidence."""

from __future__ import annotations

import pandas as pd

from ...tables import Cell, fmt_bytes, status_cell, table_from_frame


# (b)'s columns: the handout's inference forward pass (no_grad) first, the forward pass with autograd
# on beside it, then the full step
COLUMNS = {"forward_no_grad": "forward pass, inference (no_grad)", "forward": "forward pass, autograd on",
           "train_step": "full training step"}


def answer_part(ctx, df: pd.DataFrame, timeline_figure, mode_labels: dict) -> dict:
    """(a): two timeline images (forward pass; full training step) of one context and precision;
    (b): one table with a number per context length and pass: the inference forward pass (no_grad),
    where the grid ran it, the forward pass with autograd on, and the full step."""
    if df.empty:
        return {}
    impl = "naive" if "naive" in set(df["implementation"]) else sorted(set(df["implementation"]))[0]
    precision = "fp32" if "fp32" in set(df["precision"]) else sorted(set(df["precision"]))[0]
    sub = df[(df["implementation"] == impl) & (df["precision"] == precision)]
    out = {"implementation": impl, "precision": precision, "images": []}
    context = int(sub["context"].max())
    for label, name in (("forward", "forward pass"), ("train_step", "full training step")):
        rows = [r for _, r in sub[(sub["context"] == context) & (sub["label"] == label)].iterrows() if r["snap"]]
        if rows:
            title = f"{name}, {rows[0]['size']}, context {context}, {precision}"
            out["images"].append(ctx.figure(f"answer_memory_{label}", timeline_figure(rows, title),
                                            f"Two recorded steps of the {name}.",
                                            alt=f"Active memory, {name}"))
    out["context"] = context
    shown_labels = [m for m in ("forward_no_grad", "forward", "train_step") if m in set(sub["label"])]
    peaks = sub[sub["label"].isin(shown_labels)].pivot_table(
        index="context", columns="label", values="peak", aggfunc="max")
    status = sub.set_index(["context", "label"])["status"].to_dict()
    records = sub.groupby(["context", "label"])["source"].agg(list).to_dict()

    def cell(c, label):
        if status.get((c, label), "missing") != "ok":
            return status_cell(status.get((c, label), "missing"))
        v = peaks.loc[c, label] if label in peaks.columns else None
        if v is None or v != v:
            return Cell("–")
        one = records.get((c, label), [])
        return Cell(fmt_bytes(v), source=one[0] if len(one) == 1 else None)

    contexts = sorted(set(sub["context"]))
    shown = pd.DataFrame({"context": [str(c) for c in contexts]})
    for label in shown_labels:
        shown[COLUMNS[label]] = [cell(c, label) for c in contexts]
    shown_cells = sub[sub["label"].isin(shown_labels)]
    out["table"] = table_from_frame(shown, f"Peak allocated memory, {sub['size'].iloc[0]}, {precision}, {impl} "
                                           "implementation", sources=sorted(shown_cells["source"]))
    return out
