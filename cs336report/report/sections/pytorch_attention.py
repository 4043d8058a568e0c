"""pytorch_attention: the hand-written attention's time and memory over d_head x seq, its
out-of-memory point with the memory accounting, how saved memory scales, and SDPA beside it."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ... import accounting  # noqa: E402
from ...results import other_processes_bytes, record_status  # noqa: E402
from .. import checks  # noqa: E402
from ..plots import legend_outside  # noqa: E402
from ..tables import Cell, Table, fmt_bytes, fmt_mean_std, sig, status_cell  # noqa: E402

ID = "pytorch_attention"
TITLE = "pytorch_attention"
EXPERIMENTS = ("pytorch_attention",)
POINTS = 2
SUBQUESTIONS = ()

VARIANTS = ("naive", "compiled", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "sdpa_math")
LABELS = {
    "naive": "naive (hand-written)",
    "compiled": "naive, torch.compile",
    "sdpa_flash": "SDPA flash",
    "sdpa_efficient": "SDPA memory-efficient",
    "sdpa_cudnn": "SDPA cuDNN",
    "sdpa_math": "SDPA math",
}
HANDOUT = {"batch_size": 8, "dtype": "fp32", "tf32": False, "forward_passes": 100, "backward_passes": 100}
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
TIME_FIT_POINTS = 3  # time exponents are fitted over the longest sequences that ran
FRAME_COLUMNS = [
    "variant", "dtype", "d", "seq", "batch", "causal", "status", "error", "oom_phase", "fwd_mean_s", "fwd_std_s",
    "fwd_median_s", "bwd_mean_s", "bwd_std_s", "bwd_median_s", "before_bwd_bytes", "activation_bytes", "peak_bytes",
    "saved_bytes", "matrix_bytes", "baseline_bytes", "others_bytes", "first_call_s", "setup_s", "cache_hits",
    "graph_breaks", "gpu_memory_bytes", "gpu", "source", "saved_matrices",
]


# ----------------------------------------------------------------------------- tidy frame


def _stat(data: dict, key: str, field: str) -> float:
    return (data.get(key) or {}).get(field, math.nan)


def _bytes(value) -> float:
    return math.nan if value is None else float(value)


def _own(value, baseline: float) -> float:
    """Allocator bytes less what the process held before the cell began."""
    return math.nan if value is None else float(value) - baseline


def frame(records: list[dict]) -> pd.DataFrame:
    """One row per attention result (pytorch_attention or compiled_attention). Memory in use and
    peak are the cell's own: less the bytes its process still held from earlier cells
    (``baseline_bytes``). An out-of-memory cell that ran while other processes held part of the
    card has status "oom_shared" (``others_bytes``: what they held)."""
    rows = []
    for r in records:
        c, d = r["config"], r["data"] or {}
        variant = c["implementation"] + (f"_{c['backend']}" if c.get("backend") else "")
        peak = d.get("peak") or {}
        compile_info = d.get("compile") or {}
        baseline = float(d.get("memory_baseline_bytes") or 0)
        rows.append({
            "variant": variant, "dtype": c["dtype"], "d": int(c["d_head"]), "seq": int(c["seq"]),
            "batch": int(c["batch_size"]), "causal": bool(c["causal"]), "status": record_status(r),
            "error": r.get("error"), "oom_phase": d.get("oom_phase"),
            "fwd_mean_s": _stat(d, "forward_stats_s", "mean"), "fwd_std_s": _stat(d, "forward_stats_s", "std"),
            "fwd_median_s": _stat(d, "forward_stats_s", "median"),
            "bwd_mean_s": _stat(d, "backward_stats_s", "mean"), "bwd_std_s": _stat(d, "backward_stats_s", "std"),
            "bwd_median_s": _stat(d, "backward_stats_s", "median"),
            "before_bwd_bytes": _own(d.get("memory_before_backward_bytes"), baseline),
            "saved_matrices": accounting.saved_matrices_of(d, r.get("provenance")),
            "activation_bytes": _bytes(d.get("activation_bytes_before_backward")),
            "peak_bytes": _own(peak.get("allocated_bytes"), baseline),
            "saved_bytes": _bytes(d.get("saved_activation_bytes")),
            "matrix_bytes": _bytes(d.get("matrix_bytes")),
            "baseline_bytes": baseline, "others_bytes": float(other_processes_bytes(r.get("error"))),
            "first_call_s": compile_info.get("first_call_s", math.nan),
            "setup_s": compile_info.get("setup_s", math.nan),
            "cache_hits": compile_info.get("inductor_cache_hits") or 0,
            "graph_breaks": compile_info.get("graph_breaks"),
            "gpu_memory_bytes": _bytes(r["provenance"].get("gpu_memory_bytes")),
            "gpu": r["provenance"].get("gpu"), "source": r["_path"],
        })
    df = pd.DataFrame(rows, columns=FRAME_COLUMNS)
    if df.empty:
        return df
    df["variant"] = pd.Categorical(df["variant"], categories=[v for v in VARIANTS], ordered=True)
    return df.sort_values(["variant", "dtype", "d", "seq"]).reset_index(drop=True)


def label(variant: str, dtype: str, reference_dtype: str = "fp32") -> str:
    text = LABELS.get(str(variant), str(variant))
    return text if dtype == reference_dtype else f"{text}, {dtype}"


# ----------------------------------------------------------------------------- cells and tables


def time_cell(r, which: str) -> Cell:
    mean = r[f"{which}_mean_s"]
    if mean == mean:
        return Cell(fmt_mean_std(mean, r[f"{which}_std_s"], 1e-3))
    return status_cell(r["status"] if r["status"] != "ok" else "missing")


def bytes_cell(value: float, status: str) -> Cell:
    if value == value:
        return Cell(fmt_bytes(value))
    return status_cell(status) if status != "ok" else Cell("–")


def status_text(r) -> Cell:
    return Cell("ok") if r["status"] == "ok" else status_cell(r["status"])


def grid_table(df: pd.DataFrame, title: str, with_variant: bool = False) -> Table:
    """The handout's table: rows (d, seq); forward, backward, memory before backward, peak, saved, status."""
    columns = (["implementation"] if with_variant else []) + [
        "d_head", "seq", "forward", "backward", "memory before backward", "peak memory", "saved for backward", "status"]
    units = ([""] if with_variant else []) + ["", "", "ms", "ms", "", "", "", ""]
    rows = []
    for _, r in df.iterrows():
        row = [Cell(label(r["variant"], r["dtype"]))] if with_variant else []
        row += [Cell(str(r["d"])), Cell(str(r["seq"])), time_cell(r, "fwd"), time_cell(r, "bwd"),
                bytes_cell(r["before_bwd_bytes"], r["status"]), bytes_cell(r["peak_bytes"], r["status"]),
                bytes_cell(r["saved_bytes"], r["status"]), status_text(r)]
        rows.append(row)
    return Table(title=title, columns=columns, units=units, rows=rows, sources=sorted(df["source"]),
                 note="times: mean ± sample standard deviation over the timed passes; memory before backward: "
                      "torch.cuda.memory_allocated with the forward graph alive; peak: the allocator's maximum over "
                      "that forward and the backward passes; saved for backward: bytes of the tensors autograd kept "
                      "(inputs excluded), counted with saved_tensors_hooks" + memory_notes(df))


