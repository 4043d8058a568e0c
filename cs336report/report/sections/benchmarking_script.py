"""benchmarking_script: end-to-end step times, throughput, variability and warm-up."""

from __future__ import annotations

import math

import pandas as pd

from .. import checks, plots
from ...accounting import transformer as accounting
from ..bench_frame import MODE_COLUMNS, frame, phase_timing
from ..oom import does_not_fit
from ..tables import (Cell, Num, Table, fmt_mean_std, fmt_pct, fmt_seconds, pivot_cells, sig, status_cell,
                      time_unit)

EXPERIMENTS = ("benchmarking", "benchmarking_warmup", "roofline")

PEAK_KIND = {"bf16": "bf16", "fp16": "bf16"}


def _peaks(roofline: list[dict]) -> dict[str, float]:
    for r in roofline:
        if r["status"] == "ok":
            return {kind: v["tflops"] for kind, v in r["data"]["matmul"].items()}
    return {}


def _peak_for(row, peaks: dict[str, float]) -> float:
    kind = PEAK_KIND.get(row["precision"], "tf32" if row["tf32"] else "fp32")
    return peaks.get(kind, math.nan)


def timing_table(df: pd.DataFrame, title: str, flags: list[dict] | None = None,
                 records: list[dict] | None = None) -> Table:
    """Size x context rows; one column per mode (mean ± std), plus the backward phase."""
    df = df.copy()
    scale = 1e-3
    df["text"] = [fmt_mean_std(m, s, scale) for m, s in zip(df["mean_s"], df["std_s"])]
    grid = pivot_cells(df, ["size", "context"], "mode", "text")
    fb = df[df["mode"] == "forward_backward"].set_index(["size", "context"])
    columns = ["size", "context", "params"] + [MODE_COLUMNS[m] for m in MODE_COLUMNS if m in grid.columns]
    units = ["", "tokens", "M"] + ["ms"] * (len(columns) - 3)
    has_bwd = not fb.empty
    if has_bwd:  # the phases of the forward + backward step, timed inside it
        columns += ["forward phase of forward + backward", "backward phase of forward + backward"]
        units += ["ms", "ms"]
    params = df.dropna(subset=["params"]).groupby("size", observed=True)["params"].first()
    rows = []
    for (size, context), cells in grid.iterrows():
        n = params.get(size)
        row = [Cell(str(size)), Cell(str(context)), Cell(sig(n / 1e6, 4) if n else "–")]
        row += [cells[m] if isinstance(cells[m], Cell) else status_cell("missing") for m in MODE_COLUMNS if m in grid.columns]
        if has_bwd:
            if (size, context) in fb.index and fb.loc[(size, context), "status"] == "ok":
                b = fb.loc[(size, context)]
                row += [Cell(fmt_mean_std(b[f"{phase}_mean_s"], b[f"{phase}_std_s"], scale))
                        for phase in ("forward", "backward")]
            else:
                status = fb.loc[(size, context), "status"] if (size, context) in fb.index else "missing"
                row += [status_cell(status)] * 2
        rows.append(row)
    return Table(title=title, columns=columns, units=units, rows=rows, sources=sorted(df["source"]),
                 note="mean ± sample standard deviation over the measured steps"
                      + ("; the phases of forward + backward are timed inside its steps ("
                         + PHASE_METHOD_WORDS.get(phase_timing(df), "by methods that differ between its cells")
                         + "), while the forward column is a forward-only step timed apart" if has_bwd else "")
                      + (f"; {flagged}" if (flagged := checks.note(flags or [], df["source"])) else "")
                      + (f"; {beyond}" if (beyond := checks.h100_note([r for r in records or []
                                                                      if r["_path"] in set(df["source"])])) else ""))


def throughput_table(df: pd.DataFrame, peaks: dict[str, float]) -> Table:
    rows = []
    for _, r in df.sort_values(["size", "context"]).iterrows():
        if r["status"] != "ok":
            rows.append([Cell(str(r["size"])), Cell(str(r["context"])), Cell(MODE_COLUMNS[r["mode"]]),
                         status_cell(r["status"]), status_cell(r["status"]), status_cell(r["status"])])
            continue
        peak = _peak_for(r, peaks)
        rows.append([
            Cell(str(r["size"])), Cell(str(r["context"])), Cell(MODE_COLUMNS[r["mode"]]),
            Cell(sig(r["flops"] / 1e12)), Cell(sig(r["tflops"])),
            Cell(sig(100 * r["tflops"] / peak) if peak == peak else "–"),
        ])
    return Table(
        title="Achieved throughput",
        columns=["size", "context", "mode", "FLOPs per step", "achieved", "of measured matmul peak"],
        units=["", "tokens", "", "TFLOP", "TFLOP/s", "%"],
        rows=rows, sources=sorted(df["source"]),
    )


