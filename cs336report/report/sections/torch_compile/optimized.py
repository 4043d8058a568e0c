"""torch_compile's optimized step against the measured bf16 peak: phases, kernels, optimizer floor."""

from __future__ import annotations

import math

import pandas as pd

from ....accounting import transformer as accounting
from ....names.spec import ModelSpec
from ....parsers.kernels import classify, summarise_by_class
from ....records.shapes import Provenance, read_as
from ...tables import Cell, Table, fmt_count, fmt_mean_std, fmt_pct, fmt_seconds, sig, status_cell
from ...targets import OPTIMIZED_TARGET_CELL, OPTIMIZED_TARGET_FRACTION, on_target_card
from .model import MODE_LABELS, PHASES, model_frame, same_card

# The optimizer step of cs336report.lm.master_weights, byte by byte (the accounting of ADAMW_TRAFFIC_FORMULA).
MASTER_TRAFFIC_FORMULA = ("Memory traffic of the AdamW step with master weights = 28 bytes × parameters, as without them: "
                          "for a weight with a bf16 working copy it reads the fp32 master, the bf16 gradient and both fp32 "
                          "moments (14 bytes) and writes the master, both moments and the working copy (14 bytes); for a "
                          "weight kept in fp32 it reads weight, gradient and moments (16 bytes) and writes weight and moments "
                          "(12 bytes)")


def _probe(roofline: list[dict], gpu: str | None) -> dict:
    """The data of the first ok roofline probe on card ``gpu`` (any card when not given), or {}."""
    for r in roofline:
        if r["status"] == "ok" and same_card(read_as(Provenance, r["provenance"]).gpu, gpu):
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


def _switches(r) -> str:
    """The row's configuration in words: implementation, precision, compilation, optimizer."""
    parts = [r["implementation"], f"{r['precision']} autocast" if r["precision"] != "fp32" else "fp32"]
    whole_step = isinstance(r["cuda_graphs"], str) and r["cuda_graphs"] == "step"
    parts.append(("torch.compile, CUDA graphs" if r["cuda_graphs"] and not whole_step else "torch.compile")
                 if r["compiled"] else "not compiled")
    if whole_step:
        parts.append("the whole step replayed as one CUDA graph")
    if isinstance(r["master_weights"], dict):
        parts.append(f"{r['precision']} working weights written by AdamW from fp32 masters")
    elif r["mode"] == "train_step":
        parts.append("fused AdamW" if r["fused"] else "default AdamW")
    return ", ".join(parts)


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
        switches = _switches(r)
        base = _vanilla(r, eager, run_impl)
        item = {"size": str(r["size"]), "context": int(r["context"]), "batch": int(r["batch"]), "switches": switches,
                "status": r["status"], "mode": MODE_LABELS[r["mode"]],
                "is_target": (str(r["size"]), int(r["context"]), int(r["batch"])) == OPTIMIZED_TARGET_CELL}
        if isinstance(r["master_weights"], dict):
            m = r["master_weights"]
            item["master"] = {"copies": fmt_count(m["working_copies"]), "fp32_only": fmt_count(m["fp32_only"]),
                              "compiled": bool(m["compiled"])}
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
                             "saved": fmt_seconds(r["mean_s"] - r["whole_mean_s"]) if r["whole_mean_s"] < r["mean_s"] else None,
                             # phases from events: the headline steps had no synchronization inside either
                             "repeat": r["phase_method"] != "synchronized"}
        table, phases = phase_table(r, peak)
        if phases:  # a step replayed as one CUDA graph has no phases timed inside it
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
    master = any("master" in it for it in items)
    return {"table": table, "phase_tables": phase_tables, "items": items, "uncompiled": int((~df["compiled"]).sum()),
            "master": master, "adamw_formula": MASTER_TRAFFIC_FORMULA if master else None}


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
        note="mean over the measured steps; each phase "
             + PHASE_NOTES[r["phase_method"]] + "; the backward pass "
             "is counted as twice the forward FLOPs and the optimizer as none")
    return table, phases


# How a record's phases were timed (bench_frame.phase_method), as the phase table's note says it.
PHASE_NOTES = {"events": "is timed by CUDA events recorded at its start and end inside the timed steps",
               "wall clock": "is timed by the wall clock at its start and end inside the timed steps",
               "synchronized": "is timed between two synchronizations"}