def memory_notes(df: pd.DataFrame) -> str:
    """What a table's memory and OOM cells need said about the cells' processes and the card."""
    notes = ""
    held = df[df["baseline_bytes"] > 0]
    if not held.empty:
        notes += (f"; {len(held)} of these cells began with up to {fmt_bytes(held['baseline_bytes'].max())} still "
                  "allocated by an earlier cell of the same process, which their memory columns leave out")
    shared = df[df["status"] == "oom_shared"]
    if not shared.empty:
        notes += (f"; OOM (card shared): the cell ran out of memory while other processes held up to "
                  f"{fmt_bytes(shared['others_bytes'].max())} of the card, so it did not meet its own limit")
    return notes


def comparison_table(df: pd.DataFrame) -> Table | None:
    """Each SDPA row next to the naive cell of the same (d, seq): time and memory ratios."""
    naive = df[df["variant"] == "naive"].set_index(["d", "seq"])
    other = df[df["variant"].astype(str).str.startswith("sdpa")]
    if other.empty:
        return None
    rows = []
    for _, r in other.iterrows():
        base = naive.loc[(r["d"], r["seq"])] if (r["d"], r["seq"]) in naive.index else None
        row = [Cell(label(r["variant"], r["dtype"])), Cell(str(r["d"])), Cell(str(r["seq"]))]
        if r["status"] != "ok":
            row += [status_cell(r["status"])] * 3
        elif base is None or base["status"] != "ok":
            text = "no naive cell" if base is None else f"naive: {status_cell(base['status']).text}"
            row += [Cell(text)] + [Cell("–")] * 2
        else:
            row += [Cell(sig(base["fwd_mean_s"] / r["fwd_mean_s"])), Cell(sig(base["bwd_mean_s"] / r["bwd_mean_s"])),
                    Cell(_ratio(base, r))]
        rows.append(row)
    return Table(title="SDPA backends against the naive attention", rows=rows,
                 columns=["implementation", "d_head", "seq", "forward speed-up", "backward speed-up",
                          "naive memory / SDPA memory"],
                 units=["", "", "", "×", "×", "×"], sources=sorted(df["source"]),
                 note="speed-up = naive time / SDPA time; memory: bytes in use before backward beyond the inputs "
                      "where the device reports them (CUDA), else bytes saved for backward")


