"""torch_compile: (a) compiled against eager attention, (b) the compiled Transformer against the
uncompiled one, (c) the optimized training step against the measured bf16 matmul peak."""

from __future__ import annotations

import json
import math

import pandas as pd

from ... import accounting
from ...kernels import classify, summarise_by_class
from ...spec import ModelSpec
from .. import answer_parts
from ..parts.attention_analysis import exponents, fmt_exponent
from ..parts.attention_figure import scaling_figure
from ..parts.attention_frame import FRAME_COLUMNS, memory_column
from ..parts.attention_frame import frame as attention_frame
from ..parts.attention_tables import bytes_cell, memory_notes
from ..tables import Cell, Table, fmt_bytes, fmt_count, fmt_mean_std, fmt_pct, fmt_seconds, sig, status_cell
from ..targets import OPTIMIZED_TARGET_CELL, OPTIMIZED_TARGET_FRACTION, on_target_card

ID = "torch_compile"
TITLE = "torch_compile"
EXPERIMENTS = ("compiled_attention", "compiled_model", "optimized_step")
POINTS = 2
SUBQUESTIONS = ("a", "b")

MODE_LABELS = {"forward": "forward", "forward_backward": "forward + backward", "train_step": "train step (AdamW)"}
PHASES = (("forward", "forward", 1), ("backward", "backward", 2), ("optimizer_step", "optimizer step", 0))


# ----------------------------------------------------------------------------- (a) attention


CACHE_NOTE = ("“(cache)”: Inductor found compiled graphs of this cell in the on-disk cache that an earlier job "
              "on the machine left, so its first call skipped some code generation and is not a full compilation")


def from_cache(rows: pd.DataFrame) -> pd.Series:
    """Which compiled cells' first call read graphs from Inductor's on-disk cache."""
    return rows["cache_hits"].fillna(0) > 0


JOB_NOTE = ("“(n calls)”: the cell ran in one job after cells of the same model (the forward cell of its size and "
            "context), whose first calls compiled part of its step; the time is the sum of those first calls and its own")


def first_call_cell(seconds: float, cache_hits, calls: int = 1) -> Cell:
    """The first compiled call's time, marked where Inductor served graphs from its cache or
    where the step was compiled over several first calls of one job."""
    if seconds != seconds:
        return Cell("–")
    return Cell(sig(seconds) + (" (cache)" if cache_hits else "") + (f" ({calls} calls)" if calls > 1 else ""))


def _setup_s(first_calls: list[dict]) -> float:
    """The torch.compile set-up (importing the compiler) recorded with these first calls; NaN if none."""
    times = [c["setup_s"] for c in first_calls if c.get("setup_s") is not None]
    return float(sum(times)) if times else math.nan


def first_call_summary(rows: pd.DataFrame, name) -> dict | None:
    """The range of full compilations' first calls, the cells whose first call read the cache, and
    the range of torch.compile's own set-up where the records hold it."""
    timed = rows[rows["first_call_s"] == rows["first_call_s"]]
    if timed.empty:
        return None
    hits = from_cache(timed)
    full = timed.loc[~hits, "first_call_s"]
    out: dict = {"cached": [name(r) for _, r in timed[hits].iterrows()]}
    if not full.empty:
        out.update({"min": fmt_seconds(full.min()), "max": fmt_seconds(full.max()), "n": int(len(full))})
    setup = timed["setup_s"].dropna() if "setup_s" in timed else pd.Series(dtype=float)
    if not setup.empty:
        out["setup"] = {"min": fmt_seconds(setup.min()), "max": fmt_seconds(setup.max()), "n": int(len(setup))}
    return out


def attention_pairs(eager: pd.DataFrame, compiled: pd.DataFrame) -> pd.DataFrame:
    """Compiled cells joined to the eager naive cell of the same (dtype, causal, batch, d, seq)."""
    keys = ["dtype", "causal", "batch", "d", "seq"]
    base = eager[eager["variant"] == "naive"]
    return compiled.merge(base, on=keys, how="left", suffixes=("", "_eager"))


