"""benchmarking_mixed_precision: autocast dtypes, normalisation in low precision, bf16 speed and memory.

Four parts, each built from its own results and each optional:

(a) ``autocast_dtypes``: the dtypes observed in the handout's ToyModel under autocast.
(b) ``norm_sensitivity``: LayerNorm / RMSNorm statistics in fp16, bf16 and fp32 against float64.
(c) ``benchmarking`` + ``benchmarking_bf16``: step times in fp32 and under bf16 autocast.
(d) ``benchmarking`` + ``benchmarking_bf16`` + ``autocast_memory``: peak memory and time, fp32
    against bf16, naive against native implementation; ``autocast_saved_tensors``: what the
    autograd graph keeps for backward, by operation, dtype and role.
"""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from .. import checks  # noqa: E402
from ..plots import legend_outside  # noqa: E402
from ..tables import Cell, Table, fmt_bytes, fmt_mean_std, fmt_pct, sig, status_cell  # noqa: E402

# The 16-bit formats' machine epsilon and largest finite value (torch.finfo's eps and max; IEEE 754
# binary16, and bfloat16's 8-bit significand): constants, so that rendering needs no torch.
FINFO = {"float16": {"eps": 2.0 ** -10, "max": 65504.0}, "bfloat16": {"eps": 2.0 ** -7, "max": 3.3895313892515355e38}}
from .benchmarking_script import MODE_COLUMNS  # noqa: E402
from .benchmarking_script import frame as bench_frame  # noqa: E402

ID = "benchmarking_mixed_precision"
TITLE = "benchmarking_mixed_precision"
EXPERIMENTS = ("autocast_dtypes", "norm_sensitivity", "benchmarking", "benchmarking_bf16", "autocast_memory",
               "autocast_saved_tensors")
POINTS = 2
SUBQUESTIONS = ("a", "b", "c")
SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64"}
LOW = ("float16", "bfloat16")
KEY = ["implementation", "size", "context", "mode"]
TREND_RHO = 0.5  # |Spearman rho| above which a trend is called one


def short(dtype: str) -> str:
    return SHORT.get(dtype, dtype)


def relerr(x) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, ".2g")


def magnitude(x: float) -> str:
    return f"{x:,.0f}" if x >= 1 else format(x, "g")


def _trend(rho: float) -> str:
    if rho != rho:
        return "none"
    return "up" if rho >= TREND_RHO else "down" if rho <= -TREND_RHO else "none"


# ---------------------------------------------------------------------------
# (a) dtypes under autocast
# ---------------------------------------------------------------------------

COMPONENTS = (
    ("model parameters, inside the autocast context", "parameter", None),
    ("fc1 output", None, "fc1 output"),
    ("LayerNorm input (ReLU output)", None, "ln input"),
    ("LayerNorm output", None, "ln output"),
    ("logits (fc2 output)", None, "logits"),
    ("loss", None, "loss"),
    ("gradients of the parameters", "gradient", None),
)


def _dtypes_of(rows: list[dict], kind: str | None, component: str | None) -> list[str]:
    hits = [r["dtype"] for r in rows if (kind and r["kind"] == kind) or (component and r["component"] == component)]
    return sorted(set(hits))