def _memory_key(df: pd.DataFrame) -> str:
    """The memory column the scaling and ratios use: allocator bytes when measured, else saved bytes."""
    return "activation_bytes" if df["activation_bytes"].notna().any() else "saved_bytes"


def _ratio(base, r) -> str:
    key = "activation_bytes" if base["activation_bytes"] == base["activation_bytes"] else "saved_bytes"
    if not (r[key] > 0):
        return "–"
    return sig(base[key] / r[key])


# ----------------------------------------------------------------------------- analysis


def fit_exponent(seqs, values) -> float | None:
    """Slope of log(value) against log(seq): value grows as seq ** slope."""
    x = np.asarray(seqs, dtype=float)
    y = np.asarray(values, dtype=float)
    keep = np.isfinite(y) & (y > 0)
    if len(set(x[keep])) < 2:
        return None
    return float(np.polyfit(np.log(x[keep]), np.log(y[keep]), 1)[0])


def exponents(df: pd.DataFrame) -> list[dict]:
    """Fitted exponents per variant and d: of the bytes saved for backward over all sequences, and of
    the memory in use before backward and the times over the longest ones (where a fixed term,
    such as a library's workspace, no longer bends the line)."""
    out = []
    ok = df[df["status"] == "ok"]
    for (variant, dtype, d), g in ok.groupby(["variant", "dtype", "d"], observed=True):
        g = g.sort_values("seq")
        if g["seq"].nunique() < 2:
            continue
        tail = g.tail(TIME_FIT_POINTS)
        item = {"variant": str(variant), "label": label(variant, dtype), "d": int(d),
                "lo": int(g["seq"].iloc[0]), "hi": int(g["seq"].iloc[-1]), "time_lo": int(tail["seq"].iloc[0]),
                "saved": fit_exponent(g["seq"], g["saved_bytes"]),
                "allocated": fit_exponent(tail["seq"], tail["activation_bytes"]),
                "forward": fit_exponent(tail["seq"], tail["fwd_mean_s"]),
                "backward": fit_exponent(tail["seq"], tail["bwd_mean_s"])}
        out.append(item)
    return out


def quadratic(values: list[float | None]) -> bool:
    """Whether every fitted exponent is 2 within 0.15."""
    values = [v for v in values if v is not None]
    return bool(values) and all(abs(v - 2) < 0.15 for v in values)


def fmt_exponent(x: float) -> str:
    return f"{x:.2f}"


def _summary(values: list[float]) -> dict | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"min": fmt_exponent(min(values)), "max": fmt_exponent(max(values)), "n": len(values)}


