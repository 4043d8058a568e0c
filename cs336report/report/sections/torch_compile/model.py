"""torch_compile (b): the compiled Transformer against its uncompiled twin, its table and numbers."""

from __future__ import annotations

import json
import math

import pandas as pd

from ...bench_frame import phase_method
from ...tables import Cell, Table, fmt_mean_std, sig, status_cell, with_source
from .first_call import CACHE_NOTE, JOB_NOTE, first_call_cell, first_call_summary, from_cache, setup_seconds

MODE_LABELS = {"forward": "forward", "forward_backward": "forward + backward", "train_step": "train step (AdamW)"}
PHASES = (("forward", "forward", 1), ("backward", "backward", 2), ("optimizer_step", "optimizer step", 0))


def _key(config: dict) -> str:
    """A model cell's settings without its compile switches: a compiled cell and its eager twin share it."""
    return json.dumps({k: v for k, v in config.items() if k not in ("compile", "compile_scope")}, sort_keys=True)


def model_frame(records: list[dict]) -> pd.DataFrame:
    rows = []
    for r in records:
        c, d = r["config"], r["data"] or {}
        stats, phases = d.get("stats_s") or {}, d.get("phase_stats_s") or {}
        compile_info = d.get("compile") or {}
        earlier = compile_info.get("earlier_first_calls") or []  # a job's earlier cells' first calls
        rows.append({
            "key": _key(c), "compiled": bool(c.get("compile")), "fused": bool(c.get("fused_adamw")),
            "cuda_graphs": c.get("cuda_graphs") or False,  # True: forward and backward graphs; "step": the whole step
            "phase_method": phase_method(r),  # how the phases were timed: events, wall clock or synchronized
            # what was compiled: the whole model, or each repeated block in place (records before
            # compile_scope existed compiled the whole model)
            "scope": ((d.get("model") or {}).get("compiled") or {"scope": "model"}) if c.get("compile") else None,
            "master_weights": (d.get("model") or {}).get("master_weights"),  # its description, where the step had them
            "implementation": c["implementation"], "precision": c["precision"], "size": c["size"],
            "context": c["context"], "mode": c["mode"], "batch": c["batch_size"], "status": r["status"],
            "error": r.get("error"), "mean_s": stats.get("mean", math.nan), "std_s": stats.get("std", math.nan),
            "flops": d.get("flops_per_step"), "tflops": d.get("tflops", math.nan),
            # the whole step's compilation: in a job, earlier cells' first calls compiled part of it
            "first_call_s": compile_info.get("first_call_s", math.nan) + sum(c["first_call_s"] for c in earlier),
            "first_calls": 1 + len(earlier),
            "setup_s": setup_seconds([compile_info, *earlier]),
            "cache_hits": compile_info.get("inductor_cache_hits") or 0,
            "graph_breaks": compile_info.get("graph_breaks"), "graphs": compile_info.get("graphs"),
            **{f"{p}_mean_s": phases.get(p, {}).get("mean", math.nan) for p, _, _ in PHASES},
            "params": d.get("params"), "d_model": c["model"]["d_model"] * c["model"]["num_layers"],
            "spec": c["model"], "kernels": d.get("kernels"), "kernel_steps": d.get("kernel_steps"), "idle": d.get("idle"),
            "whole_mean_s": (d.get("whole_step_stats_s") or {}).get("mean", math.nan),
            "whole_steps": len(d.get("whole_steps_s") or []),
            "source": r["_path"], "gpu": (r.get("provenance") or {}).get("gpu"),
        })
    return pd.DataFrame(rows)


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
    pairs = compiled.merge(eager[["key", "status", "mean_s", "std_s", "source", "gpu"]], on="key", how="left",
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
        note="mean ± sample standard deviation over the measured steps; the first compiled step (tracing, "
             "Inductor code generation and one step) runs before the warm-up and is not in the mean"
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
    set, so that a speed-up over them is named as such."""
    both = pairs[(pairs["status"] == "ok") & (pairs["status_eager"] == "ok")]
    out: dict = {"n": len(pairs), "n_both": len(both), "by_mode": []}
    for mode, g in both.groupby("mode", sort=False):
        ratio = g["mean_s_eager"] / g["mean_s"]
        lo, hi = g.loc[ratio.idxmin()], g.loc[ratio.idxmax()]
        out["by_mode"].append({"mode": MODE_LABELS[mode], "min": sig(ratio.min()), "max": sig(ratio.max()),
                               "min_cell": f"{lo['size']}, context {lo['context']}",
                               "max_cell": f"{hi['size']}, context {hi['context']}",
                               "max_host_bound": hi["source_eager"] in host_bound})
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