def dtypes_part(records: list[dict]) -> dict | None:
    records = sorted(records, key=lambda r: (r["config"]["device"] != "cuda", r["config"]["device"],
                                             r["config"]["dtype"] != "fp16"))
    if not records:
        return None
    columns, observed = [], []
    for r in records:
        d = r["data"] or {}
        device = r["config"]["device"]
        name = d.get("device_name")
        columns.append(f"{device} {r['config']['dtype']} autocast")
        observed.append({
            "device": device, "device_label": f"{device} ({name})" if name else device, "dtype": r["config"]["dtype"],
            "status": r["status"] if r["status"] != "ok" else d.get("status", "ok"), "error": r.get("error") or d.get("error"),
            "values": {label: _dtypes_of(d.get("rows", []), kind, comp) for label, kind, comp in COMPONENTS},
            "autocast_dtype": d.get("autocast_dtype"), "source": r["_path"],
        })
    rows = []
    for label, _, _ in COMPONENTS:
        row = [Cell(label)]
        for o in observed:
            if o["status"] != "ok":
                row.append(status_cell(o["status"]))
            else:
                row.append(Cell(", ".join(short(t) for t in o["values"][label]) or "–"))
        rows.append(row)
    table = Table(title="dtypes observed under autocast (ToyModel)", columns=["tensor"] + columns, rows=rows,
                  sources=[o["source"] for o in observed],
                  note="recorded by forward hooks and after backward; parameters are read inside the autocast context")
    ok = [o for o in observed if o["status"] == "ok"]

    def every(label: str, want) -> bool:
        return bool(ok) and all(o["values"][label] and all(want(t, o) for t in o["values"][label]) for o in ok)

    low = lambda t, o: short(t) == o["dtype"]  # noqa: E731
    fp32 = lambda t, o: t == "float32"  # noqa: E731
    ln = []
    for device in dict.fromkeys(o["device"] for o in ok):
        mine = [o for o in ok if o["device"] == device]
        ln.append({"device": mine[0]["device_label"],
                   "cases": [{"dtype": o["dtype"], "ln": ", ".join(short(t) for t in o["values"]["LayerNorm output"]),
                              "ln_fp32": o["values"]["LayerNorm output"] == ["float32"]} for o in mine]})
    ln_fp32 = {c["ln_fp32"] for group in ln for c in group["cases"]}
    first = next((r["data"] for r in records if r["data"]), {})
    analysis = {
        "model": {k: first.get(k, "?") for k in ("in_features", "out_features", "batch")},
        "devices": list(dict.fromkeys(o["device_label"] for o in observed)),
        "params_fp32": every("model parameters, inside the autocast context", fp32),
        "linear_low": every("fc1 output", low) and every("logits (fc2 output)", low),
        "loss_fp32": every("loss", fp32), "grads_fp32": every("gradients of the parameters", fp32),
        "ln": ln, "ln_differs": len(ln_fp32) > 1,
        "not_ok": [{"column": c, "status": o["status"], "error": o["error"]} for c, o in zip(columns, observed)
                   if o["status"] != "ok"],
    }
    return {"table": table, "analysis": analysis}


# ---------------------------------------------------------------------------
# (b) LayerNorm / RMSNorm sensitivity
# ---------------------------------------------------------------------------

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
    fig.tight_layout()
    return fig


def norm_analysis(data: dict) -> dict:
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
        out["fp16"] = {k: magnitude(v) if v is not None else None for k, v in out["fp16"].items()}
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
        worst[(dtype, acc)] = {"value": top["rel_error"], "text": relerr(top["rel_error"]), "hidden": int(top["hidden"]),
                               "growth": by_hidden.iloc[-1] / by_hidden.iloc[0] if by_hidden.iloc[0] else math.nan,
                               "h_lo": int(by_hidden.index[0]), "h_hi": int(by_hidden.index[-1])}
    out["worst"] = {f"{short(t)}_{a}": {**v, "growth": sig(v["growth"])} for (t, a), v in worst.items()}
    bf_torch, bf_seq = worst.get(("bfloat16", "backend")), worst.get(("bfloat16", "sequential"))
    fp_torch = worst.get(("float16", "backend"))
    if bf_torch and fp_torch:
        out["bf16_vs_fp16"] = sig(bf_torch["value"] / fp_torch["value"])
    if bf_torch and bf_seq:
        out["bf16_seq_vs_torch"] = sig(bf_seq["value"] / bf_torch["value"])
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
    device = data.get("device_name") or data["device"]
    fig = ctx.figure("norm_sensitivity", norm_plot(pd.DataFrame(data["rows"])),
                     f"LayerNorm and RMSNorm statistics in low precision on {device}: worst relative error of the "
                     "normalised output against float64 (left, cases without overflow) and share of cases with an "
                     "inf or NaN (right). Line style: how the sums are formed.")
    return {"overflow": overflow, "errors": errors, "figure": fig, "device": device,
            "magnitudes": ", ".join(magnitude(m) for m in sorted({x["magnitude"] for x in data["rows"]})),
            "hidden": ", ".join(str(h) for h in sorted({x["hidden"] for x in data["rows"]})),
            "offsets": ", ".join(format(o, "g") for o in sorted({x["offset"] for x in data["rows"]})),
            "eps": format(data["eps"], "g"), "rows_per_case": data["rows_per_case"],
            "analysis": norm_analysis(data)}


# ---------------------------------------------------------------------------
# (c) and (d): transformer runs in fp32 and bf16
# ---------------------------------------------------------------------------