def accounting_tables(df: pd.DataFrame) -> dict:
    """The memory accounting of the smallest OOM configuration (or, without one, of the largest cell),
    and, beside it, what the largest naive cell that fit measured against the same formulas."""
    naive = df[df["variant"] == "naive"]
    if naive.empty:
        return {}
    ooms = naive[naive["status"] == "oom"].sort_values(["seq", "d"])
    fits = naive[naive["status"] == "ok"].sort_values(["seq", "d"])
    target = ooms.iloc[0] if not ooms.empty else (fits.iloc[-1] if not fits.empty else None)
    if target is None:
        return {}
    b = DTYPE_BYTES[target["dtype"]]
    B, T, d = int(target["batch"]), int(target["seq"]), int(target["d"])
    acc = accounting.naive_attention_memory(B, T, d, b, bool(target["causal"]), int(target["saved_matrices"]))
    formulas = [
        ("one score matrix (QKᵀ, B × T × T)", f"{B}·{T}²·{b}", acc["score_matrix"]),
        ("saved for backward: exp, softmax output, row max positions and row sum",
         (f"2·{B}·{T}²·{b} + {B}·{T}·(8 + {b})" if int(target["saved_matrices"]) == accounting.NAIVE_SAVED_MATRICES
          else f"{int(target['saved_matrices'])}·{B}·{T}²·{b} + 2·{B}·{T}·{b}") + (f" + {T}²" if target["causal"] else ""),
         acc["saved_for_backward"]),
        ("inputs Q, K, V", f"3·{B}·{T}·{d}·{b}", acc["inputs"]),
        ("output O and upstream gradient dO", f"2·{B}·{T}·{d}·{b}", acc["output"] + acc["grad_output"]),
        ("in use when backward starts", "saved + Q, K, V + O + dO", acc["before_backward"]),
        ("gradients dQ, dK, dV (during backward)", f"3·{B}·{T}·{d}·{b}", acc["gradients"]),
    ]
    rows = [[Cell(item), Cell(formula), Cell(fmt_bytes(value))] for item, formula, value in formulas]
    out: dict = {"is_oom": target["status"] == "oom", "d": d, "seq": T, "batch": B,
                 "phase": target["oom_phase"], "before_backward": fmt_bytes(acc["before_backward"]),
                 "saved": fmt_bytes(acc["saved_for_backward"]), "matrix": fmt_bytes(acc["score_matrix"]),
                 "n_saved": int(target["saved_matrices"]),
                 "extension": checks.beyond_handout_grid("pytorch_attention", seq=T, d=d),
                 "handout_seqs": ", ".join(str(v) for v in checks.HANDOUT_GRIDS["pytorch_attention"]["seq"])}
    device = target["gpu_memory_bytes"]
    if device == device:
        rows.append([Cell("device memory (total)"), Cell(str(target["gpu"])), Cell(fmt_bytes(device))])
        out["device"] = fmt_bytes(device)
        out["device_name"] = target["gpu"]
    out["table"] = Table(
        title=f"Memory accounting at d_head {d}, seq {T}, batch {B} ({'ran out of memory' if out['is_oom'] else 'largest cell run'})",
        columns=["item", "formula", "bytes"], rows=rows, sources=[target["source"]],
        note=f"b = {b} bytes per value. {accounting.ATTENTION_MEMORY_FORMULA}")
    if not fits.empty:
        out["fit"] = measured_against_formula(fits.iloc[-1], T, device)
    return out


def measured_against_formula(fit, oom_seq: int, device: float) -> dict:
    """The largest cell that fit: predicted against measured memory, and its peak scaled to ``oom_seq``."""
    b = DTYPE_BYTES[fit["dtype"]]
    B, T, d = int(fit["batch"]), int(fit["seq"]), int(fit["d"])
    acc = accounting.naive_attention_memory(B, T, d, b, bool(fit["causal"]), int(fit["saved_matrices"]))
    rows = [[Cell("saved for backward"), Cell(fmt_bytes(acc["saved_for_backward"])),
             bytes_cell(fit["saved_bytes"], "ok")],
            [Cell("in use before backward"), Cell(fmt_bytes(acc["before_backward"])),
             bytes_cell(fit["before_bwd_bytes"], "ok")]]
    out = {"d": d, "seq": T, "saved_ratio": None, "before_ratio": None}
    if fit["saved_bytes"] == fit["saved_bytes"]:
        out["saved_ratio"] = sig(fit["saved_bytes"] / acc["saved_for_backward"])
    if fit["before_bwd_bytes"] == fit["before_bwd_bytes"]:
        out["before_ratio"] = sig(fit["before_bwd_bytes"] / acc["before_backward"])
        out["before_measured"] = fmt_bytes(fit["before_bwd_bytes"])
    if fit["peak_bytes"] == fit["peak_bytes"]:
        k = fit["peak_bytes"] / acc["score_matrix"]
        rows.append([Cell("peak (forward and backward)"), Cell("–"), Cell(fmt_bytes(fit["peak_bytes"]))])
        out["peak"] = fmt_bytes(fit["peak_bytes"])
        out["peak_matrices"] = sig(k, 3)
        if oom_seq != T:
            scaled = k * accounting.naive_attention_memory(B, oom_seq, d, b)["score_matrix"]
            out["peak_at_oom"] = fmt_bytes(scaled)
            out["peak_at_oom_exceeds"] = bool(device == device and scaled > device)
    out["table"] = Table(title=f"Formula against measurement at d_head {d}, seq {T} (the largest naive cell that fit)",
                         columns=["quantity", "formula", "measured"], rows=rows, sources=[fit["source"]])
    return out