def roofline_table(roofline: list[dict]) -> Table | None:
    ok = [r for r in roofline if r["status"] == "ok"]
    if not ok:
        return None
    r = ok[0]
    rows = [[Cell(f"matmul {kind} ({v['n']}×{v['n']})"), Cell(sig(v["tflops"])), Cell("TFLOP/s")]
            for kind, v in r["data"]["matmul"].items()]
    copy = r["data"]["copy"]
    rows.append([Cell(f"device copy ({copy['bytes'] // 2**20} MiB, read + write)"), Cell(sig(copy["gb_per_s"])), Cell("GB/s")])
    return Table(title="Measured peaks of this machine", columns=["probe", "value", "unit"], rows=rows,
                 sources=[r["_path"]])


FIRST_STEP_ORDINARY = 1.2  # a first measured step below 1.2× the others paid no one-time cost worth naming


def first_and_rest(measured: list[float]) -> tuple[float, float]:
    """The first measured step and the mean of the others (of itself where it is the only one)."""
    rest = measured[1:] or measured
    return measured[0], sum(rest) / len(rest)


def warmup_table(wf: pd.DataFrame) -> Table:
    rows = []
    for _, r in wf.sort_values("warmup").iterrows():
        if r["status"] != "ok":
            rows.append([Cell(str(r["warmup"]))] + [status_cell(r["status"])] * 4)
            continue
        first, rest = first_and_rest(r["measured_s"])
        rows.append([
            Cell(str(r["warmup"])), Cell(fmt_mean_std(r["mean_s"], r["std_s"], 1e-3)),
            Cell(sig(first * 1e3)), Cell(sig(rest * 1e3)), Cell(sig(first / rest)),
        ])
    return Table(
        title="Warm-up study",
        columns=["warm-up steps", "measured mean ± std", "first measured step", "mean of the other measured steps",
                 "first / others"],
        units=["", "ms", "ms", "ms", "×"], rows=rows, sources=sorted(wf["source"]),
    )


# How the phase columns were timed, by bench_frame.phase_method
PHASE_METHOD_WORDS = {"events": "between CUDA events, with no synchronization between the phases",
                      "wall clock": "by the wall clock, on a CPU that runs what it issues",
                      "synchronized": "synchronized at each phase's boundary"}
# a cell whose steps' standard deviation exceeds this many times the median cell's "varies more"
VARY_MORE = 2


