"""torch_compile (b): the compiled Transformer against its uncompiled twin, its table and numbers."""

from __future__ import annotations

import json
import math

import pandas as pd

from ....records.shapes import ModelInfo, OptimizedStep, read_as, typed
from ...bench_frame import phase_method
from ...record_frame import record_frame
from ...tables import Cell, Table, fmt_mean_std, sig, status_cell, with_source
from .first_call import CACHE_NOTE, JOB_NOTE, first_call_cell, first_call_summary, from_cache, setup_seconds

MODE_LABELS = {"forward": "forward", "forward_backward": "forward + backward", "train_step": "train step (AdamW)"}
PHASES = (("forward", "forward", 1), ("backward", "backward", 2), ("optimizer_step", "optimizer step", 0))


def _key(config: dict) -> str:
    """A model cell's settings without its compile switches: a compiled cell and its eager twin share it."""
    return json.dumps({k: v for k, v in config.items() if k not in ("compile", "compile_scope")}, sort_keys=True)


# The fields of a model record a row holds: column -> dotted path (record_frame)
FIELDS = {
    "compiled": "config.compile", "fused": "config.fused_adamw", "cuda_graphs": "config.cuda_graphs",
    "implementation": "config.implementation", "precision": "config.precision", "size": "config.size",
    "context": "config.context", "mode": "config.mode", "batch": "config.batch_size", "status": "status",
    "error": "error", "mean_s": "data.stats_s.mean", "std_s": "data.stats_s.std", "flops": "data.flops_per_step",
    "tflops": "data.tflops", "first_call_s": "data.compile.first_call_s",
    "cache_hits": "data.compile.inductor_cache_hits", "graph_breaks": "data.compile.graph_breaks",
    "graphs": "data.compile.graphs", **{f"{p}_mean_s": f"data.phase_stats_s.{p}.mean" for p, _, _ in PHASES},
    "params": "data.params", "kernel_steps": "data.kernel_steps", "whole_mean_s": "data.whole_step_stats_s.mean",
    "source": "_path", "gpu": "provenance.gpu", "host_bound": "data.host.host_bound",
}
COLUMNS = [
    "key", "compiled", "fused", "cuda_graphs", "phase_method", "scope", "master_weights", "implementation",
    "precision", "size", "context", "mode", "batch", "status", "error", "mean_s", "std_s", "flops", "tflops",
    "first_call_s", "first_calls", "setup_s", "cache_hits", "graph_breaks", "graphs",
    *[f"{p}_mean_s" for p, _, _ in PHASES], "params", "d_model", "spec", "kernels", "kernel_steps", "idle",
    "whole_mean_s", "whole_steps", "source", "gpu", "host_bound",
]


