"""The numbers pytorch_attention's sentences quote: fitted exponents, the OOM accounting, SDPA."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ... import checks
from ....accounting import transformer as accounting
from ....parsers.oom import oom_bytes
from ...tables import Cell, Num, Table, fmt_bytes, sig
from .frame import label, memory_column
from .ooms import oom_causes, on_80_gb
from .tables import bytes_cell

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
TIME_FIT_POINTS = 3  # time exponents are fitted over the longest sequences that ran


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
    the bytes allocated before backward and the times over the longest ones (where a fixed term,
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
                 "oom": oom_numbers(target["error"]) if target["status"] == "oom" else {},
                 "saved": fmt_bytes(acc["saved_for_backward"]), "matrix": fmt_bytes(acc["score_matrix"]),
                 "n_saved": int(target["saved_matrices"]),
                 "saved_what": ("the exponentials and the softmax's output"
                                if int(target["saved_matrices"]) == accounting.NAIVE_SAVED_MATRICES
                                else "intermediates of the softmax"),
                 "qkvo": fmt_bytes(acc["inputs"] + acc["output"]),
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
        # the largest cell that fit at the accounted cell's own head dimension, where there is one
        same_d = fits[fits["d"] == d]
        out["fit"] = measured_against_formula((same_d if len(same_d) else fits).iloc[-1], T, device)
    return out


def oom_numbers(error: str | None) -> dict:
    """The sizes an out-of-memory error names (:func:`cs336report.parsers.oom.oom_bytes`), formatted;
    empty where it names none."""
    return {k: fmt_bytes(v) for k, v in oom_bytes(error).items()}


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
        rows.append([Cell("peak allocated (forward and backward)"), Cell("–"), Cell(fmt_bytes(fit["peak_bytes"]))])
        out["peak"] = fmt_bytes(fit["peak_bytes"])
        out["peak_matrices"] = sig(k, 3)
        if oom_seq != T:
            scaled = k * accounting.naive_attention_memory(B, oom_seq, d, b)["score_matrix"]
            out["peak_at_oom"] = fmt_bytes(scaled)
            out["scale"] = f"{(oom_seq / T) ** 2:.3g}"  # T×T matrices grow as the square of the sequence
            out["peak_at_oom_exceeds"] = bool(device == device and scaled > device)
    if fit["fwd_peak_bytes"] == fit["fwd_peak_bytes"] and oom_seq != T:
        # the forward pass's own peak, in T×T matrices, scaled to the size that ran out
        k = fit["fwd_peak_bytes"] / acc["score_matrix"]
        scaled = k * accounting.naive_attention_memory(B, oom_seq, d, b)["score_matrix"]
        out.update(fwd_peak=fmt_bytes(fit["fwd_peak_bytes"]), fwd_matrices=sig(k, 2),
                   fwd_peak_at_oom=fmt_bytes(scaled), fwd_exceeds=bool(device == device and scaled > device))
    out["table"] = Table(title=f"Formula against measurement at d_head {d}, seq {T} (the largest naive cell that fit)",
                         columns=["quantity", "formula", "measured"], rows=rows, sources=[fit["source"]])
    return out


def sdpa_savings(df: pd.DataFrame) -> list[dict]:
    """For each SDPA variant: at the longest (d, seq) where it and the naive attention both ran,
    how much less memory and time it needed; and the longest sequence it ran where naive did not."""
    ok = df[df["status"] == "ok"]
    naive = ok[ok["variant"] == "naive"].set_index(["d", "seq"])
    key = memory_column(df)
    out = []
    for (variant, dtype), g in ok[ok["variant"].astype(str).str.startswith("sdpa")].groupby(
            ["variant", "dtype"], observed=True):
        common = g[[(d, s) in naive.index for d, s in zip(g["d"], g["seq"])]].sort_values(["seq", "d"])
        item = {"label": label(variant, dtype)}
        if not common.empty:
            r = common.iloc[-1]
            base = naive.loc[(r["d"], r["seq"])]
            # the bytes saved for backward, the table's column, where both recorded them
            k = "saved_bytes" if base["saved_bytes"] == base["saved_bytes"] and r["saved_bytes"] == r["saved_bytes"] else key
            item.update(d=int(r["d"]), seq=int(r["seq"]), naive_mem=Num(fmt_bytes(base[k]), base["source"]),
                        mem=Num(fmt_bytes(r[k]), r["source"]), saved=k == "saved_bytes",
                        dtypes=(str(base["dtype"]), str(r["dtype"])),
                        mem_ratio=sig(base[k] / r[k]) if r[k] > 0 else "–",
                        fwd=sig(base["fwd_mean_s"] / r["fwd_mean_s"]), bwd=sig(base["bwd_mean_s"] / r["bwd_mean_s"]))
        beyond = g[[(d, s) not in naive.index for d, s in zip(g["d"], g["seq"])]]
        if not beyond.empty:
            item["beyond_seq"] = int(beyond["seq"].max())
        out.append(item)
    return out


def handout_largest(naive: pd.DataFrame) -> dict | None:
    """The naive cells at the handout's largest seq, where every one of them ran: the highest peak
    allocated among them (linked to its record) and whether it fits the 80 GB H100 the handout assumed."""
    largest = max(checks.HANDOUT_GRIDS["pytorch_attention"]["seq"])
    at = naive[naive["seq"] == largest]
    if at.empty or not (at["status"] == "ok").all() or at["peak_bytes"].isna().any():
        return None
    top = at.loc[at["peak_bytes"].idxmax()]
    return {"seq": largest, "peak": Num(fmt_bytes(top["peak_bytes"]), top["source"]), "d": int(top["d"]),
            "h100": fmt_bytes(checks.H100_BYTES), "fits": bool(top["peak_bytes"] <= checks.H100_BYTES)}


def analysis(df: pd.DataFrame) -> dict:
    naive = df[df["variant"] == "naive"]
    out: dict = {"n_cells": len(naive), "n_ok": int((naive["status"] == "ok").sum()),
                 "n_oom": int((naive["status"] == "oom").sum()),
                 "n_oom_shared": int((naive["status"] == "oom_shared").sum()), "errors": [],
                 "memory_source": "allocated" if memory_column(df) == "activation_bytes" else "saved"}
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
    out["handout_largest"] = handout_largest(naive)
    out["oom_causes"] = oom_causes(naive)
    out["on_80_gb"] = on_80_gb(naive, (out["accounting"].get("fit") or {}).get("d"))
    if not ok.empty:
        ratio = ok["bwd_mean_s"] / ok["fwd_mean_s"]
        out["bwd_over_fwd"] = {"min": sig(ratio.min()), "max": sig(ratio.max()), "median": sig(ratio.median())}
    return out
