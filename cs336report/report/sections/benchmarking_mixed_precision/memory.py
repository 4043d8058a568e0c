"""(d) of benchmarking_mixed_precision: peak memory in fp32 against bf16, per implementation."""

from __future__ import annotations

import math

import pandas as pd

from ... import checks
from ....accounting import peak as accounting_peak
from ...bench_frame import MODE_COLUMNS
from ...labels import PEAK_ALLOCATED, PREDICTED
from ...tables import Cell, Table, fmt_bytes, fmt_pct, sig, status_cell
from ..memory_profiling.analytic import prediction_inputs
from .speed import paired, speed_table, transformer_frame


def memory_grid(ctx) -> dict | None:
    return ctx.render_settings.grid_of("autocast_memory")


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
                 note=f"{PEAK_ALLOCATED}: torch.cuda.max_memory_allocated over the warm-up and measured steps, model "
                      f"and batch included; change = bf16 {PEAK_ALLOCATED} / fp32 {PEAK_ALLOCATED} − 1"
                      + (f"; {beyond}" if (beyond := checks.h100_note([r for r in records or []
                                                                      if r["_path"] in set(sources)])) else ""))


def predicted(record: dict) -> dict | None:
    """The formula's peak of one Transformer record (cs336report.accounting.transformer), or None without a model."""
    inputs = prediction_inputs(record)
    if inputs is None or inputs["mode"] not in MODE_COLUMNS:
        return None
    return accounting_peak.predicted_peak_bytes(**inputs)


def formula_rows(pairs: pd.DataFrame, records: dict[str, dict]) -> list[dict]:
    """Per cell and precision: the prediction in allocator blocks and measured / predicted."""
    out = []
    for _, r in pairs.iterrows():
        row = {"implementation": r["implementation"], "size": str(r["size"]), "context": int(r["context"]),
               "mode": r["mode"]}
        for p in ("fp32", "bf16"):
            rec = records.get(r[f"source_{p}"])
            pred = predicted(rec) if rec else None
            measured = r[f"peak_bytes_{p}"] if r[f"status_{p}"] == "ok" else math.nan
            row[p] = None if pred is None else {
                "pred": pred, "ratio": measured / pred["allocated"] if measured == measured else None}
        out.append(row)
    return out


def formula_table(rows: list[dict], sources: list[str]) -> Table | None:
    rows = [r for r in rows if r["fp32"] or r["bf16"]]
    if not rows:
        return None
    cells = []
    for r in rows:
        row = [Cell(r["implementation"]), Cell(r["size"]), Cell(str(r["context"])), Cell(MODE_COLUMNS[r["mode"]])]
        for p in ("fp32", "bf16"):
            x = r[p]
            row += [Cell(sig(x["pred"]["allocated"] / 2**30)) if x else Cell("–"),
                    Cell(sig(x["ratio"], 3)) if x and x["ratio"] is not None else Cell("–")]
        row.append(Cell(r["bf16"]["pred"]["moment"]) if r["bf16"] else Cell("–"))
        cells.append(row)
    return Table(title=f"{PEAK_ALLOCATED.capitalize()} against the formula, fp32 and bf16 autocast",
                 columns=["implementation", "size", "context", "step", f"fp32 {PREDICTED}", "fp32 measured / predicted",
                          f"bf16 {PREDICTED}", "bf16 measured / predicted", "bf16 peak at"],
                 units=["", "", "tokens", "", "GiB", "×", "GiB", "×", ""], rows=cells, sources=sources,
                 note=(f"{PREDICTED}: cs336report.accounting_peak.predicted_peak_bytes for the cell's settings, in allocator "
                       f"blocks (what {PEAK_ALLOCATED} counts); peak at: the moment of the step the formula finds "
                       "holding the most (memory_profiling's Analytic accounting gives the formula)"))


def formula_analysis(rows: list[dict]) -> dict:
    ratios = [(r, p, r[p]["ratio"]) for r in rows for p in ("fp32", "bf16") if r[p] and r[p]["ratio"] is not None]
    if not ratios:
        return {}
    out = {"n": len(ratios), "min": sig(min(x for _, _, x in ratios), 3), "max": sig(max(x for _, _, x in ratios), 3),
           "outside": [f"{r['implementation']} {r['size']}, context {r['context']}, {MODE_COLUMNS[r['mode']]}, {p} "
                       f"({sig(x, 3)}×, {fmt_bytes((x - 1) * r[p]['pred']['allocated'])} more than predicted)"
                       for r, p, x in ratios if abs(x - 1) > 0.03],
           "casts": []}
    for size in dict.fromkeys(r["size"] for r in rows):
        r = next((r for r in rows if r["size"] == size and r["bf16"]), None)
        if r:
            out["casts"].append({"size": size, "bytes": fmt_bytes(r["bf16"]["pred"]["autocast_casts"])})
    return out


def memory_time_table(pairs: pd.DataFrame, title: str, records: list[dict] | None = None) -> Table:
    """The memory grid's step times, flagged as the timing tables are (host-bound, shared, orderings
    that cannot be physical) from ``records``, the cells' own."""
    records = records or []
    flags = checks.timing_flags(records) if records else None
    t = speed_table(pairs.assign(size=pairs["implementation"] + " " + pairs["size"].astype(str)), title, flags,
                    {r["_path"]: r for r in records} if records else None)
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
            # the shortest context from which every longer one saves too, where a shorter one raised the peak
            saves = list(s["peak_change"] < 0)
            tail = next((i for i in range(len(saves)) if all(saves[i:])), None)
            flip = s.iloc[tail:] if tail else s.iloc[0:0]  # tail 0: every context saves, no turning point
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


# The records of the memory grid's cells: fp32 and bf16 cells that benchmarking already timed, and the rest.
MEMORY_EXPERIMENTS = ("benchmarking", "benchmarking_bf16", "autocast_memory")


def memory_part(ctx) -> dict | None:
    grid = memory_grid(ctx)
    if not grid:
        return None
    df = transformer_frame(ctx, MEMORY_EXPERIMENTS)
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
    records = [r for e in MEMORY_EXPERIMENTS for r in ctx.records(e)]
    out = {"has_peak": has_peak,
           "time_table": memory_time_table(pairs, "Step time of the memory grid, fp32 against bf16", records),
           "grid": {"sizes": list(grid["sizes"]), "contexts": [str(c) for c in grid["contexts"]],
                    "modes": [MODE_COLUMNS[m] for m in grid["modes"]], "implementations": list(grid["implementations"])}}
    if has_peak:
        out["table"] = memory_table(pairs, f"{PEAK_ALLOCATED.capitalize()}, fp32 against bf16 autocast", records)
        out["analysis"] = memory_analysis(pairs)
        rows = formula_rows(pairs, {r["_path"]: r for r in records})
        out["formula_table"] = formula_table(rows, out["table"].sources)
        out["formula"] = formula_analysis(rows)
        out["pairs"] = pairs
    return out