def model_frame(records: list[dict]) -> pd.DataFrame:
    if not records:
        return pd.DataFrame()
    nan = dict.fromkeys(["mean_s", "std_s", "tflops", "first_call_s", "whole_mean_s",
                         *[f"{p}_mean_s" for p, _, _ in PHASES]], math.nan)
    df = record_frame(records, FIELDS, defaults={**nan, "compiled": False, "fused": False, "cuda_graphs": False,
                                                 "cache_hits": 0}, exact=True)
    shapes = [typed(r, OptimizedStep) for r in records]  # a compiled or plain step
    compiles = [s.compile or {} for s in shapes]
    earlier = [c.get("earlier_first_calls") or [] for c in compiles]  # a job's earlier cells' first calls
    df["compiled"], df["fused"] = df["compiled"].astype(bool), df["fused"].astype(bool)
    df["cuda_graphs"] = [g or False for g in df["cuda_graphs"]]  # True: forward and backward graphs; "step": the whole step
    df["key"] = [_key(r["config"]) for r in records]
    df["phase_method"] = [phase_method(r) for r in records]  # how the phases were timed: events, wall clock or synchronized
    # what was compiled: the whole model, or each repeated block in place (records before
    # compile_scope existed compiled the whole model)
    models = [read_as(ModelInfo, s.model) for s in shapes]
    df["scope"] = [(m.compiled or {"scope": "model"}) if c else None for m, c in zip(models, df["compiled"])]
    df["master_weights"] = [m.master_weights for m in models]  # its description, where the step had them
    # the whole step's compilation: in a job, earlier cells' first calls compiled part of it
    df["first_call_s"] = [first + sum(c["first_call_s"] for c in e) for first, e in zip(df["first_call_s"], earlier)]
    df["first_calls"] = [1 + len(e) for e in earlier]
    df["setup_s"] = [setup_seconds([c, *e]) for c, e in zip(compiles, earlier)]
    df["cache_hits"] = [hits or 0 for hits in df["cache_hits"]]
    df["d_model"] = [r["config"]["model"]["d_model"] * r["config"]["model"]["num_layers"] for r in records]
    df["spec"] = [r["config"]["model"] for r in records]
    df["kernels"], df["idle"] = [s.kernels for s in shapes], [s.idle for s in shapes]
    df["whole_steps"] = [len(s.whole_steps_s or []) for s in shapes]
    return pd.DataFrame(df[COLUMNS].to_dict("records"), columns=COLUMNS)


def same_card(a, b) -> bool:
    """Two records' GPUs allow a timing comparison: the same name, or either not recorded (a CPU run)."""
    return not (isinstance(a, str) and isinstance(b, str)) or a == b


def model_pairs(compiled_records: list[dict], eager_records: list[dict]) -> pd.DataFrame:
    """Each compiled cell next to its uncompiled twin (from compiled_model or benchmarking)."""
    df = model_frame(compiled_records + eager_records)
    if df.empty:
        return df
    compiled = df[df["compiled"]]
    eager = df[~df["compiled"]].drop_duplicates("key")
    twins = eager[["key", "status", "mean_s", "std_s", "source", "gpu", "host_bound"]]
    pairs = compiled.merge(twins, on="key", how="left",
                           suffixes=("", "_eager"))
    # a twin timed on another card is no baseline: compare timings within one card only
    other = [not same_card(a, b) for a, b in zip(pairs["gpu"], pairs["gpu_eager"])]
    pairs.loc[other, ["mean_s_eager", "std_s_eager"]] = math.nan
    pairs.loc[other, "status_eager"] = "other card"
    return pairs.sort_values(["implementation", "precision", "d_model", "context", "mode"]).reset_index(drop=True)


def _time(mean, std, status, source=None) -> Cell:
    if mean == mean:
        return Cell(fmt_mean_std(mean, std, 1e-3), source=source if isinstance(source, str) else None)
    return status_cell(status if isinstance(status, str) else "missing")


def model_table(pairs: pd.DataFrame) -> Table:
    rows = []
    for _, r in pairs.iterrows():
        ratio = r["mean_s_eager"] / r["mean_s"] if r["mean_s"] == r["mean_s"] else math.nan
        rows.append([Cell(str(r["size"])), Cell(str(r["context"])), Cell(MODE_LABELS[r["mode"]]),
                     _time(r["mean_s_eager"], r["std_s_eager"], r["status_eager"], r["source_eager"]),
                     _time(r["mean_s"], r["std_s"], r["status"], r["source"]),
                     Cell(sig(ratio)) if ratio == ratio else Cell("–"),
                     with_source(first_call_cell(r["first_call_s"], r["cache_hits"], r["first_calls"]), r["source"]),
                     Cell("–") if r["graph_breaks"] is None or r["graph_breaks"] != r["graph_breaks"]
                     else Cell(str(int(r["graph_breaks"])), source=r["source"])])
    impls = ", ".join(sorted(set(pairs["implementation"])))
    precisions = ", ".join(sorted(set(pairs["precision"])))
    return Table(
        title=f"Transformer, vanilla against torch.compile ({impls} implementation, {precisions})",
        columns=["size", "context", "step", "vanilla", "compiled", "speed-up", "first compiled step", "graph breaks"],
        units=["", "tokens", "", "ms", "ms", "×", "s", ""], rows=rows,
        sources=sorted(set(pairs["source"]) | set(pairs["source_eager"].dropna())),
        note="mean ± sample standard deviation over the measured steps; the first compiled step (the compilation) "
             "is not in the mean"
             + (f"; {CACHE_NOTE}" if from_cache(pairs).any() else "")
             + (f"; {JOB_NOTE}" if (pairs["first_calls"] > 1).any() else ""))


