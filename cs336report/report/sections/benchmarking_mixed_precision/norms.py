"""(b) of benchmarking_mixed_precision: LayerNorm and RMSNorm statistics in low precision."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from ....records.shapes import typed  # noqa: E402
from ...plots import legend_outside  # noqa: E402
from ...tables import Cell, Num, Table, sig  # noqa: E402
from .dtypes import short  # noqa: E402

# The 16-bit formats' machine epsilon and largest finite value (torch.finfo's eps and max; IEEE 754
# binary16, and bfloat16's 8-bit significand): constants, so that rendering needs no torch.
FINFO = {"float16": {"eps": 2.0 ** -10, "max": 65504.0}, "bfloat16": {"eps": 2.0 ** -7, "max": 3.3895313892515355e38}}


def relerr(x) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, ".2g")


def magnitude(x: float) -> str:
    return f"{x:,.0f}" if x >= 1 else format(x, "g")


STATISTICS = (("layernorm", "mean"), ("layernorm", "var"), ("layernorm", "rstd"), ("layernorm", "output"),
              ("rmsnorm", "meansq"), ("rmsnorm", "rrms"), ("rmsnorm", "output"))
STAT_LABELS = {("layernorm", "mean"): "LayerNorm mean", ("layernorm", "var"): "LayerNorm variance",
               ("layernorm", "rstd"): "LayerNorm 1/sqrt(var + eps)", ("layernorm", "output"): "LayerNorm output",
               ("rmsnorm", "meansq"): "RMSNorm mean of squares", ("rmsnorm", "rrms"): "RMSNorm 1/sqrt(meansq + eps)",
               ("rmsnorm", "output"): "RMSNorm output"}
ACCUMULATE = {"backend": "torch reduction", "pairwise": "pairwise sum in dtype", "sequential": "running sum in dtype"}


def norm_tables(data: dict, source: str) -> tuple[Table, Table]:
    summary = pd.DataFrame(data["summary"]).set_index(["norm", "statistic", "dtype", "accumulate"])
    dtypes = [t for t in ("float16", "bfloat16", "float32") if t in summary.index.get_level_values("dtype")]
    accs = [a for a in ACCUMULATE if a in summary.index.get_level_values("accumulate")]
    largest = max(r["magnitude"] for r in data["rows"])

    def first(key, column) -> str:
        if key not in summary.index:
            return "–"
        value = summary.loc[key, column]
        return f"from {magnitude(value)}" if value == value and value is not None else f"none up to {magnitude(largest)}"

    over_cols, err_cols = [], []
    for t in dtypes:
        for a in accs:
            over_cols.append((t, a))
            err_cols.append((t, a))
    overflow = Table(
        title="Where inf or NaN appears (input magnitude)",
        columns=["statistic"] + [f"{short(t)}, {ACCUMULATE[a]}" for t, a in over_cols],
        rows=[[Cell(STAT_LABELS[s])] + [Cell(first((*s, t, a), "first_overflow_magnitude")) for t, a in over_cols]
              for s in STATISTICS],
        sources=[source],
        note="smallest input magnitude at which this statistic, or one it is computed from, has an inf or NaN "
             "(over all hidden sizes and offsets)",
    )
    errors = Table(
        title="Worst relative error against float64, cases without overflow",
        columns=["statistic"] + [f"{short(t)}, {ACCUMULATE[a]}" for t, a in err_cols],
        rows=[[Cell(STAT_LABELS[s])] + [Cell(relerr(summary.loc[(*s, t, a), "max_rel_error"])
                                              if (*s, t, a) in summary.index else "–") for t, a in err_cols]
              for s in STATISTICS],
        sources=[source],
        note="the input is rounded to the dtype first and float64 computes from that rounded input, so the error "
             "is the statistic's own; the mean's error is relative to the row's root mean square, the output's is "
             "the ratio of 2-norms",
    )
    return overflow, errors


def norm_plot(rows: pd.DataFrame):
    """Left: worst output error against hidden size; right: share of cases with overflow against magnitude."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    out = rows[rows["statistic"] == "output"]
    styles = {"backend": "-", "pairwise": "--", "sequential": ":"}
    for (dtype, acc), g in out.groupby(["dtype", "accumulate"], sort=False):
        clean = g[~g["overflow"] & g["rel_error"].notna()]
        worst = clean.groupby("hidden")["rel_error"].max()
        if len(worst):
            axes[0].plot(worst.index, worst.values, styles.get(acc, "-"), marker="o", label=f"{short(dtype)}, {ACCUMULATE.get(acc, acc)}")
        share = g.groupby("magnitude")["overflow"].mean()
        axes[1].plot(share.index, 100 * share.values, styles.get(acc, "-"), marker="o", label=f"{short(dtype)}, {ACCUMULATE.get(acc, acc)}")
    axes[0].set_xscale("log", base=2)
    axes[0].set_yscale("log")
    axes[0].set_xlabel("hidden size")
    axes[0].set_ylabel("worst relative error of the output")
    axes[0].set_title("error without overflow (LayerNorm and RMSNorm)")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("input magnitude")
    axes[1].set_ylabel("cases with inf or NaN (%)")
    axes[1].set_title("overflow")
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
    legend_outside(axes[1], fontsize="x-small")
    return fig


