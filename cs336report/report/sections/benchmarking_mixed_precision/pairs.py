"""(c) of benchmarking_mixed_precision from benchmarking_bf16_pairs: fp32 and bf16 steps of one model,
timed side by side in one process.

One row per cell (implementation, size, context, mode): each side's mean ± standard deviation over
its measured steps, its host-bound check, and the ratio fp32 / bf16 of the means with its spread over
the rounds (the ratio of each round's two block means). Where the bf16 side is host-bound and fp32 is
not, the GPU's bf16 time is at most the measured one, so the ratio is a lower bound; where both are,
the ratio compares two hosts' launch rates and bounds nothing. The trend with model size is read per
mode and context by Spearman's ρ over the sizes whose two sides ran.
"""

from __future__ import annotations

import pandas as pd

from ...bench_frame import MODE_COLUMNS
from ...record_frame import record_frame
from ...tables import Cell, Table, fmt_mean_std, sig, status_cell
from .speed import MIN_TREND_CELLS, _spearman, _trend

SIDES = ("fp32", "bf16")
HOST_MARK = "†"  # beside a time whose steps were host-bound


def _side_columns(side: str) -> dict[str, str]:
    base = f"data.sides.{side}"
    return {f"status_{side}": f"{base}.status", f"mean_{side}": f"{base}.stats_s.mean",
            f"std_{side}": f"{base}.stats_s.std", f"rounds_{side}": f"{base}.round_means_s",
            f"host_{side}": f"{base}.host.host_bound", f"peak_{side}": f"{base}.peak_memory.allocated_bytes"}


def pairs_frame(records: list[dict]) -> pd.DataFrame:
    """One row per pair record: its cell, each side's numbers, the ratio and its spread over rounds, and
    what the ratio is (``kind``: measured, lower_bound, upper_bound, launch_rates, or none)."""
    columns = {"implementation": "config.implementation", "size": "config.size", "context": "config.context",
               "mode": "config.mode", "status": "status", "d_model": "config.model.d_model",
               "layers": "config.model.num_layers", "params": "data.params", "shared": "contention.shared",
               "source": "_path", **_side_columns("fp32"), **_side_columns("bf16")}
    df = record_frame(records, columns, exact=True)
    if df.empty:
        return df
    for side in SIDES:  # a record that failed as a whole is that status on both sides
        df[f"status_{side}"] = [s if r == "ok" else r for s, r in zip(df[f"status_{side}"].fillna("missing"),
                                                                       df["status"])]
        df[f"host_{side}"] = df[f"host_{side}"].map(lambda v: bool(v))
    ok = (df["status_fp32"] == "ok") & (df["status_bf16"] == "ok")
    df["ratio"] = [f / b if k else None for f, b, k in zip(df["mean_fp32"], df["mean_bf16"], ok)]
    per_round = [[f / b for f, b in zip(rf, rb)] if k else [] for rf, rb, k
                 in zip(df["rounds_fp32"], df["rounds_bf16"], ok)]
    df["ratio_lo"] = [min(r) if r else None for r in per_round]
    df["ratio_hi"] = [max(r) if r else None for r in per_round]
    df["kind"] = [("none" if not k else "launch_rates" if hf and hb else "lower_bound" if hb
                   else "upper_bound" if hf else "measured")
                  for k, hf, hb in zip(ok, df["host_fp32"], df["host_bf16"])]
    order = df.assign(_d=df["d_model"] * df["layers"]).sort_values("_d")["size"].drop_duplicates().tolist()
    df["size"] = pd.Categorical(df["size"], categories=order, ordered=True)
    return df.sort_values(["implementation", "mode", "context", "size"]).reset_index(drop=True)


def _time_cell(row, side: str) -> Cell:
    if row[f"status_{side}"] != "ok":
        return status_cell(row[f"status_{side}"])
    mark = f" {HOST_MARK}" if row[f"host_{side}"] else ""
    return Cell(fmt_mean_std(row[f"mean_{side}"], row[f"std_{side}"], 1e-3) + mark, source=row["source"])


def _ratio_cell(row) -> Cell:
    if row["kind"] == "none":
        return status_cell("missing")
    prefix = {"lower_bound": "≥ ", "upper_bound": "≤ "}.get(row["kind"], "")
    lo, hi = sig(row["ratio_lo"]), sig(row["ratio_hi"])
    spread = f" ({lo}–{hi})" if lo != hi else ""
    return Cell(f"{prefix}{sig(row['ratio'])}{spread}", source=row["source"])


def pairs_table(df: pd.DataFrame, title: str) -> Table:
    """The handout's table: per size and context, fp32 and bf16 times and their ratio, for each mode."""
    modes = [m for m in MODE_COLUMNS if m in set(df["mode"])]
    columns, units = ["size", "context"], ["", "tokens"]
    for m in modes:
        columns += [f"{MODE_COLUMNS[m]} fp32", f"{MODE_COLUMNS[m]} bf16", f"{MODE_COLUMNS[m]} fp32/bf16"]
        units += ["ms", "ms", "×"]
    rows = []
    for (size, context), g in df.sort_values(["size", "context"]).groupby(["size", "context"], sort=False,
                                                                        observed=True):
        by_mode = g.set_index("mode")
        row = [Cell(str(size)), Cell(str(context))]
        for m in modes:
            if m not in by_mode.index:
                row += [status_cell("missing")] * 3
                continue
            r = by_mode.loc[m]
            row += [_time_cell(r, "fp32"), _time_cell(r, "bf16"), _ratio_cell(r)]
        rows.append(row)
    note = ("mean ± sample standard deviation over the measured steps of all rounds; fp32/bf16: the ratio of the "
            "means, in brackets its range over the rounds; "
            f"{HOST_MARK}: host-bound steps (the launches set the time); ≥: only bf16 host-bound, so the ratio is a "
            "lower bound")
    return Table(title=title, columns=columns, units=units, rows=rows, sources=sorted(df["source"]), note=note)