def compile_scope(pairs: pd.DataFrame) -> dict:
    """What the compiled cells compiled: ``whole`` (cells that compiled the whole model) and, for
    cells that compiled each repeated block, the blocks' path and class and the range of their counts."""
    scopes = [s for s in pairs["scope"] if isinstance(s, dict)]
    blocks = [s for s in scopes if s.get("scope") == "blocks"]
    out: dict = {"whole": len(scopes) - len(blocks), "blocks": len(blocks)}
    if blocks:
        counts = sorted({int(s["blocks"]) for s in blocks})
        out.update(path=", ".join(sorted({s["path"] for s in blocks})),
                   block=", ".join(sorted({s["block"] for s in blocks})), min=counts[0], max=counts[-1])
    return out


def model_analysis(pairs: pd.DataFrame, host_bound: set[str] = frozenset()) -> dict:
    """``host_bound``: the eager records flagged host-bound, whose step time the host's kernel launches
    set. A pair is host-bound where either record is (flagged, or its ``data.host.host_bound``); each
    mode's range of speed-ups is that of the other pairs, the compute-bound ones, where there are any
    (``compute_bound``), and the host-bound pairs are named apart with their speed-ups."""
    both = pairs[(pairs["status"] == "ok") & (pairs["status_eager"] == "ok")]
    out: dict = {"n": len(pairs), "n_both": len(both), "by_mode": []}
    one_context = both["context"].nunique() == 1  # then the table's context column says it: cells by size

    def cell(r) -> str:
        return str(r["size"]) if one_context else f"{r['size']}, context {r['context']}"

    bound = (both["source_eager"].isin(host_bound) | both["host_bound_eager"].map(lambda v: v is True)
             | both["host_bound"].map(lambda v: v is True))
    for mode, g in both.groupby("mode", sort=False):
        g_bound = bound.loc[g.index]
        use = g[~g_bound] if (~g_bound).any() else g
        ratio = use["mean_s_eager"] / use["mean_s"]
        lo, hi = use.loc[ratio.idxmin()], use.loc[ratio.idxmax()]
        host = [{"cell": cell(r), "ratio": sig(r["mean_s_eager"] / r["mean_s"])}
                for _, r in g[g_bound].iterrows()]
        out["by_mode"].append({"mode": MODE_LABELS[mode], "min": sig(ratio.min()), "max": sig(ratio.max()),
                               "min_cell": cell(lo), "max_cell": cell(hi),
                               "compute_bound": bool((~g_bound).any()), "n": int(len(use)), "host_bound": host})
    first = first_call_summary(pairs, lambda r: f"{r['size']}, context {r['context']}, {MODE_LABELS[r['mode']]}")
    if first:
        out["first_call"] = first
        full = both[~from_cache(both)]
        over = (full["first_call_s"] / full["mean_s"]).dropna()
        if not over.empty:
            out["first_call"]["steps"] = sig(over.median(), 2)
    out["scope"] = compile_scope(pairs)
    breaks = pairs["graph_breaks"].dropna()
    out["graph_breaks"] = int(breaks.sum()) if not breaks.empty else None
    out["failed"] = [{"cell": f"{r['size']}, context {r['context']}, {MODE_LABELS[r['mode']]}",
                      "status": r["status"]} for _, r in pairs[pairs["status"] != "ok"].iterrows()]
    return out
