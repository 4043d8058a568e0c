"""The compact parts of answers that the evidence does not already hold: the one table or the two
images a handout question asks for, built from the same frames as the evidence."""

from __future__ import annotations

import pandas as pd

from .tables import (Cell, Table, fmt_bytes, fmt_mean_std, join_columns, select_columns, status_cell,
                     table_from_frame, time_unit)


def _pick(values, preferred):
    """``preferred`` where present, else the largest value."""
    values = sorted(set(values))
    return preferred if preferred in values else values[-1]


def benchmarking_script(df: pd.DataFrame) -> dict:
    """(b): forward and backward time per size at one context, mean ± std over the measured steps.
    The backward time is the backward phase of the forward + backward cells."""
    ok = df[df["status"] == "ok"]
    if ok.empty:
        return {}
    context = _pick(ok["context"], 512)
    sub = df[df["context"] == context]
    fwd = sub[sub["mode"] == "forward"].set_index("size", drop=False)
    fb = sub[sub["mode"] == "forward_backward"].set_index("size", drop=False)
    scale_name, scale = time_unit(float(ok["mean_s"].median()))
    rows = []
    present = set(sub["size"])
    sizes = ([s for s in df["size"].cat.categories if s in present] if isinstance(df["size"].dtype, pd.CategoricalDtype)
             else sorted(present))
    for size in sizes:
        f, b = fwd.loc[size] if size in fwd.index else None, fb.loc[size] if size in fb.index else None
        rows.append([Cell(str(size)),
                     Cell(fmt_mean_std(f["mean_s"], f["std_s"], scale), source=f["source"])
                     if f is not None and f["status"] == "ok"
                     else status_cell(f["status"] if f is not None else "missing"),
                     Cell(fmt_mean_std(b["backward_mean_s"], b["backward_std_s"], scale), source=b["source"])
                     if b is not None and b["status"] == "ok" else status_cell(b["status"] if b is not None else "missing")])
    table = Table(title=f"Forward and backward pass per step, context {context} (mean ± std of the measured steps)",
                  columns=["size", "forward", "backward"], units=["", scale_name, scale_name], rows=rows,
                  sources=sorted(sub["source"]))
    return {"table": table, "context": int(context)}


def memory_profiling(ctx, df: pd.DataFrame, timeline_figure, mode_labels: dict) -> dict:
    """(a): two timeline images (forward pass; full training step) of one context and precision;
    (b): one table with two numbers per context length (peak of the forward pass and of the step)."""
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
                                            f"Active memory over two recorded steps: {title}.",
                                            alt=f"Active memory timeline, {title}"))
    out["context"] = context
    peaks = sub[sub["label"].isin(["forward", "train_step"])].pivot_table(
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

    shown = pd.DataFrame({"context": [str(c) for c in sorted(set(sub["context"]))]})
    shown["forward pass"] = [cell(c, "forward") for c in sorted(set(sub["context"]))]
    shown["full training step"] = [cell(c, "train_step") for c in sorted(set(sub["context"]))]
    shown_cells = sub[sub["label"].isin(["forward", "train_step"])]
    out["table"] = table_from_frame(shown, f"Peak allocated memory, {sub['size'].iloc[0]}, {precision}, {impl} "
                                           "implementation", sources=sorted(shown_cells["source"]))
    return out


def torch_compile_attention(table: Table | None) -> Table | None:
    """(a): the eager and compiled attention's forward and backward times, without the memory columns."""
    if table is None:
        return None
    cols = ["d_head", "seq", "forward eager", "forward compiled", "forward speed-up", "backward eager",
            "backward compiled", "backward speed-up"]
    return select_columns(table, [c for c in cols if c in table.columns],
                          note="mean time per pass; speed-up = eager / compiled; the first compiled call, which "
                               "compiles, is not among the timed passes")


def flash_benchmarking(tables: list[Table], reference: str = "Triton FA2") -> list[Table]:
    """One table per dtype: forward, backward and forward + backward latency of the FlashAttention-2
    kernels (``reference``, the label of the analysis' reference: Triton where it ran) against the
    naive PyTorch attention."""
    out = []
    for dtype in ("bf16", "fp32"):
        parts = [(label, t) for label, prefix in (("fwd", "Forward latency"), ("bwd", "Backward latency"),
                                                  ("fwd+bwd", "Forward + backward latency"))
                 for t in tables if t.title == f"{prefix}, {dtype}"]
        if len(parts) == 3 and all(c in parts[0][1].columns for c in (reference, "naive")):
            out.append(join_columns(parts, 2, [reference, "naive"],
                                    f"Latency, {dtype}: {reference} against the naive PyTorch attention"))
    return out
