"""nsys_profile: where the GPU time of a forward pass and of a training step goes, by kernel.

Reads the parsed profiles (``results/nsys_parse/<cell>.json``, experiment ``nsys_profile``)
and, for question (a), the benchmarking_script results of the same cells. Every number the
template quotes is computed from those records, by the parts build() calls (the modules of
this package):

(a) the profiler's ``forward`` range against the Python timer around the same forward passes
    of the same (profiled) run; then, apart, that run against benchmarking_script's run of the
    cell without a profiler (a different process): forward time, kernel time and kernel launches;
(b) the kernel with the most time in the forward pass, its calls per forward pass, and its
    place among the kernels of forward + backward (training-step cells);
(c) the non-GEMM kernels with a non-trivial share of forward time;
(d) the GEMM share of kernel time in forward-only cells against full training steps, and the
    kernels and classes that gain share;
(e) softmax against the two attention matmuls: time ratio against FLOP ratio; and its bytes over
    the bandwidth the roofline probe measured on the card, against its kernels' time.
"""

from __future__ import annotations

from ....accounting import transformer as accounting
from ...tables import fmt_pct
from .checks import checks_table
from .contexts import fit_searches
from .frames import MODE_LABELS, cell_frame, class_frame, forward_source, kernel_frame, span
from .kernels import (NON_TRIVIAL, attention_table, class_figure, class_table, gain_table, gemm_shift_table,
                      non_gemm_table, reference_cell, top_kernel_table)
from .timing import cost_table, profiling_table, timing_analysis, timing_table
from .traffic import softmax_traffic

__all__ = ["EXPERIMENTS", "build", "skip_reason", "cell_frame",
           "checks_table", "NON_TRIVIAL"]

EXPERIMENTS = ("nsys_profile",)
# The handout profiles the benchmarking script's model and batch, but sets no warm-up or step counts
# for the profiles: only these of the benchmarking settings are compared with it.
PROFILE_HANDOUT = ("batch_size", "tf32")


def skip_reason(ctx) -> str:
    return "the active grid has no nsys_profile section"


def build(ctx) -> dict:
    records = ctx.records("nsys_profile")
    cells = cell_frame(records, ctx.records("benchmarking"))
    kernels = kernel_frame(records)
    classes = class_frame(records)
    ok = cells[cells["status"] == "ok"] if not cells.empty else cells
    sources = sorted({(r["source"], r["activity"], r["nsys_version"] or r["torch_version"]) for _, r in ok.iterrows()
                      if r["source"]})
    out: dict = {
        "n_cells": len(cells), "n_ok": len(ok),
        "sources": [{"source": s, "activity": a, "version": v} for s, a, v in sources],
        "cpu": bool(len(ok)) and set(ok["activity"]) == {"cpu"},
        "failed": [{"size": str(r["size"]), "context": int(r["context"]), "mode": MODE_LABELS.get(r["mode"], r["mode"]),
                    "status": "OOM" if r["status"] == "oom" else r["status"]}
                   for _, r in cells[cells["status"] != "ok"].iterrows()] if not cells.empty else [],
        "estimated": bool(len(ok)) and not ok["exact"].all(),
        "warnings": sorted({w for ws in ok["warnings"] for w in ws}) if len(ok) else [],
        "settings": ctx.settings("nsys_profile", handout={k: ctx.edition.benchmarking[k] for k in PROFILE_HANDOUT}),
        "attention_formula": accounting.ATTENTION_FLOP_FORMULA,
        "non_trivial": fmt_pct(NON_TRIVIAL, 2),
        "fit_searches": fit_searches(records),
    }
    if cells.empty or kernels.empty:
        return out
    out["timing_table"] = timing_table(cells)
    out["profiling_table"] = profiling_table(cells)
    out["timing"] = timing_analysis(cells)
    out["cost_table"] = cost_table(cells)
    out["top_table"], out["top"] = top_kernel_table(cells, kernels)
    ref = reference_cell(cells, kernels)
    if ref:
        out["ref"] = {"size": str(ref[0]), "context": ref[1]}
        out["non_gemm_table"], out["non_gemm"] = non_gemm_table(kernels, ref)
        out["gain_table"], out["gains"] = gain_table(kernels, ref)
        ref_path = cells[(cells["size"].astype(str) == str(ref[0])) & (cells["context"] == ref[1])]["path"]
        out["non_gemm_table"].sources = sorted(ref_path)
        if out["gain_table"]:
            out["gain_table"].sources = sorted(ref_path)
    out["class_table"] = class_table(classes, cells)
    fwd_classes = classes[(classes["mode"] == forward_source(classes)) & (classes["range"] == "forward")]
    if not fwd_classes.empty:
        non_gemm = 1 - fwd_classes[fwd_classes["class"] == "gemm"].groupby(["size", "context"], observed=True)["share"].sum()
        by_class = fwd_classes[fwd_classes["class"] != "gemm"].groupby("class")["share"].median().sort_values(ascending=False)
        out["non_gemm_share"] = {"span": span(non_gemm, fmt_pct),
                                 "largest": by_class.index[0] if len(by_class) else None,
                                 "largest_median": fmt_pct(by_class.iloc[0]) if len(by_class) else None}
    out["shift_table"], out["shift"] = gemm_shift_table(classes, cells)
    out["attention_table"], out["attention"] = attention_table(cells, kernels)
    out["softmax_traffic"] = softmax_traffic(cells, kernels, ctx.records("roofline"))
    out["checks_table"], out["checks"] = checks_table(cells)
    if not classes.empty:
        out["figure"] = ctx.figure("nsys_profile_classes", class_figure(classes, ok),
                                   "Share of kernel time by class: "
                                   + ("the forward range of each training step" if forward_source(classes) == "train_step"
                                      else "the forward pass of forward-only cells") + ", and the whole training step.")
    return out