def _cell_name(r, contexts: int) -> str:
    return f"{r['size']}" + (f", context {r['context']}" if contexts > 1 else "") + f", {MODE_COLUMNS[r['mode']]}"


def _trends(df: pd.DataFrame) -> list[dict]:
    """Per mode and context: the ratio at the smallest and the largest size, and Spearman's ρ over sizes."""
    out = []
    for (mode, context), g in df[df["kind"] != "none"].groupby(["mode", "context"], sort=False):
        g = g.sort_values("size")
        lo, hi = g.iloc[0], g.iloc[-1]
        rho = round(_spearman(g["params"].astype(float), g["ratio"].astype(float)), 9)  # no 0.99999 from ranks
        out.append({"mode": MODE_COLUMNS[mode], "context": int(context), "n": int(len(g)),
                    "lo_size": str(lo["size"]), "lo_x": sig(lo["ratio"]), "lo_bound": lo["kind"] == "lower_bound",
                    "hi_size": str(hi["size"]), "hi_x": sig(hi["ratio"]), "hi_bound": hi["kind"] == "lower_bound",
                    "rho": sig(rho, 2) if rho == rho else "–",
                    "trend": _trend(rho) if len(g) >= MIN_TREND_CELLS else "few"})
    return out


def _by_mode(df: pd.DataFrame, trends: list[dict], name) -> list[dict]:
    """Per mode: the smallest and the largest ratio over its timed cells (``lo_bound``/``hi_bound``: a
    lower bound), whether every context's trend with size is up, and Spearman's ρ per context."""
    out = []
    for mode, g in df[df["kind"] != "none"].groupby("mode", sort=False):
        label = MODE_COLUMNS[mode]
        lo, hi = g.loc[g["ratio"].astype(float).idxmin()], g.loc[g["ratio"].astype(float).idxmax()]
        ts = [t for t in trends if t["mode"] == label]
        out.append({"mode": label, "lo_x": sig(lo["ratio"]), "lo_cell": name(lo), "lo_bound": lo["kind"] == "lower_bound",
                    "hi_x": sig(hi["ratio"]), "hi_cell": name(hi), "hi_bound": hi["kind"] == "lower_bound",
                    "up": bool(ts) and all(t["trend"] == "up" for t in ts),
                    "rhos": [t["rho"] for t in ts if t["trend"] != "few"],
                    "contexts": [t["context"] for t in ts if t["trend"] != "few"]})
    return out


def _best(clean: pd.DataFrame, name) -> dict | None:
    """The cell of the largest measured ratio."""
    if clean.empty:
        return None
    r = clean.loc[clean["ratio"].astype(float).idxmax()]
    return {"cell": name(r), "x": sig(r["ratio"])}


def pairs_analysis(df: pd.DataFrame) -> dict:
    """The numbers the answer's sentences read."""
    contexts = df["context"].nunique()
    name = lambda r: _cell_name(r, contexts)  # noqa: E731
    timed = df[df["kind"] != "none"]
    clean = timed[timed["kind"] == "measured"]
    trends = _trends(df)
    spread = ((clean["ratio_hi"] - clean["ratio_lo"]) / clean["ratio"]).max() if len(clean) else None
    return {
        "n": int(len(timed)), "n_cells": int(len(df)), "contexts": sorted(int(c) for c in df["context"].unique()),
        "trends": trends,
        "by_mode": _by_mode(df, trends, lambda r: str(r["size"]) + (f", context {r['context']}" if contexts > 1 else "")),
        "lo_bound_smallest": any(t["lo_bound"] and t["trend"] == "up" for t in trends),
        "lower_bounds": [{"cell": name(r), "at_least": sig(r["ratio"])} for _, r in
                         timed[timed["kind"] == "lower_bound"].iterrows()],
        "launch_rates": [name(r) for _, r in timed[timed["kind"] == "launch_rates"].iterrows()],
        "upper_bounds": [{"cell": name(r), "at_most": sig(r["ratio"])} for _, r in
                         timed[timed["kind"] == "upper_bound"].iterrows()],
        "slower": [f"{name(r)} ({sig(r['ratio'])}×)" for _, r in clean[clean["ratio"] < 1].iterrows()],
        "best": _best(clean, name),
        "round_spread_pct": sig(100 * spread, 2) if spread is not None and spread == spread else None,
        "failed": [{"cell": name(r), "fp32": r["status_fp32"].upper(), "bf16": r["status_bf16"].upper()}
                   for _, r in df[df["kind"] == "none"].iterrows()],
        "shared": [name(r) for _, r in df[df["shared"].map(bool)].iterrows()],
    }


def pairs_part(ctx) -> dict | None:
    """The side-by-side tables and their analysis; None where benchmarking_bf16_pairs has no records."""
    records = ctx.records("benchmarking_bf16_pairs")
    if not records:
        return None
    df = pairs_frame(records)
    config = records[0]["config"]
    return {"tables": [pairs_table(g, f"Step time, fp32 against bf16 autocast timed side by side ({impl} "
                                      "implementation)") for impl, g in df.groupby("implementation")],
            "analysis": pairs_analysis(df),
            "rounds": config.get("rounds"), "warmup_steps": config.get("warmup_steps"),
            "measured_steps": config.get("measured_steps"), "batch_size": config.get("batch_size"),
            "settings": ctx.settings("benchmarking_bf16_pairs")}