KERNEL_CLASS_LABELS = {"gemm": "matrix products", "attention": "attention", "softmax": "softmax",
                       "optimizer": "optimizer", "copy/memset": "copies, dtype conversions, memsets",
                       "reduction": "reductions (norms, loss)", "elementwise": "element-wise", "other": "other"}


# The idle time of a profiled step (cs336report.measure.kernel_times.idle_time): label, time key, count key.
IDLE_ROWS = (("… between queued kernels (gaps under {short} µs: launch latency)", "short_gaps_ms", "short_gaps"),
             ("… waiting for the host mid-step (longer gaps)", "long_gaps_ms", "long_gaps"),
             ("… before the first kernel and after the last (host start, final synchronization)", "outside_ms", None))


def idle_split(idle: dict, step_ms: float) -> dict:
    """The profiled steps' idle time in words: each part's time and share of the step, and gap counts."""
    out = {key: {"ms": fmt_seconds(idle[key] / 1e3), "share": fmt_pct(idle[key] / step_ms),
                 "count": fmt_count(idle[count]) if count else None} for _, key, count in IDLE_ROWS}
    total = sum(idle[key] for _, key, _ in IDLE_ROWS)
    return {**out, "total": fmt_seconds(total / 1e3), "steps": int(idle["steps"]), "short_us": f"{idle['short_gap_us']:g}"}


# Names of kernels that only convert dtype: Inductor's ``_to_copy`` kernels, the eager bf16 copy, and
# the eager copy's dynamic-cast path (its loads and stores cast: source and destination dtypes differ).
CONVERSION_MARKS = ("to_copy", "bfloat16_copy_kernel", "LoadWithCast", "StoreWithCast")


def dtype_conversion(name: str) -> bool:
    """A kernel that only converts dtype (one of ``CONVERSION_MARKS`` in a copy kernel's name)."""
    return classify(name) == "copy/memset" and any(mark in name for mark in CONVERSION_MARKS)


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
    split = idle_split(r["idle"], step_ms) if isinstance(r["idle"], dict) else None
    for label, key, count in IDLE_ROWS if split else ():
        ms = r["idle"][key]
        rows.append([Cell(label.format(short=split["short_us"])), Cell(sig(ms)), Cell(sig(100 * ms / step_ms)),
                     Cell(fmt_count(r["idle"][count]) if count else "–"), Cell("0"), Cell("–"), Cell("–")])
    casts = kernels[kernels["name"].map(dtype_conversion)]
    facts = {"steps": int(r["kernel_steps"]), "classes": rates, "busy": fmt_seconds(busy_ms / 1e3),
             "idle": fmt_seconds(idle_ms / 1e3) if idle_ms > 0 else None, "idle_share": fmt_pct(idle_ms / step_ms),
             "outside_gemm": fmt_seconds((step_ms - by_class.set_index("class")["total_ns"].get("gemm", 0) / 1e6) / 1e3),
             "idle_split": split,
             "casts": {"ms": fmt_seconds(casts["ms"].sum() / 1e3), "share": fmt_pct(casts["ms"].sum() / step_ms),
                       "launches": fmt_count(casts["calls"].sum()),
                       "weights": accounting.linear_weight_count(spec)} if not casts.empty else None}
    table = Table(
        title=f"The optimized step's GPU time by kernel class: {r['size']}, context {r['context']}, batch {r['batch']}",
        columns=["kernel class", "GPU time", "share of step", "launches", "FLOPs counted", "FLOP rate", "of bf16 peak"],
        units=["", "ms", "%", "per step", "TFLOP", "TFLOP/s", "%"], rows=rows, sources=[r["source"]],
        note=f"each kernel's GPU time per step from torch.profiler over {int(r['kernel_steps'])} further steps after the "
             "timed ones, summed by class; share of the mean measured step; FLOPs: the formula's terms without "
             "attention for the matrix products, its attention term for attention"
             + ("; the rows under \"no kernel running\" split the idle time of as many steps again, each profiled "
                "and synchronized on its own (launches column: the number of gaps; the profiled steps' idle time is "
                f"{split['total']}, against the row above)" if split else ""))
    return table, facts
