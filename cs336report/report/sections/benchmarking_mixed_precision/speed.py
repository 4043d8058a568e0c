"""(c) of benchmarking_mixed_precision: Transformer step times in fp32 against bf16 autocast."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

from ... import checks  # noqa: E402
from ...bench_frame import MODE_COLUMNS  # noqa: E402
from ...bench_frame import frame as bench_frame  # noqa: E402
from ...plots import legend_outside  # noqa: E402
from ...record_frame import record_frame  # noqa: E402
from ...tables import Cell, Table, fmt_mean_std, sig, status_cell  # noqa: E402

KEY = ["implementation", "size", "context", "mode"]
TREND_RHO = 0.5  # |Spearman rho| above which a trend is called one
MIN_TREND_CELLS = 3  # fewer cells than this name no trend (two always correlate at +-1)


def _join(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 2 else names)


def _spearman(x: pd.Series, y: pd.Series) -> float:
    """Spearman's rho of ``y`` against ``x``: the Pearson correlation of their average ranks (Series.corr's
    "spearman" needs scipy); nan where ``x`` does not vary."""
    return y.rank().corr(x.rank()) if x.nunique() > 1 else math.nan


def _trend(rho: float) -> str:
    if rho != rho:
        return "none"
    return "up" if rho >= TREND_RHO else "down" if rho <= -TREND_RHO else "none"


def transformer_frame(ctx, experiments: tuple[str, ...]) -> pd.DataFrame:
    """Tidy rows of every Transformer result of ``experiments``, each (key, precision) once."""
    records = [r for e in experiments for r in ctx.records(e)]
    df = bench_frame(records)
    if df.empty:
        return df
    peaks = dict(record_frame(records, {"path": "_path", "peak": "data.peak_memory.allocated_bytes"},
                              exact=True).itertuples(index=False))
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


def speedup_plot(pairs: pd.DataFrame, flags: list[dict] | None = None):
    """Speed-up of bf16 over fp32 against parameter count, one line per context, one panel per mode;
    a pair that :func:`checks.defensible` does not let compare is drawn hollow."""
    fair = [checks.defensible(flags or [], a, b) for a, b in zip(pairs["source_fp32"], pairs["source_bf16"])]
    pairs = pairs.assign(fair=pd.Series(fair, index=pairs.index, dtype=bool))
    modes = [m for m in MODE_COLUMNS if m in set(pairs["mode"])]
    fig, axes = plt.subplots(1, len(modes), figsize=(4.2 * len(modes), 3.6), squeeze=False, sharey=True)
    for ax, mode in zip(axes[0], modes):
        sub = pairs[(pairs["mode"] == mode) & pairs["speedup"].notna()]
        for context, g in sub.groupby("context"):
            g = g.sort_values("params")
            (line,) = ax.plot(g["params"] / 1e6, g["speedup"], label=str(context))
            for fair, h in g.groupby("fair"):
                ax.plot(h["params"] / 1e6, h["speedup"], "o", color=line.get_color(),
                        markerfacecolor=None if fair else "white")
            for _, r in g.iterrows():
                ax.annotate(str(r["size"]), (r["params"] / 1e6, r["speedup"]), fontsize=6, alpha=0.6,
                            textcoords="offset points", xytext=(2, 2))
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # 2×10², 3×10², ... overlapped
        ax.set_xlabel("parameters (millions)")
        ax.set_title(MODE_COLUMNS[mode])
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("speed-up of bf16 over fp32 (×)")
    if axes[0][-1].get_legend_handles_labels()[0]:
        legend_outside(axes[0][-1], title="context", fontsize="small")
    return fig


def _only_host_bound(flags: list[dict], source: str) -> bool:
    """The record at ``source`` is flagged, and only as host-bound (beside other jobs or not)."""
    kinds = {f["kind"] for f in flags if source in f["sources"]}
    return bool(kinds) and kinds <= {"host_bound", "host_bound_beside_jobs"}


def lower_bounds(pairs: pd.DataFrame, flags: list[dict], records: dict[str, dict] | None = None) -> list[dict]:
    """Per mode, the pairs that :func:`checks.defensible` leaves out only because the bf16 step was
    host-bound, where bf16 is still the faster: a host that launched faster could only shorten that
    step, so the measured speed-up is a lower bound (its kernels alone, where recorded, give an upper one).
    The fp32 cell must be clean, and nothing may flag the pair's ordering."""
    out: dict[str, list] = {}
    params: dict[str, list] = {}
    for _, r in pairs[pairs["speedup"].notna()].sort_values("params").iterrows():
        a, b = r["source_fp32"], r["source_bf16"]
        if checks.defensible(flags, a, b) or not checks.defensible(flags, a) or not _only_host_bound(flags, b):
            continue
        if r["speedup"] <= 1:  # a host-bound bf16 step that loses says nothing about the precision
            continue
        host = (((records or {}).get(b) or {}).get("data") or {}).get("host") or {}
        kernels = (host.get("kernels_alone") or {}).get("kernels_s")
        out.setdefault(MODE_COLUMNS[r["mode"]], []).append({
            "cell": f"{r['size']}" + ("" if pairs["context"].nunique() == 1 else f", context {r['context']}"),
            "at_least": sig(r["speedup"]),
            "at_most": sig(r["mean_s_fp32"] / kernels) if kernels else None})
        params.setdefault(MODE_COLUMNS[r["mode"]], []).append((r["params"], r["speedup"]))
    trends = {}
    for mode, values in params.items():  # the bound against model size, as speed_analysis reads a trend
        g = pd.DataFrame(values, columns=["params", "speedup"])
        trends[mode] = _trend(_spearman(g["params"], g["speedup"])) if len(g) >= MIN_TREND_CELLS else "few"
    return [{"mode": mode, "cells": cells, "size_trend": trends[mode]} for mode, cells in out.items()]