def analysis(df: pd.DataFrame, wf: pd.DataFrame, flags: list[dict] | None = None) -> dict:
    """Numbers the section's sentences quote, all computed from the results; a comparison of two
    cells that :func:`checks.defensible` refuses is not drawn."""
    flags = flags or []
    ok = df[df["status"] == "ok"].copy()
    out: dict = {"n_cells": len(df), "n_ok": len(ok), "failed": [], "context_scaling": [], "size_scaling": []}
    for _, r in df[df["status"] != "ok"].iterrows():
        out["failed"].append({"size": str(r["size"]), "context": int(r["context"]), "mode": MODE_COLUMNS[r["mode"]],
                              "status": r["status"].upper() if r["status"] == "oom" else r["status"]})
    if ok.empty:
        return out
    ok["cv"] = ok["std_s"] / ok["mean_s"]
    worst = ok.loc[ok["cv"].idxmax()]
    host_bound = checks.host_bound_sources(flags)
    out["variability"] = {
        "median_cv": fmt_pct(ok["cv"].median()), "max_cv": Num(fmt_pct(worst["cv"]), worst["source"]),
        "max_cell": f"{worst['size']}, context {worst['context']}, {MODE_COLUMNS[worst['mode']]}",
        "n_noisy": int(ok["noisy"].sum()), "small": bool(ok["cv"].median() < 0.05),
        # why the most variable cell varies, as far as the records tell: the host set its step, or it is short
        "max_host_bound": worst["source"] in host_bound, "max_short": bool(worst["mean_s"] < ok["mean_s"].median()),
    }
    # the table's "noisy" flag is the coefficient of variation above checks.NOISY_CV, the records' own mark the
    # inter-quartile range: the text gives both counts
    out["variability"]["n_cv_noisy"] = len({s for f in flags if f["kind"] == "noisy" for s in f["sources"]}
                                           & set(ok["source"]))
    out["variability"]["cv_limit"] = fmt_pct(checks.NOISY_CV, 2)
    # the cells that vary more than twice the median: how many, and how many of them the host sets or are short
    more = ok[ok["cv"] > VARY_MORE * ok["cv"].median()]
    out["variability"].update(
        vary_more=VARY_MORE, n_more=int(len(more)), n_more_host_bound=int(more["source"].isin(host_bound).sum()),
        n_more_short=int((more["mean_s"] < ok["mean_s"].median()).sum()))
    # the table's backward column is a phase timed within the step: it can vary more than any whole step
    phase = ok[ok["mode"] == "forward_backward"].assign(phase_cv=lambda g: g["backward_std_s"] / g["backward_mean_s"])
    phase = phase[phase["phase_cv"].notna()]
    if not phase.empty and phase["phase_cv"].max() > worst["cv"]:
        top = phase.loc[phase["phase_cv"].idxmax()]
        out["variability"]["phase_max"] = {"cv": Num(fmt_pct(top["phase_cv"]), top["source"]),
                                           "cell": f"{top['size']}, context {top['context']}"}
    scaling = []
    for (size, mode), g in ok.groupby(["size", "mode"], observed=True):
        g = g.sort_values("context")
        if len(g) >= 2 and checks.defensible(flags, g.iloc[0]["source"], g.iloc[-1]["source"]):
            lo, hi = g.iloc[0], g.iloc[-1]
            scaling.append({"size": str(size), "mode": MODE_COLUMNS[mode], "ctx_lo": int(lo["context"]),
                            "ctx_hi": int(hi["context"]), "ctx_ratio": sig(hi["context"] / lo["context"]),
                            "time_ratio": sig(hi["mean_s"] / lo["mean_s"])})
    out["context_scaling"] = [s for s in scaling if s["mode"] == MODE_COLUMNS["forward"]] or scaling
    sizes = []
    for (context, mode), g in ok.groupby(["context", "mode"]):
        g = g.sort_values("params")
        if len(g) >= 2 and mode == "forward" and checks.defensible(flags, g.iloc[0]["source"], g.iloc[-1]["source"]):
            lo, hi = g.iloc[0], g.iloc[-1]
            sizes.append({"context": int(context), "small": str(lo["size"]), "large": str(hi["size"]),
                          "param_ratio": sig(hi["params"] / lo["params"]), "time_ratio": sig(hi["mean_s"] / lo["mean_s"])})
    out["size_scaling"] = sizes
    fb = ok[ok["mode"] == "forward_backward"]
    # the ratio of two phases of one step compares nothing a flagged cell (host-bound, noisy, shared) can
    # vouch for: those are left out, as from the other comparisons
    fb = fb[[checks.defensible(flags, src) for src in fb["source"]]]
    if not fb.empty:
        ratio = fb["backward_mean_s"] / fb["forward_mean_s"]
        out["backward_ratio"] = {"min": sig(ratio.min()), "max": sig(ratio.max()), "median": sig(ratio.median()),
                                 "n": int(len(fb)), "contexts": int(fb["context"].nunique())}
    best = ok.loc[ok["tflops"].idxmax()]
    out["best_tflops"] = {"value": sig(best["tflops"]), "cell": f"{best['size']}, context {best['context']}, "
                          f"{MODE_COLUMNS[best['mode']]}"}
    wok = wf[wf["status"] == "ok"] if not wf.empty else wf
    if not wok.empty:
        cold = wok.sort_values("warmup").iloc[0]
        warm = wok.sort_values("warmup").iloc[-1]
        first, rest = first_and_rest(cold["measured_s"])
        c, w = cold["source"], warm["source"]  # each number below comes from one of these two records
        out["warmup"] = {
            "cold_warmup": int(cold["warmup"]), "first": Num(fmt_seconds(first), c), "rest": Num(fmt_seconds(rest), c),
            "first_over_rest": Num(sig(first / rest), c), "cold_mean": Num(fmt_seconds(cold["mean_s"]), c),
            "cold_std": Num(fmt_seconds(cold["std_s"]), c), "warm_warmup": int(warm["warmup"]),
            "warm_mean": Num(fmt_seconds(warm["mean_s"]), w), "warm_std": Num(fmt_seconds(warm["std_s"]), w),
            "mean_ratio": sig(cold["mean_s"] / warm["mean_s"]), "middle": [],
        }
        out["warmup"]["warm_runs"] = int(warm["runs"])

        def level(row) -> tuple[float, float]:
            """A setting's mean and spread: over its processes where it was measured again (the spread
            between them), else its one run's mean and the spread of its steps."""
            if row["runs"] > 1:
                return row["runs_mean_s"], row["runs_std_s"]
            return row["mean_s"], row["std_s"]

        warm_mean, warm_spread = level(warm)
        for _, r in wok.sort_values("warmup").iloc[1:-1].iterrows():  # e.g. 1 and 2 warm-up steps
            first, rest = first_and_rest(r["measured_s"])
            mean, spread = level(r)
            item = {
                "n": int(r["warmup"]), "first_over_rest": Num(sig(first / rest), r["source"]),
                "mean": Num(fmt_seconds(mean), r["source"]), "runs": int(r["runs"]),
                "vs_warm": f"{(mean / warm_mean - 1) * 100:+.1f} %",
                "ordinary_first": bool(first / rest < FIRST_STEP_ORDINARY),
                # apart from the longest warm-up's mean by more than the two settings' combined spread;
                # slower is the way a warm-up effect can go (fewer warm-up steps, slower steps)
                "apart": bool(abs(mean - warm_mean) > math.hypot(spread, warm_spread)),
                "slower": bool(mean - warm_mean > math.hypot(spread, warm_spread))}
            if r["runs"] > 1:
                item.update(runs_lo=Num(fmt_seconds(min(r["runs_s"])), r["source"]),
                            runs_hi=Num(fmt_seconds(max(r["runs_s"])), r["source"]))
            out["warmup"]["middle"].append(item)
        out["warmup"]["processes"] = processes(wok)
        middle = out["warmup"]["middle"]
        out["warmup"]["middle_ordinary"] = bool(middle) and all(w["ordinary_first"] for w in middle)
        out["warmup"]["ordinary_pct"] = f"{(FIRST_STEP_ORDINARY - 1) * 100:.0f} %"
    return out