def transformer_frame(ctx, experiments: tuple[str, ...]) -> pd.DataFrame:
    """Tidy rows of every Transformer result of ``experiments``, each (key, precision) once."""
    records = [r for e in experiments for r in ctx.records(e)]
    df = bench_frame(records)
    if df.empty:
        return df
    peaks = {r["_path"]: ((r["data"] or {}).get("peak_memory") or {}).get("allocated_bytes") for r in records}
    df["peak_bytes"] = df["source"].map(peaks).astype(float)
    df["experiment"] = [r["experiment"] for r in records]
    df["context"] = df["context"].astype(int)
    return df.drop_duplicates(KEY + ["precision"], keep="first").reset_index(drop=True)


def paired(df: pd.DataFrame) -> pd.DataFrame:
    """fp32 and bf16 side by side per (implementation, size, context, mode)."""
    cols = ["mean_s", "std_s", "status", "peak_bytes", "source", "params"]
    fp32 = df[df["precision"] == "fp32"].set_index(KEY)[cols]
    bf16 = df[df["precision"] == "bf16"].set_index(KEY)[cols]
    both = fp32.add_suffix("_fp32").join(bf16.add_suffix("_bf16"), how="outer").reset_index()
    both["status_fp32"] = both["status_fp32"].fillna("missing")
    both["status_bf16"] = both["status_bf16"].fillna("missing")
    ok = (both["status_fp32"] == "ok") & (both["status_bf16"] == "ok")
    both["speedup"] = (both["mean_s_fp32"] / both["mean_s_bf16"]).where(ok)
    both["peak_change"] = (both["peak_bytes_bf16"] - both["peak_bytes_fp32"]).where(ok)
    both["peak_ratio"] = (both["peak_bytes_bf16"] / both["peak_bytes_fp32"]).where(ok)
    both["params"] = both["params_fp32"].fillna(both["params_bf16"])
    return both


def _time_cell(row, precision: str) -> Cell:
    status = row[f"status_{precision}"]
    return (Cell(fmt_mean_std(row[f"mean_s_{precision}"], row[f"std_s_{precision}"], 1e-3)) if status == "ok"
            else status_cell(status))


def casts_note(pairs: pd.DataFrame, records: dict[str, dict]) -> str:
    """The dtype conversions one step runs in bf16 and in fp32 (torch.profiler's aten::_to_copy
    calls), at each size's shortest context, forward: the casts autocast adds."""
    parts = []
    for size, g in pairs[pairs["mode"] == "forward"].groupby("size", observed=True, sort=False):
        r = g.sort_values("context").iloc[0]
        casts = [((records.get(r[f"source_{p}"]) or {}).get("data") or {}).get("casts") for p in ("fp32", "bf16")]
        if all(casts):
            parts.append(f"{size}: {casts[1]['calls']} in bf16 against {casts[0]['calls']} in fp32")
    return ("dtype conversions per forward step (aten::_to_copy calls, shortest context): " + ", ".join(parts)
            if parts else "")


def speed_table(pairs: pd.DataFrame, title: str, flags: list[dict] | None = None,
                records: dict[str, dict] | None = None) -> Table:
    modes = [m for m in MODE_COLUMNS if m in set(pairs["mode"])]
    columns, units = ["size", "context"], ["", "tokens"]
    for m in modes:
        columns += [f"{MODE_COLUMNS[m]} fp32", f"{MODE_COLUMNS[m]} bf16", f"{MODE_COLUMNS[m]} speed-up"]
        units += ["ms", "ms", "×"]
    rows = []
    for (size, context), g in pairs.groupby(["size", "context"], sort=False, observed=True):
        row = [Cell(str(size)), Cell(str(context))]
        by_mode = g.set_index("mode")
        for m in modes:
            if m not in by_mode.index:
                row += [status_cell("missing")] * 3
                continue
            r = by_mode.loc[m]
            row += [_time_cell(r, "fp32"), _time_cell(r, "bf16"),
                    Cell(sig(r["speedup"])) if r["speedup"] == r["speedup"] else status_cell("missing")]
        rows.append(row)
    sources = sorted(set(pairs["source_fp32"].dropna()) | set(pairs["source_bf16"].dropna()))
    flagged = "; ".join(filter(None, [checks.note(flags or [], sources), casts_note(pairs, records or {})]))
    return Table(title=title, columns=columns, units=units, rows=rows, sources=sources,
                 note="mean ± sample standard deviation over the measured steps; speed-up = fp32 time / bf16 time "
                      "(above 1: bf16 is faster)"
                      + (f"; {flagged}" if flagged else ""))


