"""pytorch_attention: the hand-written attention's time and memory over d_head x seq, its
out-of-memory point with the memory accounting, how saved memory scales, and SDPA beside it.

build() puts together the frame, tables, analysis and figure of this package's modules.
"""

from __future__ import annotations

from ....accounting import transformer as accounting
from ....records.shapes import typed
from ...tables import sig
from .analysis import analysis, fit_exponent
from .figure import scaling_figure
from .frame import frame, memory_column
from .tables import comparison_table, grid_table, memory_notes

__all__ = ["EXPERIMENTS", "build", "skip_reason", "fit_exponent", "frame",
           "memory_notes", "sig"]

EXPERIMENTS = ("pytorch_attention",)

def skip_reason(ctx) -> str:
    return "no pytorch_attention grid is configured for this device"


def settings(records: list[dict], handout: dict) -> list[dict]:
    """The cells' settings, flagged where they differ from ``handout`` (the settings the edition fixes)."""
    cells = [r["config"] for r in records]
    out = []
    for key, text in (("batch_size", "batch size"), ("dtype", "dtype"), ("causal", "causal mask"), ("tf32", "TF32 matmuls"),
                      ("warmup", "warm-up passes"), ("forward_passes", "timed forward passes"),
                      ("backward_passes", "timed backward passes")):
        values = sorted({str(c.get(key)) for c in cells if c.get("implementation") == "naive"} or
                        {str(c.get(key)) for c in cells})
        expected = handout.get(key)
        out.append({"label": text, "value": ", ".join(values), "handout": str(expected) if expected is not None else "",
                    "differs": expected is not None and values != [str(expected)]})
    return out


def backward_graphs(records: list[dict]) -> list[str]:
    """How the records' timed backward passes got their graph: "retained" (one forward's graph,
    ``retain_graph=True``) or "fresh" (a fresh, untimed forward before each: records without
    ``backward_graph``)."""
    return sorted({typed(r).backward_graph or "fresh" for r in records if r["data"]})


def build(ctx) -> dict:
    records = ctx.records("pytorch_attention")
    df = frame(records)
    out: dict = {"settings": settings(records, ctx.edition.problem("pytorch_attention").fixed), "figures": [], "cuda": ctx.device == "cuda",
                 "backward_graphs": backward_graphs(records)}
    if df.empty:
        out["analysis"] = {"n_cells": 0}
        return out
    naive = df[df["variant"] == "naive"]
    out["table"] = grid_table(naive, "Naive attention: time and memory per d_head × seq") if not naive.empty else None
    out["answer_table"] = grid_table(naive, "Naive attention: time and memory per d_head × seq",
                                     brief=True) if not naive.empty else None
    sdpa = df[df["variant"].astype(str).str.startswith("sdpa")]
    out["sdpa_table"] = grid_table(sdpa, "SDPA backends on the same grid", with_variant=True) if not sdpa.empty else None
    out["comparison"] = comparison_table(df)
    out["analysis"] = analysis(df)
    out["formula"] = accounting.ATTENTION_MEMORY_FORMULA
    memory_key = memory_column(df)
    out["figures"].append(ctx.figure(
        "pytorch_attention_scaling", scaling_figure(df, memory_key),
        "Attention time and memory against sequence length, log-log. Colour: head dimension; line style: "
        "implementation. A line stops where the cell ran out of memory."))
    return out