def processes(wok: pd.DataFrame) -> list[dict]:
    """Per warm-up setting measured in more than one fresh process: the mean of the processes' mean
    steps, their spread (sample standard deviation) and range. Empty unless every setting ran in more
    than one process, as the text then reads each setting on its own (its steps, or its processes)."""
    rows = wok.sort_values("warmup")
    if not (rows["runs"] > 1).all():
        return []
    return [{"n": int(r["warmup"]), "runs": int(r["runs"]), "mean": Num(fmt_seconds(r["runs_mean_s"]), r["source"]),
             "spread": Num(fmt_seconds(r["runs_std_s"]), r["source"]),
             "lo": fmt_seconds(min(r["runs_s"])), "hi": fmt_seconds(max(r["runs_s"]))}
            for _, r in rows.iterrows() if r["runs"] > 1]


def _pick(values, preferred):
    """``preferred`` where present, else the largest value."""
    values = sorted(set(values))
    return preferred if preferred in values else values[-1]


def _mean_std_cell(row, prefix: str, scale: float) -> Cell:
    """``row``'s ``<prefix>mean_s ± <prefix>std_s`` linked to its record, or its status."""
    if row is None or row["status"] != "ok" or pd.isna(row[f"{prefix}mean_s"]):
        return status_cell(row["status"] if row is not None and row["status"] != "ok" else "missing")
    return Cell(fmt_mean_std(row[f"{prefix}mean_s"], row[f"{prefix}std_s"], scale), source=row["source"])


def answer_part(df: pd.DataFrame, full_step: bool = False) -> dict:
    """(b): forward and backward time per size at one context, mean ± std over the measured steps.
    The backward time is the backward phase of the forward + backward cells. ``full_step`` (an edition
    whose (b) asks for the optimizer step too): the training-step cells' optimizer phase and whole step
    as two more columns, and the largest size's optimizer share of its step (``full_step`` of the result)."""
    ok = df[df["status"] == "ok"]
    if ok.empty:
        return {}
    context = _pick(ok["context"], 512)
    sub = df[df["context"] == context]
    by_mode = {m: sub[sub["mode"] == m].set_index("size", drop=False) for m in ("forward", "forward_backward",
                                                                               "train_step")}
    scale_name, scale = time_unit(float(ok["mean_s"].median()))
    rows = []
    present = set(sub["size"])
    sizes = ([s for s in df["size"].cat.categories if s in present] if isinstance(df["size"].dtype, pd.CategoricalDtype)
             else sorted(present))
    for size in sizes:
        f, b, t = (by_mode[m].loc[size] if size in by_mode[m].index else None for m in by_mode)
        row = [Cell(str(size)), _mean_std_cell(f, "", scale), _mean_std_cell(b, "backward_", scale)]
        rows.append(row + ([_mean_std_cell(t, "optimizer_", scale), _mean_std_cell(t, "", scale)] if full_step else []))
    columns = ["size", "forward", "backward"] + (["optimizer step", "full training step"] if full_step else [])
    what = "Forward, backward and optimizer step" if full_step else "Forward and backward pass"
    table = Table(title=f"{what} per step, context {context} (mean ± std of the measured steps)",
                  columns=columns, units=[""] + [scale_name] * (len(columns) - 1), rows=rows,
                  sources=sorted(sub["source"]),
                  note="the optimizer step is the AdamW phase timed inside the full training steps" if full_step else "")
    out = {"table": table, "context": int(context)}
    steps = by_mode["train_step"]
    steps = steps[(steps["status"] == "ok") & steps["optimizer_mean_s"].notna()] if full_step else steps.iloc[:0]
    if len(steps):
        last = steps.loc[[s for s in sizes if s in steps.index][-1]]
        out["full_step"] = {"size": str(last["size"]), "step": Num(fmt_seconds(last["mean_s"]), last["source"]),
                            "optimizer": Num(fmt_seconds(last["optimizer_mean_s"]), last["source"]),
                            "share": fmt_pct(last["optimizer_mean_s"] / last["mean_s"]), "sizes": len(steps)}
    return out