def speedup_plot(pairs: pd.DataFrame):
    """Speed-up of bf16 over fp32 against parameter count, one line per context, one panel per mode."""
    modes = [m for m in MODE_COLUMNS if m in set(pairs["mode"])]
    fig, axes = plt.subplots(1, len(modes), figsize=(4.2 * len(modes), 3.6), squeeze=False, sharey=True)
    for ax, mode in zip(axes[0], modes):
        sub = pairs[(pairs["mode"] == mode) & pairs["speedup"].notna()]
        for context, g in sub.groupby("context"):
            g = g.sort_values("params")
            ax.plot(g["params"] / 1e6, g["speedup"], marker="o", label=str(context))
            for _, r in g.iterrows():
                ax.annotate(str(r["size"]), (r["params"] / 1e6, r["speedup"]), fontsize=6, alpha=0.6,
                            textcoords="offset points", xytext=(2, 2))
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
        ax.set_xscale("log")
        ax.set_xlabel("parameters (millions)")
        ax.set_title(MODE_COLUMNS[mode])
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("speed-up of bf16 over fp32 (×)")
    if axes[0][-1].get_legend_handles_labels()[0]:
        legend_outside(axes[0][-1], title="context", fontsize="small")
    fig.tight_layout()
    return fig


def speed_analysis(pairs: pd.DataFrame, flags: list[dict] | None = None) -> dict:
    """The speed-up sentences' numbers, over the pairs whose two cells :func:`checks.defensible` lets compare."""
    fair = [checks.defensible(flags or [], a, b) for a, b in zip(pairs["source_fp32"], pairs["source_bf16"])]
    ok = pairs[pairs["speedup"].notna() & pd.Series(fair, index=pairs.index, dtype=bool)]
    out: dict = {"modes": [], "n": int(len(ok)), "n_pairs": int(len(pairs))}
    mismatch = pairs[(pairs["status_fp32"] != pairs["status_bf16"])
                     & pairs["status_fp32"].isin(["ok", "oom"]) & pairs["status_bf16"].isin(["ok", "oom"])]
    out["status_differs"] = [{"cell": f"{r['size']}, context {r['context']}, {MODE_COLUMNS[r['mode']]}",
                              "fp32": r["status_fp32"].upper(), "bf16": r["status_bf16"].upper()}
                             for _, r in mismatch.iterrows()]
    # which pairs bf16 lost, among those that may be compared (a noisy or shared cell orders nothing)
    bound = {src for f in flags or [] if f["kind"] == "host_bound" for src in f["sources"]}
    out["slower"] = [f"{r['size']}, context {r['context']}, {MODE_COLUMNS[r['mode']]} ({sig(r['speedup'])}×"
                     + ("; host-bound" if {r["source_fp32"], r["source_bf16"]} & bound else "") + ")"
                     for _, r in ok[ok["speedup"] < 1].iterrows()]
    if ok.empty:
        return out
    for mode in [m for m in MODE_COLUMNS if m in set(ok["mode"])]:
        g = ok[ok["mode"] == mode]
        best, worst = g.loc[g["speedup"].idxmax()], g.loc[g["speedup"].idxmin()]
        by_size = g.groupby("params")["speedup"].median().sort_index()
        size_names = g.drop_duplicates("params").set_index("params")["size"]
        by_ctx = g.groupby("context")["speedup"].median().sort_index()
        # Spearman's rho as the Pearson correlation of average ranks (Series.corr's "spearman" needs scipy)
        rank = g["speedup"].rank()
        rho_size = rank.corr(g["params"].rank()) if g["params"].nunique() > 1 else math.nan
        rho_ctx = rank.corr(g["context"].rank()) if g["context"].nunique() > 1 else math.nan
        out["modes"].append({
            "mode": MODE_COLUMNS[mode], "n": int(len(g)),
            "min": sig(worst["speedup"]), "min_cell": f"{worst['size']}, context {worst['context']}",
            "max": sig(best["speedup"]), "max_cell": f"{best['size']}, context {best['context']}",
            "size_lo": str(size_names[by_size.index[0]]), "size_hi": str(size_names[by_size.index[-1]]),
            "size_lo_x": sig(by_size.iloc[0]), "size_hi_x": sig(by_size.iloc[-1]),
            "ctx_lo": int(by_ctx.index[0]), "ctx_hi": int(by_ctx.index[-1]),
            "ctx_lo_x": sig(by_ctx.iloc[0]), "ctx_hi_x": sig(by_ctx.iloc[-1]),
            "rho_size": sig(rho_size, 2) if rho_size == rho_size else "–", "size_trend": _trend(rho_size),
            "rho_ctx": sig(rho_ctx, 2) if rho_ctx == rho_ctx else "–", "ctx_trend": _trend(rho_ctx),
            "multi_size": bool(g["params"].nunique() > 1), "multi_ctx": bool(g["context"].nunique() > 1),
        })
    return out