def norm_analysis(data: dict, source: str | None = None) -> dict:
    """The numbers (b) quotes; each measured one links to ``source``, the record holding ``data``."""
    rows = pd.DataFrame(data["rows"])
    summary = pd.DataFrame(data["summary"])
    out: dict = {"n_cases": int(len(rows) // len(STATISTICS))}

    def s(norm, stat, dtype, acc, column):
        hit = summary[(summary["norm"] == norm) & (summary["statistic"] == stat) & (summary["dtype"] == dtype)
                      & (summary["accumulate"] == acc)]
        value = hit[column].iloc[0] if len(hit) else None
        return None if value is None or value != value else value

    if "float16" in set(rows["dtype"]):
        inputs = rows[(rows["dtype"] == "float16") & (rows["n_input_inf"] > 0)]["magnitude"]
        out["fp16"] = {
            "var": s("layernorm", "var", "float16", "backend", "first_overflow_magnitude"),
            "meansq": s("rmsnorm", "meansq", "float16", "backend", "first_overflow_magnitude"),
            "input": inputs.min() if len(inputs) else None,
            "sum": s("rmsnorm", "meansq", "float16", "pairwise", "first_sum_overflow_magnitude"),
        }
        out["fp16"] = {k: Num(magnitude(v), source) if v is not None else None for k, v in out["fp16"].items()}
        out["fp16"]["largest"] = magnitude(rows["magnitude"].max())
    wide = {}
    for dtype in ("bfloat16", "float32"):
        g = rows[rows["dtype"] == dtype]
        if len(g):
            wide[short(dtype)] = {"overflows": int(g["overflow"].sum()), "rows": int(len(g))}
    out["wide"] = wide
    out_rows = rows[(rows["statistic"] == "output") & ~rows["overflow"] & rows["rel_error"].notna()]
    worst = {}
    for (dtype, acc), g in out_rows.groupby(["dtype", "accumulate"]):
        top = g.loc[g["rel_error"].idxmax()]
        by_hidden = g.groupby("hidden")["rel_error"].max()
        worst[(dtype, acc)] = {"value": top["rel_error"], "text": Num(relerr(top["rel_error"]), source),
                               "hidden": int(top["hidden"]),
                               "growth": by_hidden.iloc[-1] / by_hidden.iloc[0] if by_hidden.iloc[0] else math.nan,
                               "h_lo": int(by_hidden.index[0]), "h_hi": int(by_hidden.index[-1])}
    out["worst"] = {f"{short(t)}_{a}": {**v, "growth": sig(v["growth"])} for (t, a), v in worst.items()}
    bf_torch, bf_seq = worst.get(("bfloat16", "backend")), worst.get(("bfloat16", "sequential"))
    fp_torch = worst.get(("float16", "backend"))
    if bf_torch and fp_torch:
        out["bf16_vs_fp16"] = sig(bf_torch["value"] / fp_torch["value"])
    if bf_torch and bf_seq:
        # against the torch reduction's worst error at the same hidden size, the running sum's worst case's
        same = out_rows[(out_rows["dtype"] == "bfloat16") & (out_rows["accumulate"] == "backend")
                        & (out_rows["hidden"] == bf_seq["hidden"])]["rel_error"]
        torch_there = same.max() if len(same) else bf_torch["value"]
        out["bf16_seq_vs_torch"] = sig(bf_seq["value"] / torch_there) if torch_there else "–"
        out["bf16_needs_fp32_sum"] = bool(bf_seq["value"] > 10 * bf_torch["value"])
    out["bits"] = {short(t): int(round(1 - math.log2(FINFO[t]["eps"]))) for t in ("float16", "bfloat16")}
    fp16_max = FINFO["float16"]["max"]
    out["fp16_max"], out["fp16_sqrt_max"] = f"{fp16_max:,.0f}", sig(math.sqrt(fp16_max))
    out["bf16_no_overflow"] = bool(wide.get("bf16") and wide["bf16"]["overflows"] == 0)
    out["fp16_overflows"] = bool(out.get("fp16") and (out["fp16"]["var"] or out["fp16"]["meansq"]))
    return out


def norms_part(records: list[dict], ctx) -> dict | None:
    ok = [r for r in records if r["status"] == "ok"]
    if not ok:
        return None
    r = ok[0]
    data = r["data"]
    overflow, errors = norm_tables(data, r["_path"])
    device = typed(r).device_name or data["device"]
    fig = ctx.figure("norm_sensitivity", norm_plot(pd.DataFrame(data["rows"])),
                     f"LayerNorm and RMSNorm statistics in low precision on {device}: worst relative error of the "
                     "normalised output against float64 (left, cases without overflow) and share of cases with an "
                     "inf or NaN (right). Line style: how the sums are formed.")
    return {"overflow": overflow, "errors": errors, "figure": fig, "device": device,
            "magnitudes": ", ".join(magnitude(m) for m in sorted({x["magnitude"] for x in data["rows"]})),
            "hidden": ", ".join(str(h) for h in sorted({x["hidden"] for x in data["rows"]})),
            "offsets": ", ".join(format(o, "g") for o in sorted({x["offset"] for x in data["rows"]})),
            "eps": format(data["eps"], "g"), "rows_per_case": data["rows_per_case"],
            "analysis": norm_analysis(data, r["_path"])}