def attention_table(pairs: pd.DataFrame, memory_key: str) -> Table:
    rows = []
    for _, r in pairs.sort_values(["d", "seq"]).iterrows():
        eager_status = r["status_eager"] if isinstance(r["status_eager"], str) else "missing"
        row = [Cell(str(r["d"])), Cell(str(r["seq"]))]
        for which in ("fwd", "bwd"):
            e, c = r[f"{which}_mean_s_eager"], r[f"{which}_mean_s"]
            row.append(Cell(sig(e * 1e3)) if e == e else status_cell(eager_status))
            row.append(Cell(sig(c * 1e3)) if c == c else status_cell(r["status"]))
            row.append(Cell(sig(e / c)) if e == e and c == c else Cell("–"))
        row.append(bytes_cell(r[f"{memory_key}_eager"], eager_status))
        row.append(bytes_cell(r[memory_key], r["status"]))
        row.append(first_call_cell(r["first_call_s"], r["cache_hits"]))
        rows.append(row)
    memory = "memory before backward" if memory_key == "activation_bytes" else "saved for backward"
    return Table(
        title="Naive attention, eager against torch.compile",
        columns=["d_head", "seq", "forward eager", "forward compiled", "forward speed-up", "backward eager",
                 "backward compiled", "backward speed-up", f"{memory}, eager", f"{memory}, compiled",
                 "first compiled call"],
        units=["", "", "ms", "ms", "×", "ms", "ms", "×", "", "", "s"], rows=rows,
        sources=sorted(set(pairs["source"]) | set(pairs["source_eager"].dropna())),
        note="mean time per pass; speed-up = eager / compiled; the first compiled call (a forward and a backward "
             "pass, which compiles both) is not part of the timed passes"
             + ("; memory before backward excludes the inputs" if memory_key == "activation_bytes" else "")
             + (f"; {CACHE_NOTE}" if from_cache(pairs).any() else "") + memory_notes(pairs))


def attention_analysis(pairs: pd.DataFrame, memory_key: str) -> dict:
    both = pairs[(pairs["status"] == "ok") & (pairs["status_eager"] == "ok")]
    out: dict = {"n": len(pairs), "n_both": len(both)}
    # An eager cell that has no record was not run: only a recorded failure counts against it.
    only_compiled = pairs[(pairs["status"] == "ok") & pairs["status_eager"].isin(["oom", "error"])]
    if not only_compiled.empty:
        out["only_compiled"] = [{"d": int(r["d"]), "seq": int(r["seq"]), "eager": str(r["status_eager"])}
                                for _, r in only_compiled.iterrows()]
    # the first calls and the compiled cells' own failures need no eager twin
    first = first_call_summary(pairs[pairs["status"] == "ok"], lambda r: f"d_head {int(r['d'])}, seq {int(r['seq'])}")
    if first:
        out["first_call"] = first
    ooms = pairs[pairs["status"] == "oom"].sort_values(["seq", "d"])
    if not ooms.empty:
        out["compiled_oom"] = {"d": int(ooms.iloc[0]["d"]), "seq": int(ooms.iloc[0]["seq"])}
    shared = pairs[pairs["status"] == "oom_shared"].sort_values(["seq", "d"])
    if not shared.empty:
        out["shared_oom"] = {"cells": [f"d_head {int(r['d'])} at seq {int(r['seq'])}" for _, r in shared.iterrows()],
                             "others": fmt_bytes(shared["others_bytes"].max())}
    if both.empty:
        return out
    for which in ("fwd", "bwd"):
        ratio = both[f"{which}_mean_s_eager"] / both[f"{which}_mean_s"]
        best = both.loc[ratio.idxmax()]
        out[which] = {"min": sig(ratio.min()), "max": sig(ratio.max()), "median": sig(ratio.median()),
                      "best_d": int(best["d"]), "best_seq": int(best["seq"]), "faster": bool(ratio.median() >= 1)}
    mem = (both[memory_key] / both[f"{memory_key}_eager"]).dropna()
    if not mem.empty:
        compiled_m = (both["saved_bytes"] / both["matrix_bytes"]).median()
        eager_m = (both["saved_bytes_eager"] / both["matrix_bytes_eager"]).median()
        out["memory"] = {"min": sig(mem.min()), "max": sig(mem.max()), "matrices": sig(compiled_m, 2),
                         "matrices_eager": sig(eager_m, 2), "fewer": bool(compiled_m < eager_m - 0.5)}
    saved_exp = [e["saved"] for e in exponents(pairs[FRAME_COLUMNS]) if e["saved"] is not None]
    if saved_exp:
        out["saved_exponent"] = {"min": fmt_exponent(min(saved_exp)), "max": fmt_exponent(max(saved_exp))}
    return out