def speed_part(ctx) -> dict | None:
    bf16_keys = {tuple(r["config"][k] for k in KEY) for r in ctx.records("benchmarking_bf16")}
    df = transformer_frame(ctx, ("benchmarking", "benchmarking_bf16"))
    if df.empty:
        return None
    pairs = paired(df)
    in_grid = [tuple(k) in bf16_keys for k in pairs[KEY].astype(object).itertuples(index=False)]
    both = (pairs["status_fp32"] != "missing") & (pairs["status_bf16"] != "missing")
    pairs = pairs[pd.Series(in_grid, index=pairs.index) | both]
    if pairs.empty or not (pairs["status_bf16"] != "missing").any():
        return None
    order = [str(size) for size in df["size"].cat.categories]  # by model scale, as benchmarking_script orders them
    pairs = pairs.assign(size=pd.Categorical(pairs["size"].astype(str), categories=order, ordered=True))
    pairs = pairs.sort_values(["implementation", "size", "context"])
    timed = [r for e in ("benchmarking", "benchmarking_bf16") for r in ctx.records(e)]
    flags = checks.timing_flags(timed)
    by_path = {r.get("_path"): r for r in timed}
    tables = [speed_table(g, f"Step time, fp32 against bf16 autocast ({impl} implementation)", flags, by_path)
              for impl, g in pairs.groupby("implementation")]
    figures = [ctx.figure(f"mixed_precision_speedup_{impl}", speedup_plot(g),
                          f"Speed-up of bf16 autocast over fp32 against model size ({impl} implementation); "
                          "dotted: no speed-up.")
               for impl, g in pairs.groupby("implementation")]
    return {"tables": tables, "figures": figures, "analysis": speed_analysis(pairs, flags), "flags": flags,
            "settings": ctx.settings("benchmarking_bf16")}


def memory_grid(ctx) -> dict | None:
    grids = ctx.config.get("grids", {})
    return (grids.get(ctx.config.get("_grid", "cpu")) or {}).get("autocast_memory")


def memory_table(pairs: pd.DataFrame, title: str, records: list[dict] | None = None) -> Table:
    modes = [m for m in MODE_COLUMNS if m in set(pairs["mode"])]
    columns, units = ["implementation", "size", "context"], ["", "", "tokens"]
    for m in modes:
        columns += [f"{MODE_COLUMNS[m]} fp32", f"{MODE_COLUMNS[m]} bf16", f"{MODE_COLUMNS[m]} change"]
        units += ["GiB", "GiB", "%"]
    rows = []
    for (impl, size, context), g in pairs.groupby(["implementation", "size", "context"], sort=False, observed=True):
        row = [Cell(impl), Cell(str(size)), Cell(str(context))]
        by_mode = g.set_index("mode")
        for m in modes:
            if m not in by_mode.index:
                row += [status_cell("missing")] * 3
                continue
            r = by_mode.loc[m]
            for p in ("fp32", "bf16"):
                row.append(Cell(sig(r[f"peak_bytes_{p}"] / 2**30)) if r[f"status_{p}"] == "ok"
                           else status_cell(r[f"status_{p}"]))
            change = r["peak_ratio"]
            row.append(Cell(f"{100 * (change - 1):+.1f}") if change == change else status_cell("missing"))
        rows.append(row)
    sources = sorted(set(pairs["source_fp32"].dropna()) | set(pairs["source_bf16"].dropna()))
    return Table(title=title, columns=columns, units=units, rows=rows, sources=sources,
                 note="torch.cuda.max_memory_allocated over the warm-up and measured steps, model and batch included; "
                      "change = bf16 peak / fp32 peak − 1"
                      + (f"; {beyond}" if (beyond := checks.h100_note([r for r in records or []
                                                                      if r.get("_path") in set(sources)])) else ""))


