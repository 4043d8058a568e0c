"""torch_compile: (a) compiled against eager attention, (b) the compiled Transformer against the
uncompiled one, (c) the optimized training step against the measured bf16 matmul peak.

build() puts together the parts of this package and the attention frame and figure of
``sections/pytorch_attention``; (a)'s slower cells are diagnosed from the host samples of the attention
records and from compiled_attention_overhead's profiled calls (:mod:`.overhead`).
"""

from __future__ import annotations

import math

import pandas as pd

from ... import checks
from ....accounting import transformer as accounting
from ...tables import fmt_pct
from ...targets import OPTIMIZED_TARGET_CELL, OPTIMIZED_TARGET_FRACTION
from ..pytorch_attention.figure import scaling_figure
from ..pytorch_attention.frame import memory_column
from ..pytorch_attention.frame import frame as attention_frame
from .attention import answer_table, attention_analysis, attention_pairs, attention_table
from .model import model_analysis, model_pairs, model_table
from .overhead import host_share, host_share_analysis, overhead_analysis, overhead_frame, overhead_table
from .optimized import bf16_peak, optimized

__all__ = ["EXPERIMENTS", "build", "skip_reason", "attention_analysis",
           "attention_pairs", "attention_table", "model_analysis", "model_pairs", "model_table", "optimized"]

EXPERIMENTS = ("compiled_attention", "compiled_attention_overhead", "compiled_model", "optimized_step")


def skip_reason(ctx) -> str:
    return "no compiled_attention, compiled_attention_overhead, compiled_model or optimized_step grid configured"


def build(ctx) -> dict:
    out: dict = {"cuda": ctx.device == "cuda", "target_pct": fmt_pct(OPTIMIZED_TARGET_FRACTION, 2),
                 "target": dict(zip(("size", "context", "batch"), OPTIMIZED_TARGET_CELL)), "flop_formula": accounting.FLOP_FORMULA,
                 "adamw_formula": accounting.ADAMW_TRAFFIC_FORMULA}
    # (a)
    compiled = attention_frame(ctx.records("compiled_attention"))
    if not compiled.empty:
        eager = attention_frame(ctx.records("pytorch_attention"))
        memory_key = memory_column(compiled)
        if eager.empty:
            eager = compiled.iloc[0:0]
        pairs = attention_pairs(eager, compiled)
        out["attention_table"] = attention_table(pairs, memory_key)
        out["attention"] = attention_analysis(pairs, memory_key)
        out["attention"]["memory_label"] = ("allocated before backward" if memory_key == "activation_bytes"
                                            else "bytes saved for backward")
        share = host_share_analysis(host_share(ctx.records("pytorch_attention"), ctx.records("compiled_attention")))
        if share:
            out["attention"]["host_share"] = share
        both = pd.concat([eager[eager["variant"] == "naive"], compiled])
        both = both[both["d"].isin(set(compiled["d"])) & both["seq"].isin(set(compiled["seq"]))]
        if compiled["seq"].nunique() >= 2:  # a scaling plot needs more than one sequence length
            out["attention_figure"] = ctx.figure(
                "torch_compile_attention", scaling_figure(both, memory_key),
                "Eager and compiled naive attention against sequence length, log-log. Colour: head dimension; "
                "line style: eager or compiled.")
    # (a), diagnosed: the short cells' host time split (compiled_attention_overhead)
    calls = overhead_frame(ctx.records("compiled_attention_overhead"))
    overhead = overhead_analysis(calls)
    if overhead:
        out["overhead"] = overhead
    if not calls.empty:
        out["overhead_table"] = overhead_table(calls)
    # (b)
    pairs = model_pairs(ctx.records("compiled_model"), ctx.records("benchmarking"))
    if not pairs.empty:
        out["model_table"] = model_table(pairs)
        bench = ctx.records("benchmarking")
        out["model"] = model_analysis(pairs, checks.host_bound_sources(checks.timing_flags(bench)))
    # (c)
    out["optimized"] = optimized(ctx.records("optimized_step"), ctx.records("benchmarking"), ctx.records("roofline"),
                                 (ctx.render_settings.config.get("run") or {}).get("implementation", "naive"))
    out["peak_measured"] = not math.isnan(bf16_peak(ctx.records("roofline")))
    out["answer"] = {"attention": answer_table(out.get("attention_table"))}
    return out