def speed_analysis(pairs: pd.DataFrame, flags: list[dict] | None = None, records: dict[str, dict] | None = None) -> dict:
    """The speed-up sentences' numbers, over the pairs whose two cells :func:`checks.defensible` lets compare;
    where there are none, the one-sided comparisons :func:`lower_bounds` allows."""
    fair = [checks.defensible(flags or [], a, b) for a, b in zip(pairs["source_fp32"], pairs["source_bf16"])]
    ok = pairs[pairs["speedup"].notna() & pd.Series(fair, index=pairs.index, dtype=bool)]
    out: dict = {"modes": [], "n": int(len(ok)), "n_pairs": int(len(pairs))}
    # the pairs left out only because their bf16 step was host-bound: lower bounds of the speed-up
    out["bounds"] = lower_bounds(pairs, flags or [], records)
    mismatch = pairs[(pairs["status_fp32"] != pairs["status_bf16"])
                     & pairs["status_fp32"].isin(["ok", "oom"]) & pairs["status_bf16"].isin(["ok", "oom"])]
    out["status_differs"] = [{"cell": f"{r['size']}, context {r['context']}, {MODE_COLUMNS[r['mode']]}",
                              "fp32": r["status_fp32"].upper(), "bf16": r["status_bf16"].upper()}
                             for _, r in mismatch.iterrows()]
    # which pairs bf16 lost, among those that may be compared (a noisy or shared cell orders nothing)
    bound = checks.host_bound_sources(flags or [])
    out["slower"] = [f"{r['size']}, context {r['context']}, {MODE_COLUMNS[r['mode']]} ({sig(r['speedup'])}×"
                     + ("; host-bound" if {r["source_fp32"], r["source_bf16"]} & bound else "") + ")"
                     for _, r in ok[ok["speedup"] < 1].iterrows()]
    if ok.empty:
        return out
    for mode in [m for m in MODE_COLUMNS if m in set(ok["mode"])]:
        g = ok[ok["mode"] == mode]
        # sizes with a timed pair in this mode but none that may be compared, smallest first
        timed = pairs[(pairs["mode"] == mode) & pairs["speedup"].notna()].sort_values("params")
        compared = set(g["size"])
        left = [str(s) for s in timed.drop_duplicates("params")["size"] if s not in compared]
        best, worst = g.loc[g["speedup"].idxmax()], g.loc[g["speedup"].idxmin()]
        by_size = g.groupby("params")["speedup"].median().sort_index()
        size_names = g.drop_duplicates("params").set_index("params")["size"]
        by_ctx = g.groupby("context")["speedup"].median().sort_index()
        rho_size, rho_ctx = _spearman(g["params"], g["speedup"]), _spearman(g["context"], g["speedup"])
        out["modes"].append({
            "mode": MODE_COLUMNS[mode], "n": int(len(g)),
            "min": sig(worst["speedup"]), "min_cell": f"{worst['size']}, context {worst['context']}",
            "slows": bool(worst["speedup"] < 1),  # bf16 slower than fp32 in some pair of this mode
            "max": sig(best["speedup"]), "max_cell": f"{best['size']}, context {best['context']}",
            "size_lo": str(size_names[by_size.index[0]]), "size_hi": str(size_names[by_size.index[-1]]),
            "size_lo_x": sig(by_size.iloc[0]), "size_hi_x": sig(by_size.iloc[-1]),
            "ctx_lo": int(by_ctx.index[0]), "ctx_hi": int(by_ctx.index[-1]),
            "ctx_lo_x": sig(by_ctx.iloc[0]), "ctx_hi_x": sig(by_ctx.iloc[-1]),
            # cells behind each end's median
            "size_lo_n": int((g["params"] == by_size.index[0]).sum()),
            "size_hi_n": int((g["params"] == by_size.index[-1]).sum()),
            # two cells always rank-correlate at ±1: a trend needs MIN_TREND_CELLS
            "rho_size": sig(rho_size, 2) if rho_size == rho_size else "–",
            "size_trend": _trend(rho_size) if len(g) >= MIN_TREND_CELLS else "few",
            "rho_ctx": sig(rho_ctx, 2) if rho_ctx == rho_ctx else "–",
            "ctx_trend": _trend(rho_ctx) if len(g) >= MIN_TREND_CELLS else "few",
            "multi_size": bool(g["params"].nunique() > 1), "multi_ctx": bool(g["context"].nunique() > 1),
            "left_out": _join(left), "smaller_left_out": bool((timed["params"] < g["params"].min()).any()),
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
    by_path = {r["_path"]: r for r in timed}
    tables = [speed_table(g, f"Step time, fp32 against bf16 autocast ({impl} implementation)", flags, by_path)
              for impl, g in pairs.groupby("implementation")]
    figures = [ctx.figure(f"mixed_precision_speedup_{impl}", speedup_plot(g, flags),
                          f"Speed-up of bf16 autocast over fp32 against model size ({impl} implementation); "
                          "dotted: no speed-up; hollow: a pair the text leaves out (flagged in the table).")
               for impl, g in pairs.groupby("implementation")]
    return {"tables": tables, "figures": figures, "analysis": speed_analysis(pairs, flags, by_path), "flags": flags,
            "settings": ctx.settings("benchmarking_bf16")}
