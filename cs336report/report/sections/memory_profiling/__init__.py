"""memory_profiling: CUDA memory timelines, peaks, largest allocations by category, and the
analytic accounting beside them.

Reads the parse records (``memory_profiling_parse``: the parsed snapshot plus the capture's
data) and, for cells whose snapshot was not parsed, the capture records
(``memory_profiling``); 2026's (f) reads the Nsight capture's records (``memory_profiling_nsys``,
:mod:`.nsys`), which answer it alone and so are not among the section's EXPERIMENTS. Every number the template quotes is computed here or in the parts
build() calls (the modules of this package).
"""

from __future__ import annotations

from ....accounting import transformer as accounting, peak as accounting_peak
from ...labels import MEMORY_LABELS, PEAK_ALLOCATED, PEAK_RESERVED, SNAPSHOT_PEAK
from ...oom import does_not_fit
from ...tables import Table, fmt_bytes
from .analysis import analysis, settings, weight_copies
from .answer import answer_part
from .analytic import (TRAIN_STEP_EXPERIMENTS, accounting_analysis, accounting_rows, accounting_table, train_step_rows,
                       train_step_table)
from .frame import MODE_LABELS, frame, model_spec
from .nsys import EXPERIMENT as NSYS_EXPERIMENT, nsys_memory, nsys_memory_reason
from .shapes import explain_size
from .tables import (category_tables, peak_table, precision_table, ramp_rows, ramp_table, residual_table,
                     snapshot_table, top_table)
from .timeline import timeline_figure

__all__ = ["EXPERIMENTS", "build", "skip_reason", "accounting_rows",
           "explain_size", "frame", "weight_copies"]

EXPERIMENTS = ("memory_profiling", "memory_profiling_parse")


def skip_reason(ctx) -> str:
    nsys = nsys_memory_reason(ctx.records(NSYS_EXPERIMENT)) if hasattr(ctx, "records") else None
    also = f"; (f)'s Nsight capture: {nsys}" if nsys else ""
    if ctx.device != "cuda":
        return ("needs a CUDA device: memory snapshots come from the CUDA caching allocator "
                "(torch.cuda.memory._record_memory_history), so the CPU grid has no memory_profiling cells; "
                "the parser, tables and figures are tested on real snapshots from a GPU "
                "(tests/fixtures/snapshots/real)" + also)
    return "memory_profiling is not configured in this grid" + also


def build(ctx) -> dict:
    df = frame(ctx.records("memory_profiling_parse"), ctx.records("memory_profiling"))
    nsys_records = ctx.records(NSYS_EXPERIMENT)
    nsys = {"nsys_memory": nsys_memory(nsys_records), "nsys_memory_reason": nsys_memory_reason(nsys_records),
            "does_not_fit": does_not_fit(ctx.records("memory_profiling"))}
    out = {"figures": [], "peak_tables": [], "top_tables": [], "category_tables": [], "precision_table": None,
           "residual_table": None, "residual": [], "ramp_table": None, "accounting_table": None, "sizes": [],
           "formulas": {"activations": accounting.ACTIVATION_FORMULA, "peak": accounting_peak.PEAK_FORMULA,
                        "compiled_activations": accounting.COMPILED_ACTIVATION_FORMULA,
                        "state": "weights 4 B, gradients 4 B, AdamW moments 8 B per parameter (16 B/parameter)"},
           "labels": [{"name": k, "means": MEMORY_LABELS[k]} for k in (PEAK_ALLOCATED, PEAK_RESERVED, SNAPSHOT_PEAK)],
           "train_step_table": None, "accounting": {},
           "analysis": {"n_cells": 0, "failed": [], "growth": [], "precision_cmp": [], "ramps": []}, **nsys}
    if df.empty:
        out["snapshot_table"] = Table(title="Snapshots", columns=["cell"], rows=[])
        out["answer"] = {}
        return out
    out["settings"] = settings(df)
    out["peak_tables"] = [peak_table(df, impl, precision)
                          for (impl, precision), _ in df.groupby(["implementation", "precision"])]
    for (impl, precision, context), g in df.groupby(["implementation", "precision", "context"]):
        rows = [r for _, r in g.iterrows() if r["snap"]]
        if rows:
            name = f"memory_timeline_{impl}_{precision}_ctx{context}"
            title = f"{impl}, {precision}, {rows[0]['size']}, context {context}"
            out["figures"].append(ctx.figure(
                name, timeline_figure(rows, title),
                f"Allocated memory over the recorded steps ({title}), one panel per step kind, stacked by the "
                "category of each allocation's frames; shaded: forward, backward and optimizer phases; dotted: a new "
                "step; dashed: peak allocated (torch.cuda.max_memory_allocated).",
                alt=f"Memory timeline, {title}"))
    out["precision_table"] = precision_table(df)
    out["residual_table"], out["residual"] = residual_table(df)
    for _, r in df[df["snap"].notna()].iterrows():
        if r["precision"] == "fp32" and r["implementation"] == "naive" and r["context"] == df["context"].max() \
                and r["label"] in ("forward", "train_step"):
            out["top_tables"].append(top_table(r))
    if not out["top_tables"]:
        first = df[df["snap"].notna()]
        if not first.empty:
            out["top_tables"].append(top_table(first.iloc[-1]))
    out["category_tables"] = category_tables(df)
    ramps = ramp_rows(df)
    out["ramp_table"] = ramp_table(ramps)
    acc = accounting_rows(df)
    out["accounting_table"] = accounting_table(acc)
    steps = train_step_rows(df, {e: ctx.records(e) for e in TRAIN_STEP_EXPERIMENTS[1:]})
    out["train_step_table"] = train_step_table(steps)
    out["accounting"] = accounting_analysis(acc, steps)
    sizes = {}
    for _, r in df.drop_duplicates("size").iterrows():
        if r["model"]:
            spec = model_spec(r)
            state = accounting_peak.training_state_bytes(spec)
            sizes[r["size"]] = {"size": r["size"], "params": f"{accounting.param_count(spec):,}",
                                "floor": fmt_bytes(state["total"]), "weights": fmt_bytes(state["parameters"])}
    out["sizes"] = list(sizes.values())
    out["snapshot_table"] = snapshot_table(df)
    out["analysis"] = analysis(df, ramps)
    out["answer"] = answer_part(ctx, df, timeline_figure, MODE_LABELS)
    return out