def memory_time_table(pairs: pd.DataFrame, title: str) -> Table:
    t = speed_table(pairs.assign(size=pairs["implementation"] + " " + pairs["size"].astype(str)), title)
    t.columns[0] = "implementation, size"
    return t


def memory_analysis(pairs: pd.DataFrame) -> dict:
    ok = pairs[pairs["peak_change"].notna()]
    out: dict = {"by_impl": [], "n": int(len(ok))}
    if ok.empty:
        return out

    def where(r) -> str:
        return f"{r['size']}, context {r['context']}, {MODE_COLUMNS[r['mode']]}"

    for impl, g in ok.groupby("implementation"):
        up, down = g[g["peak_change"] > 0], g[g["peak_change"] < 0]
        item = {"impl": impl, "n": int(len(g)), "n_up": int(len(up)), "n_down": int(len(down)), "series": []}
        if len(up):
            r = up.loc[up["peak_change"].idxmax()]
            item["max_up"] = {"cell": where(r), "bytes": fmt_bytes(r["peak_change"]), "pct": fmt_pct(r["peak_ratio"] - 1)}
        if len(down):
            r = down.loc[down["peak_change"].idxmin()]
            item["max_down"] = {"cell": where(r), "bytes": fmt_bytes(-r["peak_change"]),
                                "pct": fmt_pct(1 - r["peak_ratio"])}
        for (size, mode), s in g.groupby(["size", "mode"], observed=True):
            s = s.sort_values("context")
            if len(s) < 2:
                continue
            lo, hi = s.iloc[0], s.iloc[-1]
            flip = s[(s["peak_change"] < 0)]
            item["series"].append({
                "size": str(size), "mode": MODE_COLUMNS[mode], "ctx_lo": int(lo["context"]), "ctx_hi": int(hi["context"]),
                "lo": f"{100 * (lo['peak_ratio'] - 1):+.1f} %", "hi": f"{100 * (hi['peak_ratio'] - 1):+.1f} %",
                "down_from": int(flip["context"].min()) if len(flip) and (s["peak_change"] > 0).any() else None,
            })
        out["by_impl"].append(item)
    impls = sorted(set(ok["implementation"]))
    if len(impls) == 2:
        a, b = (ok[ok["implementation"] == i].set_index(["size", "context", "mode"]) for i in impls)
        common = a.index.intersection(b.index)
        if len(common):
            out["impl_compare"] = {
                "a": impls[0], "b": impls[1], "n": int(len(common)),
                "fp32_ratio": sig((b.loc[common, "peak_bytes_fp32"] / a.loc[common, "peak_bytes_fp32"]).median()),
                "bf16_ratio": sig((b.loc[common, "peak_bytes_bf16"] / a.loc[common, "peak_bytes_bf16"]).median()),
                "change_a": fmt_pct((a.loc[common, "peak_ratio"] - 1).median()),
                "change_b": fmt_pct((b.loc[common, "peak_ratio"] - 1).median()),
            }
    out["n_up"] = int((ok["peak_change"] > 0).sum())
    out["n_down"] = int((ok["peak_change"] < 0).sum())
    return out


def memory_part(ctx) -> dict | None:
    grid = memory_grid(ctx)
    if not grid:
        return None
    df = transformer_frame(ctx, ("benchmarking", "benchmarking_bf16", "autocast_memory"))
    if df.empty:
        return None
    pairs = paired(df)
    want = (pairs["implementation"].isin(grid["implementations"]) & pairs["size"].astype(str).isin(grid["sizes"])
            & pairs["context"].isin(grid["contexts"]) & pairs["mode"].isin(grid["modes"]))
    pairs = pairs[want]
    if pairs.empty:
        return None
    order = [s for s in grid["sizes"]]
    pairs = pairs.assign(size=pd.Categorical(pairs["size"].astype(str), categories=order, ordered=True))
    pairs = pairs.sort_values(["implementation", "size", "context"])
    has_peak = bool(pairs["peak_bytes_fp32"].notna().any() or pairs["peak_bytes_bf16"].notna().any())
    out = {"has_peak": has_peak, "time_table": memory_time_table(pairs, "Step time of the memory grid, fp32 against bf16"),
           "grid": {"sizes": list(grid["sizes"]), "contexts": [str(c) for c in grid["contexts"]],
                    "modes": [MODE_COLUMNS[m] for m in grid["modes"]], "implementations": list(grid["implementations"])}}
    if has_peak:
        records = [r for e in ("benchmarking", "benchmarking_bf16", "autocast_memory") for r in ctx.records(e)]
        out["table"] = memory_table(pairs, "Peak memory, fp32 against bf16 autocast", records)
        out["analysis"] = memory_analysis(pairs)
        out["pairs"] = pairs
    return out