def sdpa_savings(df: pd.DataFrame) -> list[dict]:
    """For each SDPA variant: at the longest (d, seq) where it and the naive attention both ran,
    how much less memory and time it needed; and the longest sequence it ran where naive did not."""
    ok = df[df["status"] == "ok"]
    naive = ok[ok["variant"] == "naive"].set_index(["d", "seq"])
    key = _memory_key(df)
    out = []
    for (variant, dtype), g in ok[ok["variant"].astype(str).str.startswith("sdpa")].groupby(
            ["variant", "dtype"], observed=True):
        common = g[[(d, s) in naive.index for d, s in zip(g["d"], g["seq"])]].sort_values(["seq", "d"])
        item = {"label": label(variant, dtype)}
        if not common.empty:
            r = common.iloc[-1]
            base = naive.loc[(r["d"], r["seq"])]
            item.update(d=int(r["d"]), seq=int(r["seq"]), naive_mem=fmt_bytes(base[key]), mem=fmt_bytes(r[key]),
                        mem_ratio=sig(base[key] / r[key]) if r[key] > 0 else "–",
                        fwd=sig(base["fwd_mean_s"] / r["fwd_mean_s"]), bwd=sig(base["bwd_mean_s"] / r["bwd_mean_s"]))
        beyond = g[[(d, s) not in naive.index for d, s in zip(g["d"], g["seq"])]]
        if not beyond.empty:
            item["beyond_seq"] = int(beyond["seq"].max())
        out.append(item)
    return out


def analysis(df: pd.DataFrame) -> dict:
    naive = df[df["variant"] == "naive"]
    out: dict = {"n_cells": len(naive), "n_ok": int((naive["status"] == "ok").sum()),
                 "n_oom": int((naive["status"] == "oom").sum()),
                 "n_oom_shared": int((naive["status"] == "oom_shared").sum()), "errors": [],
                 "memory_source": "allocated" if _memory_key(df) == "activation_bytes" else "saved"}
    for _, r in df[df["status"] == "error"].iterrows():
        out["errors"].append({"label": label(r["variant"], r["dtype"]), "d": int(r["d"]), "seq": int(r["seq"]),
                              "error": r["error"] or ""})
    exps = exponents(df)
    out["exponents"] = exps
    naive_exps = [e for e in exps if e["variant"] == "naive"]
    out["naive_saved"] = _summary([e["saved"] for e in naive_exps])
    if out["naive_saved"]:
        out["naive_saved"]["quadratic"] = quadratic([e["saved"] for e in naive_exps])
    out["naive_allocated"] = _summary([e["allocated"] for e in naive_exps])
    if out["naive_allocated"]:
        out["naive_allocated"]["quadratic"] = quadratic([e["allocated"] for e in naive_exps])
    out["naive_forward"] = _summary([e["forward"] for e in naive_exps])
    out["naive_backward"] = _summary([e["backward"] for e in naive_exps])
    if naive_exps:
        out["fit_range"] = {"lo": min(e["lo"] for e in naive_exps), "hi": max(e["hi"] for e in naive_exps),
                            "time_lo": min(e["time_lo"] for e in naive_exps)}
    out["sdpa_exponents"] = []
    for variant_label in dict.fromkeys(e["label"] for e in exps if e["variant"].startswith("sdpa")):
        mine = [e for e in exps if e["label"] == variant_label]
        key = "allocated" if out["memory_source"] == "allocated" else "saved"
        summary = _summary([e[key] for e in mine])
        if summary:
            out["sdpa_exponents"].append({"label": variant_label, **summary})
    out["accounting"] = accounting_tables(df)
    out["sdpa"] = sdpa_savings(df)
    ok = naive[naive["status"] == "ok"]
    if not ok.empty:
        ratio = ok["bwd_mean_s"] / ok["fwd_mean_s"]
        out["bwd_over_fwd"] = {"min": sig(ratio.min()), "max": sig(ratio.max()), "median": sig(ratio.median())}
    return out