# ----------------------------------------------------------------------------- (b) whole model


def _key(config: dict) -> str:
    """A model cell's settings without its compile switch: a compiled cell and its eager twin share it."""
    return json.dumps({k: v for k, v in config.items() if k != "compile"}, sort_keys=True)


def model_frame(records: list[dict]) -> pd.DataFrame:
    rows = []
    for r in records:
        c, d = r["config"], r["data"] or {}
        stats, phases = d.get("stats_s") or {}, d.get("phase_stats_s") or {}
        compile_info = d.get("compile") or {}
        earlier = compile_info.get("earlier_first_calls") or []  # a job's earlier cells' first calls
        rows.append({
            "key": _key(c), "compiled": bool(c.get("compile")), "fused": bool(c.get("fused_adamw")),
            "implementation": c["implementation"], "precision": c["precision"], "size": c["size"],
            "context": c["context"], "mode": c["mode"], "batch": c["batch_size"], "status": r["status"],
            "error": r.get("error"), "mean_s": stats.get("mean", math.nan), "std_s": stats.get("std", math.nan),
            "flops": d.get("flops_per_step"), "tflops": d.get("tflops", math.nan),
            # the whole step's compilation: in a job, earlier cells' first calls compiled part of it
            "first_call_s": compile_info.get("first_call_s", math.nan) + sum(c["first_call_s"] for c in earlier),
            "first_calls": 1 + len(earlier),
            "setup_s": _setup_s([compile_info, *earlier]),
            "cache_hits": compile_info.get("inductor_cache_hits") or 0,
            "graph_breaks": compile_info.get("graph_breaks"), "graphs": compile_info.get("graphs"),
            **{f"{p}_mean_s": phases.get(p, {}).get("mean", math.nan) for p, _, _ in PHASES},
            "params": d.get("params"), "d_model": c["model"]["d_model"] * c["model"]["num_layers"],
            "spec": c["model"], "kernels": d.get("kernels"), "kernel_steps": d.get("kernel_steps"),
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


def _time(mean, std, status) -> Cell:
    if mean == mean:
        return Cell(fmt_mean_std(mean, std, 1e-3))
    return status_cell(status if isinstance(status, str) else "missing")


def model_table(pairs: pd.DataFrame) -> Table:
    rows = []
    for _, r in pairs.iterrows():
        ratio = r["mean_s_eager"] / r["mean_s"] if r["mean_s"] == r["mean_s"] else math.nan
        rows.append([Cell(str(r["size"])), Cell(str(r["context"])), Cell(MODE_LABELS[r["mode"]]),
                     _time(r["mean_s_eager"], r["std_s_eager"], r["status_eager"]),
                     _time(r["mean_s"], r["std_s"], r["status"]),
                     Cell(sig(ratio)) if ratio == ratio else Cell("–"),
                     first_call_cell(r["first_call_s"], r["cache_hits"], r["first_calls"]),
                     Cell("–" if r["graph_breaks"] is None or r["graph_breaks"] != r["graph_breaks"]
                          else str(int(r["graph_breaks"])))])
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


def model_analysis(pairs: pd.DataFrame) -> dict:
    both = pairs[(pairs["status"] == "ok") & (pairs["status_eager"] == "ok")]
    out: dict = {"n": len(pairs), "n_both": len(both), "by_mode": []}
    for mode, g in both.groupby("mode", sort=False):
        ratio = g["mean_s_eager"] / g["mean_s"]
        lo, hi = g.loc[ratio.idxmin()], g.loc[ratio.idxmax()]
        out["by_mode"].append({"mode": MODE_LABELS[mode], "min": sig(ratio.min()), "max": sig(ratio.max()),
                               "min_cell": f"{lo['size']}, context {lo['context']}",
                               "max_cell": f"{hi['size']}, context {hi['context']}"})
    first = first_call_summary(pairs, lambda r: f"{r['size']}, context {r['context']}, {MODE_LABELS[r['mode']]}")
    if first:
        out["first_call"] = first
        full = both[~from_cache(both)]
        over = (full["first_call_s"] / full["mean_s"]).dropna()
        if not over.empty:
            out["first_call"]["steps"] = sig(over.median(), 2)
    breaks = pairs["graph_breaks"].dropna()
    out["graph_breaks"] = int(breaks.sum()) if not breaks.empty else None
    out["failed"] = [{"cell": f"{r['size']}, context {r['context']}, {MODE_LABELS[r['mode']]}",
                      "status": r["status"]} for _, r in pairs[pairs["status"] != "ok"].iterrows()]
    return out


# ----------------------------------------------------------------------------- (c) optimized step


def _probe(roofline: list[dict], gpu: str | None) -> dict:
    """The data of the first ok roofline probe on card ``gpu`` (any card when not given), or {}."""
    for r in roofline:
        if r["status"] == "ok" and same_card((r.get("provenance") or {}).get("gpu"), gpu):
            return r["data"]
    return {}


def bf16_peak(roofline: list[dict], gpu: str | None = None) -> float:
    """The bf16 matmul rate the roofline probe measured, on card ``gpu`` when given."""
    data = _probe(roofline, gpu)
    return data["matmul"].get("bf16", {}).get("tflops", math.nan) if data else math.nan


def copy_bandwidth(roofline: list[dict], gpu: str | None = None) -> float:
    """The device-to-device copy rate (GB/s) the roofline probe measured, on card ``gpu`` when given."""
    return (_probe(roofline, gpu).get("copy") or {}).get("gb_per_s", math.nan)


def optimizer_floor(r, peak: float, bandwidth: float) -> dict | None:
    """The optimizer step against the time its memory traffic takes at the measured copy bandwidth,
    the step's FLOP rate were the optimizer that fast, and the rate the forward and backward passes
    would then need for the target."""
    opt, fwd, bwd = r["optimizer_step_mean_s"], r["forward_mean_s"], r["backward_mean_s"]
    if any(v != v for v in (opt, fwd, bwd, peak, bandwidth)) or not r["params"]:
        return None
    nbytes = accounting.adamw_step_bytes(int(r["params"]))
    floor = nbytes / (bandwidth * 1e9)
    rest = r["mean_s"] - fwd - bwd - opt
    rate = lambda seconds: r["flops"] / seconds / 1e12 / peak  # noqa: E731 (fraction of the peak)
    budget = r["flops"] / (OPTIMIZED_TARGET_FRACTION * peak * 1e12) - floor - rest  # for forward + backward
    best = rate(r["mean_s"] - opt + floor)  # the step with the optimizer at its floor
    return {"gb": sig(nbytes / 1e9), "bandwidth": sig(bandwidth), "floor": fmt_seconds(floor),
            "time": fmt_seconds(opt), "ratio": sig(opt / floor), "best_pct": fmt_pct(best),
            "best_met": best >= OPTIMIZED_TARGET_FRACTION,
            "fb_pct": fmt_pct(rate(fwd + bwd)),
            "fb_needed_pct": fmt_pct(rate(budget)) if budget > 0 else None}


def _vanilla(row, eager: pd.DataFrame, run_impl: str):
    """The uncompiled fp32 run of the same size, context, mode and batch (the benchmarking baseline)."""
    if eager.empty:
        return None
    g = eager[(eager["size"] == row["size"]) & (eager["context"] == row["context"]) & (eager["mode"] == row["mode"])
              & (eager["batch"] == row["batch"]) & (eager["precision"] == "fp32") & ~eager["compiled"]
              & (eager["implementation"] == run_impl)
              & eager["gpu"].map(lambda g: same_card(g, row["gpu"]))]
    return g.iloc[0] if not g.empty else None


def optimized(records: list[dict], benchmark_records: list[dict], roofline: list[dict], run_impl: str) -> dict:
    """The optimized-step rows: each against the bf16 peak and the vanilla step measured on its own card."""
    df = model_frame(records)
    if df.empty:
        return {}
    eager = model_frame(benchmark_records)
    rows, phase_tables, items = [], [], []
    for _, r in df.sort_values(["d_model", "context"]).iterrows():
        switches = ", ".join(s for s, on in ((r["implementation"], True), (f"{r['precision']} autocast" if r["precision"] != "fp32" else "fp32", True),
                                             ("torch.compile" if r["compiled"] else "not compiled", True),
                                             ("fused AdamW" if r["fused"] else "default AdamW", r["mode"] == "train_step")) if on)
        base = _vanilla(r, eager, run_impl)
        item = {"size": str(r["size"]), "context": int(r["context"]), "batch": int(r["batch"]), "switches": switches,
                "status": r["status"], "mode": MODE_LABELS[r["mode"]],
                "is_target": (str(r["size"]), int(r["context"]), int(r["batch"])) == OPTIMIZED_TARGET_CELL}
        if r["status"] != "ok":
            rows.append([Cell(item["size"]), Cell(str(item["context"])), Cell(str(item["batch"])), Cell(switches)]
                        + [status_cell(r["status"])] * 6)
            items.append(item)
            continue
        peak = bf16_peak(roofline, r["gpu"])
        gpu = r["gpu"] if isinstance(r["gpu"], str) else None  # pandas holds a missing name as NaN
        item.update(gpu=gpu, on_target_card=on_target_card(gpu))
        fraction = r["tflops"] / peak if peak == peak else math.nan
        item.update(has_peak=fraction == fraction, step=fmt_seconds(r["mean_s"]), tflops=sig(r["tflops"]), peak=sig(peak), fraction=fraction,
                    pct=fmt_pct(fraction) if fraction == fraction else "–", met=fraction >= OPTIMIZED_TARGET_FRACTION,
                    target=fmt_pct(OPTIMIZED_TARGET_FRACTION, 2))
        speedup = "–"
        if base is not None and base["status"] == "ok":
            speedup = sig(base["mean_s"] / r["mean_s"])
            item.update(vanilla=fmt_seconds(base["mean_s"]), speedup=speedup,
                        vanilla_label=f"{base['implementation']}, fp32, uncompiled, default AdamW")
        rows.append([Cell(item["size"]), Cell(str(item["context"])), Cell(str(item["batch"])), Cell(switches),
                     Cell(fmt_mean_std(r["mean_s"], r["std_s"], 1e-3)), Cell(sig(r["tflops"])),
                     Cell(sig(peak)), Cell(sig(100 * fraction) if fraction == fraction else "–"),
                     Cell(sig(base["mean_s"] * 1e3) if base is not None and base["status"] == "ok" else "–"),
                     Cell(speedup)])
        if r["whole_mean_s"] == r["whole_mean_s"]:
            whole = r["flops"] / r["whole_mean_s"] / 1e12
            item["whole"] = {"steps": int(r["whole_steps"]), "step": fmt_seconds(r["whole_mean_s"]), "tflops": sig(whole),
                             "pct": fmt_pct(whole / peak) if peak == peak else None,
                             "met": peak == peak and whole / peak >= OPTIMIZED_TARGET_FRACTION,
                             "saved": fmt_seconds(r["mean_s"] - r["whole_mean_s"]) if r["whole_mean_s"] < r["mean_s"] else None}
        table, phases = phase_table(r, peak)
        phase_tables.append(table)
        item["phases"] = phases
        if r["kernels"]:
            table, item["kernels"] = kernel_table(r, peak)
            phase_tables.append(table)
        item["optimizer_floor"] = optimizer_floor(r, peak, copy_bandwidth(roofline, r["gpu"]))
        items.append(item)
    table = Table(
        title="Optimized step", rows=rows,
        columns=["size", "context", "batch", "configuration", "step", "achieved", "bf16 matmul peak (measured)",
                 "of peak", "vanilla step", "speed-up over vanilla"],
        units=["", "tokens", "", "", "ms", "TFLOP/s", "TFLOP/s", "%", "ms", "×"],
        sources=sorted(df["source"]),
        note="achieved = FLOPs per step (formula below) / mean step time; vanilla: the benchmarking run of the same "
             "size, context and batch (fp32, uncompiled, default AdamW)")
    return {"table": table, "phase_tables": phase_tables, "items": items, "uncompiled": int((~df["compiled"]).sum())}


def phase_table(r, peak: float) -> tuple[Table, dict]:
    """Where the step's time goes: each phase's time, share, counted FLOPs and FLOP rate."""
    forward_flops = r["flops"] / accounting.MODE_MULTIPLIER[r["mode"]]
    rows, phases = [], {}
    total, accounted = r["mean_s"], 0.0
    for key, text, multiple in PHASES:
        t = r[f"{key}_mean_s"]
        if t != t:
            continue
        accounted += t
        flops = multiple * forward_flops
        rate = flops / t / 1e12 if flops else math.nan
        phases[key] = {"label": text, "time": fmt_seconds(t), "share": fmt_pct(t / total),
                       "pct_peak": fmt_pct(rate / peak) if rate == rate and peak == peak else None}
        rows.append([Cell(text), Cell(sig(t * 1e3)), Cell(sig(100 * t / total)), Cell(sig(flops / 1e12) if flops else "0"),
                     Cell(sig(rate) if rate == rate else "–"),
                     Cell(sig(100 * rate / peak) if rate == rate and peak == peak else "–")])
    rest = total - accounted
    rows.append([Cell("rest of the step (zero_grad, loss, synchronizations)"), Cell(sig(rest * 1e3)),
                 Cell(sig(100 * rest / total)), Cell("0"), Cell("–"), Cell("–")])
    if "optimizer_step" in phases:
        without = total - r["optimizer_step_mean_s"]
        phases["without_optimizer_pct"] = fmt_pct(r["flops"] / without / 1e12 / peak) if peak == peak else None
    table = Table(
        title=f"Where the optimized step's time goes: {r['size']}, context {r['context']}, batch {r['batch']}",
        columns=["phase", "time", "share of step", "FLOPs counted", "FLOP rate", "of bf16 peak"],
        units=["", "ms", "%", "TFLOP", "TFLOP/s", "%"], rows=rows, sources=[r["source"]],
        note="mean over the measured steps; each phase is timed between two synchronizations; the backward pass "
             "is counted as twice the forward FLOPs and the optimizer as none")
    return table, phases


KERNEL_CLASS_LABELS = {"gemm": "matrix products", "attention": "attention", "softmax": "softmax",
                       "optimizer": "optimizer", "copy/memset": "copies, dtype conversions, memsets",
                       "reduction": "reductions (norms, loss)", "elementwise": "element-wise", "other": "other"}


def dtype_conversion(name: str) -> bool:
    """A kernel that only converts dtype: a Triton kernel of ``_to_copy`` (and views) alone, or an
    eager bf16/fp32 copy kernel."""
    return classify(name) == "copy/memset" and ("to_copy" in name or "bfloat16_copy_kernel" in name)


def kernel_table(r, peak: float) -> tuple[Table, dict]:
    """The step's GPU time per kernel class (the record's per-kernel times, from torch.profiler), the
    FLOP rate of the matrix products and of attention by the formula's terms, and the time no kernel ran."""
    kernels = pd.DataFrame([{"name": n, "ms": k["ms"], "calls": k["calls"]} for n, k in r["kernels"].items()])
    by_class = summarise_by_class(kernels.assign(total_ns=kernels["ms"] * 1e6, instances=kernels["calls"]))
    spec = ModelSpec(**r["spec"])
    multiple = accounting.MODE_MULTIPLIER[r["mode"]]
    attention_flops = multiple * accounting.attention_score_flops(spec, int(r["batch"]), int(r["context"]))
    class_flops = {"gemm": r["flops"] - attention_flops, "attention": attention_flops}
    step_ms = r["mean_s"] * 1e3
    rows, rates = [], {}
    for _, c in by_class.iterrows():
        ms, flops = c["total_ns"] / 1e6, class_flops.get(c["class"], 0)
        rate = flops / (ms / 1e3) / 1e12 if flops and ms > 0 else math.nan
        rates[c["class"]] = {"ms": fmt_seconds(ms / 1e3), "share": fmt_pct(ms / step_ms), "launches": fmt_count(c["instances"]),
                             "tflops": sig(rate) if rate == rate else None,
                             "pct_peak": fmt_pct(rate / peak) if rate == rate and peak == peak else None,
                             "over_peak": rate > peak}
        rows.append([Cell(KERNEL_CLASS_LABELS[c["class"]]), Cell(sig(ms)), Cell(sig(100 * ms / step_ms)),
                     Cell(fmt_count(c["instances"])), Cell(sig(flops / 1e12) if flops else "0"),
                     Cell(sig(rate) if rate == rate else "–"),
                     Cell(sig(100 * rate / peak) if rate == rate and peak == peak else "–")])
    busy_ms = kernels["ms"].sum()
    idle_ms = step_ms - busy_ms
    rows.append([Cell("no kernel running (step minus the kernels' time)"), Cell(sig(idle_ms) if idle_ms > 0 else "–"),
                 Cell(sig(100 * idle_ms / step_ms) if idle_ms > 0 else "–"), Cell("–"), Cell("0"), Cell("–"), Cell("–")])
    casts = kernels[kernels["name"].map(dtype_conversion)]
    facts = {"steps": int(r["kernel_steps"]), "classes": rates, "busy": fmt_seconds(busy_ms / 1e3),
             "idle": fmt_seconds(idle_ms / 1e3) if idle_ms > 0 else None, "idle_share": fmt_pct(idle_ms / step_ms),
             "outside_gemm": fmt_seconds((step_ms - by_class.set_index("class")["total_ns"].get("gemm", 0) / 1e6) / 1e3),
             "casts": {"ms": fmt_seconds(casts["ms"].sum() / 1e3), "share": fmt_pct(casts["ms"].sum() / step_ms),
                       "launches": fmt_count(casts["calls"].sum()),
                       "weights": accounting.linear_weight_count(spec)} if not casts.empty else None}
    table = Table(
        title=f"The optimized step's GPU time by kernel class: {r['size']}, context {r['context']}, batch {r['batch']}",
        columns=["kernel class", "GPU time", "share of step", "launches", "FLOPs counted", "FLOP rate", "of bf16 peak"],
        units=["", "ms", "%", "per step", "TFLOP", "TFLOP/s", "%"], rows=rows, sources=[r["source"]],
        note=f"each kernel's GPU time per step from torch.profiler over {int(r['kernel_steps'])} further steps after the "
             "timed ones, summed by class; share of the mean measured step; FLOPs: the formula's terms without "
             "attention for the matrix products, its attention term for attention")
    return table, facts


# ----------------------------------------------------------------------------- build


def skip_reason(ctx) -> str:
    return "no compiled_attention, compiled_model or optimized_step grid configured"


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
        out["attention"]["memory_label"] = ("memory in use before backward" if memory_key == "activation_bytes"
                                            else "bytes saved for backward")
        both = pd.concat([eager[eager["variant"] == "naive"], compiled])
        both = both[both["d"].isin(set(compiled["d"])) & both["seq"].isin(set(compiled["seq"]))]
        if compiled["seq"].nunique() >= 2:  # a scaling plot needs more than one sequence length
            out["attention_figure"] = ctx.figure(
                "torch_compile_attention", scaling_figure(both, memory_key),
                "Eager and compiled naive attention against sequence length, log-log. Colour: head dimension; "
                "line style: eager or compiled.")
    # (b)
    pairs = model_pairs(ctx.records("compiled_model"), ctx.records("benchmarking"))
    if not pairs.empty:
        out["model_table"] = model_table(pairs)
        out["model"] = model_analysis(pairs)
    # (c)
    out["optimized"] = optimized(ctx.records("optimized_step"), ctx.records("benchmarking"), ctx.records("roofline"),
                                 ctx.config.get("run", {}).get("implementation", "naive"))
    out["peak_measured"] = not math.isnan(bf16_peak(ctx.records("roofline")))
    out["answer"] = {"attention": answer_parts.torch_compile_attention(out.get("attention_table"))}
    return out