# ---------------------------------------------------------------------------
# (d) what the autograd graph keeps
# ---------------------------------------------------------------------------

ROLE_COLUMNS = (("activation", "float32", "fp32 activations"), ("activation", "low", "16-bit activations"),
                ("parameter_copy", None, "16-bit copies of parameters"), ("index", None, "integer and boolean"))


def census_frame(records: list[dict]) -> pd.DataFrame:
    rows = []
    for r in records:
        if r["status"] != "ok":
            continue
        c = r["config"]
        for case in r["data"]["cases"]:
            base = {"implementation": c["implementation"], "size": c["size"], "context": case["context"],
                    "precision": case["precision"], "status": case["status"], "source": r["_path"],
                    "after_forward": (case["allocated_after_forward_bytes"] - case["allocated_before_bytes"])
                    if case.get("allocated_after_forward_bytes") is not None else math.nan,
                    "scale": c["model"]["d_model"] * c["model"]["num_layers"]}
            if not case["groups"]:
                rows.append({**base, "op": None, "dtype": None, "role": None, "bytes": 0})
            for g in case["groups"]:
                rows.append({**base, "op": g["op"], "dtype": g["dtype"], "role": g["role"], "bytes": g["bytes"]})
    return pd.DataFrame(rows)


def _role_bytes(g: pd.DataFrame) -> dict[str, float]:
    out = {}
    for role, dtype, label in ROLE_COLUMNS:
        sel = g["role"] == role
        if dtype == "float32":
            sel &= g["dtype"] == "float32"
        elif dtype == "low":
            sel &= g["dtype"].isin(LOW)
        out[label] = float(g.loc[sel, "bytes"].sum())
    out["total"] = float(g.loc[g["role"].notna() & (g["role"] != "parameter"), "bytes"].sum())
    return out


def census_table(df: pd.DataFrame, size: str, has_alloc: bool) -> Table:
    columns = ["implementation", "context", "precision"] + [label for _, _, label in ROLE_COLUMNS] + ["total saved"]
    if has_alloc:
        columns.append("allocated by the forward")
    rows = []
    for (impl, context, precision), g in df.groupby(["implementation", "context", "precision"], sort=False):
        if g["status"].iloc[0] != "ok":
            rows.append([Cell(impl), Cell(str(context)), Cell(precision)] + [status_cell(g["status"].iloc[0])]
                        * (len(columns) - 3))
            continue
        b = _role_bytes(g)
        row = [Cell(impl), Cell(str(context)), Cell(precision)] + [Cell(fmt_bytes(b[label])) for _, _, label in ROLE_COLUMNS]
        row.append(Cell(fmt_bytes(b["total"])))
        if has_alloc:
            row.append(Cell(fmt_bytes(g["after_forward"].iloc[0])) if g["after_forward"].iloc[0] == g["after_forward"].iloc[0]
                       else status_cell("missing"))
        rows.append(row)
    return Table(title=f"Tensors kept for backward after one forward, {size}", columns=columns, rows=rows,
                 sources=sorted(set(df["source"])),
                 note="each storage counted once; parameters saved as they are are left out (they take no memory of "
                      "their own)" + ("; allocated by the forward: torch.cuda.memory_allocated after the forward "
                                      "minus before, logits included" if has_alloc else ""))


def op_changes(df: pd.DataFrame, impl: str, size: str, context: int, top: int = 6) -> pd.DataFrame:
    g = df[(df["implementation"] == impl) & (df["size"] == size) & (df["context"] == context)
           & df["role"].notna() & (df["role"] != "parameter")]
    pivot = g.pivot_table(index="op", columns="precision", values="bytes", aggfunc="sum", fill_value=0.0)
    for p in ("fp32", "bf16"):
        if p not in pivot:
            pivot[p] = 0.0
    pivot["change"] = pivot["bf16"] - pivot["fp32"]
    fp32_kept = g[(g["precision"] == "bf16") & (g["dtype"] == "float32")].groupby("op")["bytes"].sum()
    pivot["bf16_kept_fp32"] = fp32_kept.reindex(pivot.index).fillna(0.0)
    return pivot.reindex(pivot["change"].abs().sort_values(ascending=False).index).head(top)