def asks_optimizer_step(edition) -> bool:
    """Whether ``edition``'s benchmarking_script (b) asks for the optimizer step's time (2026 does)."""
    part = next((p for p in edition.problem("benchmarking_script").parts if p.letter == "b"), None)
    return part is not None and "optimizer" in part.asks


def impossible_orderings(df: pd.DataFrame, flags: list[dict]) -> dict | None:
    """Cells of one size, context and precision whose train step's median is below forward +
    backward's: a step that does more work cannot take less time, so where one of the two was
    host-bound the order is the host's pace between processes, not the GPU's. None where none is."""
    ok = df[(df["status"] == "ok") & df["mode"].isin(["forward_backward", "train_step"])]
    host_bound = checks.host_bound_sources(flags)
    cells = []
    for (size, context, precision), g in ok.groupby(["size", "context", "precision"], sort=False):
        by_mode = g.set_index("mode")
        if {"forward_backward", "train_step"} <= set(by_mode.index):
            fb, ts = by_mode.loc["forward_backward"], by_mode.loc["train_step"]
            if ts["median_s"] < fb["median_s"]:
                cells.append({"cell": f"{size} {context}",
                              "train_step": Num(fmt_seconds(ts["median_s"]), ts["source"]),
                              "forward_backward": Num(fmt_seconds(fb["median_s"]), fb["source"]),
                              "host_bound": bool({fb["source"], ts["source"]} & host_bound)})
    return {"cells": cells, "n": len(cells), "all_host_bound": all(c["host_bound"] for c in cells)} if cells else None


def build(ctx) -> dict:
    df = frame(ctx.records("benchmarking"))
    wf = frame(ctx.records("benchmarking_warmup"))
    roofline = ctx.records("roofline")
    peaks = _peaks(roofline)
    flags = checks.timing_flags(ctx.records("benchmarking"))
    out = {"tables": [], "figures": [], "roofline": roofline_table(roofline), "settings": ctx.settings("benchmarking"),
           "flags": flags, "phase_timing": phase_timing(df) if not df.empty else None}
    if df.empty:
        out["analysis"] = {"n_cells": 0}
        return out
    for (impl, precision), g in df.groupby(["implementation", "precision"]):
        out["tables"].append(timing_table(g, f"Step time, {impl} implementation, {precision}", flags,
                                          ctx.records("benchmarking")))
        out["figures"].append(ctx.figure(
            f"benchmarking_time_{impl}_{precision}", plots.time_vs_context(g),
            f"Time per step against context length ({impl} implementation, {precision}); error bars: ±1 std.",
        ))
    out["throughput"] = throughput_table(df, peaks)
    out["flop_formula"] = accounting.FLOP_FORMULA
    if not wf.empty:
        out["warmup_table"] = warmup_table(wf)
        out["figures_warmup"] = [ctx.figure("benchmarking_warmup", plots.warmup_steps(wf[wf["status"] == "ok"]),
                                            "Every step's time for each number of warm-up steps; dashed: end of warm-up.")]
        out["warmup_cell"] = f"{wf['size'].iloc[0]}, context {wf['context'].iloc[0]}, {MODE_COLUMNS[wf['mode'].iloc[0]]}"
    out["analysis"] = analysis(df, wf, flags)
    out["answer"] = answer_part(df, full_step=asks_optimizer_step(ctx.edition))
    out["over_h100"] = checks.over_h100(ctx.records("benchmarking"))
    out["does_not_fit"] = does_not_fit(ctx.records("benchmarking"))
    out["impossible"] = impossible_orderings(df, flags)
    return out