# ----------------------------------------------------------------------------- figures


def scaling_figure(df: pd.DataFrame, memory_key: str):
    """Log-log: forward time, backward time and memory against seq; colour = d_head, line style = implementation."""
    ok = df[df["status"] == "ok"]
    ds = sorted(ok["d"].unique())
    colours = {d: plt.cm.tab10(i % 10) for i, d in enumerate(ds)}
    styles = ["-", "--", ":", "-.", (0, (1, 1)), (0, (5, 1))]
    markers = ["o", "s", "^", "D", "v", "P"]
    variants = list(dict.fromkeys(zip(ok["variant"].astype(str), ok["dtype"])))
    memory_label = ("in use before backward, less inputs (MiB)" if memory_key == "activation_bytes"
                    else "saved for backward (MiB)")
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    panels = (("fwd_mean_s", "forward pass", "time per pass (ms)", 1e3),
              ("bwd_mean_s", "backward pass", "time per pass (ms)", 1e3),
              (memory_key, "memory", memory_label, 2.0**-20))
    for ax, (column, title, ylabel, scale) in zip(axes, panels):
        for i, (variant, dtype) in enumerate(variants):
            for d in ds:
                g = ok[(ok["variant"].astype(str) == variant) & (ok["dtype"] == dtype) & (ok["d"] == d)]
                g = g.sort_values("seq")
                if g[column].notna().any():
                    ax.plot(g["seq"], g[column] * scale, marker=markers[i % len(markers)], markersize=3,
                            color=colours[d], linestyle=styles[i % len(styles)])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length (tokens)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    handles = [plt.Line2D([], [], color=colours[d], marker="o", label=f"d_head {d}") for d in ds]
    handles += [plt.Line2D([], [], color="grey", linestyle=styles[i % len(styles)], marker=markers[i % len(markers)],
                           label=label(v, dt))
                for i, (v, dt) in enumerate(variants)]
    legend_outside(axes[-1], handles=handles, fontsize="small")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- build


def skip_reason(ctx) -> str:
    return "no pytorch_attention grid is configured for this device"


def settings(records: list[dict]) -> list[dict]:
    cells = [r["config"] for r in records]
    out = []
    for key, text in (("batch_size", "batch size"), ("dtype", "dtype"), ("causal", "causal mask"), ("tf32", "TF32 matmuls"),
                      ("warmup", "warm-up passes"), ("forward_passes", "timed forward passes"),
                      ("backward_passes", "timed backward passes")):
        values = sorted({str(c.get(key)) for c in cells if c.get("implementation") == "naive"} or
                        {str(c.get(key)) for c in cells})
        expected = HANDOUT.get(key)
        out.append({"label": text, "value": ", ".join(values), "handout": str(expected) if expected is not None else "",
                    "differs": expected is not None and values != [str(expected)]})
    return out


def build(ctx) -> dict:
    records = ctx.records("pytorch_attention")
    df = frame(records)
    out: dict = {"settings": settings(records), "figures": [], "cuda": ctx.device == "cuda"}
    if df.empty:
        out["analysis"] = {"n_cells": 0}
        return out
    naive = df[df["variant"] == "naive"]
    out["table"] = grid_table(naive, "Naive attention: time and memory per d_head × seq") if not naive.empty else None
    sdpa = df[df["variant"].astype(str).str.startswith("sdpa")]
    out["sdpa_table"] = grid_table(sdpa, "SDPA backends on the same grid", with_variant=True) if not sdpa.empty else None
    out["comparison"] = comparison_table(df)
    out["analysis"] = analysis(df)
    out["formula"] = accounting.ATTENTION_MEMORY_FORMULA
    memory_key = _memory_key(df)
    out["figures"].append(ctx.figure(
        "pytorch_attention_scaling", scaling_figure(df, memory_key),
        "Attention time and memory against sequence length, log-log. Colour: head dimension; line style: "
        "implementation. A line stops where the cell ran out of memory."))
    return out