def op_table(changes: pd.DataFrame, impl: str, size: str, context: int, sources: list[str]) -> Table:
    rows = [[Cell(op), Cell(fmt_bytes(r["fp32"])), Cell(fmt_bytes(r["bf16"])),
             Cell(("+" if r["change"] >= 0 else "−") + fmt_bytes(abs(r["change"]))), Cell(fmt_bytes(r["bf16_kept_fp32"]))]
            for op, r in changes.iterrows()]
    return Table(title=f"Largest changes by saving operation, {impl}, {size}, context {context}",
                 columns=["autograd node", "fp32 run", "bf16 run", "change", "of the bf16 run, kept in fp32"],
                 rows=rows, sources=sources,
                 note="bytes the node keeps for backward (the node that saved a storage first, walking back from the loss)")


def census_part(records: list[dict]) -> dict | None:
    df = census_frame(records)
    if df.empty:
        return None
    largest = df.sort_values("scale")["size"].iloc[-1]
    has_alloc = bool(df["after_forward"].notna().any())
    tables = [census_table(df[df["size"] == size], size, has_alloc) for size in df.sort_values("scale")["size"].unique()]
    sub = df[df["size"] == largest]
    ctx_hi = int(sub["context"].max())
    op_tables, findings = [], []
    for impl in sorted(sub["implementation"].unique()):
        g = sub[(sub["implementation"] == impl) & (sub["context"] == ctx_hi)]
        if set(g["precision"]) < {"fp32", "bf16"} or (g["status"] != "ok").any():
            continue
        changes = op_changes(df, impl, largest, ctx_hi)
        op_tables.append(op_table(changes, impl, largest, ctx_hi, sorted(set(g["source"]))))
        fp32, bf16 = _role_bytes(g[g["precision"] == "fp32"]), _role_bytes(g[g["precision"] == "bf16"])
        kept = changes[changes["bf16_kept_fp32"] > 0].sort_values("bf16_kept_fp32", ascending=False)
        up = changes[changes["change"] > 0]
        findings.append({
            "impl": impl, "size": largest, "context": ctx_hi,
            "fp32_total": fmt_bytes(fp32["total"]), "bf16_total": fmt_bytes(bf16["total"]),
            "ratio": sig(bf16["total"] / fp32["total"]) if fp32["total"] else "–",
            "copies": fmt_bytes(bf16["16-bit copies of parameters"]),
            "fp32_acts_in_bf16": fmt_bytes(bf16["fp32 activations"]),
            "fp32_acts_share": fmt_pct(bf16["fp32 activations"] / bf16["total"]) if bf16["total"] else "–",
            "kept_ops": ", ".join(kept.index[:3]),
            "up_ops": [{"op": op, "change": fmt_bytes(r["change"])} for op, r in up.head(3).iterrows()],
        })
    copies = {f["copies"] for f in findings}
    return {"tables": tables, "op_tables": op_tables, "findings": findings, "has_alloc": has_alloc,
            "copies_same": len(findings) > 1 and len(copies) == 1}


# ---------------------------------------------------------------------------


def _peak_beside_census(census: dict | None, memory: dict | None) -> None:
    """Add to each census finding the measured change of the forward peak of the same cell."""
    if not census or not memory or "pairs" not in memory:
        return
    pairs = memory["pairs"]
    for f in census["findings"]:
        hit = pairs[(pairs["implementation"] == f["impl"]) & (pairs["size"].astype(str) == f["size"])
                    & (pairs["context"] == f["context"]) & (pairs["mode"] == "forward") & pairs["peak_change"].notna()]
        if len(hit):
            change = hit["peak_change"].iloc[0]
            f["forward_peak_change"] = ("+" if change >= 0 else "−") + fmt_bytes(abs(change))


def build(ctx) -> dict:
    census = census_part(ctx.records("autocast_saved_tensors"))
    memory = memory_part(ctx)
    _peak_beside_census(census, memory)
    if memory:
        memory.pop("pairs", None)
    return {
        "device": ctx.device,
        "dtypes": dtypes_part(ctx.records("autocast_dtypes")),
        "norms": norms_part(ctx.records("norm_sensitivity"), ctx),
        "speed": speed_part(ctx),
        "memory": memory,
        "census": census,
    }
