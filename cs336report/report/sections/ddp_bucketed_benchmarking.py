"""ddp_bucketed_benchmarking: (a) time per step of bucketed DDP at each bucket size, beside
PyTorch's DistributedDataParallel; (b) the overhead model (cs336report.accounting.bucket_model)
fitted to the sweep, its best bucket size beside the measured best. With a student checkout, the
student's bucketed wrapper at each bucket size is a row of its own (cs336report.report.student_rows);
the fit and the best bucket size are ours."""

from __future__ import annotations

import math

from ...accounting import bucket_model
from ...names.handout import Hint, rerun_command
from ..ddp import (allreduce_frame, by_step, ddp_records, fmt_bytes, ms, setting, step_numbers, steps_frame,
                   steps_table, variant_label)
from ..ddp_rates import link_rates, step_noise
from ..headlines import GAP
from ..student_rows import student_rows
from ..tables import Num, fmt_seconds, sig

EXPERIMENT = "ddp_bucketed_benchmarking"  # the rule of the problem's own name
EXPERIMENTS = (EXPERIMENT, "ddp_overlap_individual_parameters_benchmarking")
# Sub-questions answered without a record (the report shows them where the cells did not run): the model
ANALYTIC = {"b": {"title": "The overhead model", "template": "answers/_bucket_model.j2"}}
MIB = 2**20
SWEEP = ("bucketed", "torch_ddp", "naive", "individual")  # the variants (a) orders; a student's are apart


def model_fit(df) -> dict | None:
    """Fit o and w of the overhead model to the bucketed cells' gradient sync after backward; None
    with fewer than two distinct bucket counts."""
    pts = df[(df["status"] == "ok") & (df["variant"] == "bucketed") & (df["sync_median"] > 0)]
    if pts["calls"].nunique() < 2:
        return None
    s = float(pts["grad_bytes"].iloc[0])
    t_b = float(pts["backward_median"].median())
    fit = bucket_model.fit(pts["calls"], pts["sync_median"], s, t_b)
    pick = bucket_model.best(s, fit["w_bytes_s"], fit["o_s"], t_b)
    measured = by_step(pts, "bucketed")
    best = measured.iloc[0] if len(measured) else None
    return {"s": fmt_bytes(s), "t_b": ms(t_b), "o": fmt_seconds(fit["o_s"]), "o_s": float(fit["o_s"]),
            "w": f"{sig(fit['w_bytes_s'] / 1e9)} GB/s", "rmse": ms(fit["rmse_s"]),
            "measured_lo": ms(float(pts["sync_median"].min())), "measured_hi": ms(float(pts["sync_median"].max())),
            "rmse_beyond": bool(fit["rmse_s"] > pts["sync_median"].max()),
            "points": [{"n_b": int(n), "measured": Num(ms(m), src), "predicted": ms(p)}
                       for n, m, p, src in zip(pts["calls"], pts["sync_median"], fit["predicted_s"], pts["source"])],
            "best_n": sig(pick["n_buckets"]), "best_size": f"{sig(pick['bucket_bytes'] / MIB)} MiB",
            "best_overhead": ms(pick["overhead_s"]), "best_at_crossing": pick["at_crossing"],
            "measured_best": {"size": f"{sig(best['bucket_mb'])} MiB",
                              "step": Num(ms(best["step_median"]), best["source"]),
                              "sync": Num(ms(best["sync_median"]), best["source"])} if best is not None else None}


def noise_and_order(df, records: list[dict]) -> dict | None:
    """(a)'s reading of the sweep: the noise of one step (:func:`step_noise`), the cells whose step
    lies within it of the fastest (ties), and backward's time in each bucketed cell against naive
    DDP's, whose backward runs with no all-reduce beside it; the bucket sizes slower than naive DDP
    by more than the noise. None without naive DDP's cell or without the noise."""
    noise, naive = step_noise(records), step_numbers(df, "naive")
    ran = df[(df["status"] == "ok") & df["variant"].isin(SWEEP)]
    if not noise or not naive or ran.empty:
        return None
    ran = ran.sort_values("step_median")
    best = ran.iloc[0]
    ties = [{"label": variant_label(r), "step": Num(ms(r["step_median"]), r["source"])}
            for _, r in ran.iloc[1:].iterrows() if r["step_median"] - best["step_median"] <= noise["s"]]
    rows, slower = [], []
    for _, r in by_step(df, "bucketed").sort_values("bucket_mb", ascending=False).iterrows():
        longer = r["backward_median"] - naive["backward_s"]
        row = {"size": f"{sig(r['bucket_mb'])} MiB", "calls": int(r["calls"]),
               "backward": Num(ms(r["backward_median"]), r["source"]), "longer": ms(longer)}
        rows.append(row)
        if r["step_median"] - naive["step_s"] > noise["s"]:
            slower.append({**row, "step": Num(ms(r["step_median"]), r["source"]),
                           "sync": Num(ms(r["sync_median"]), r["source"]), "fewer_calls": r["calls"] < naive["calls"],
                           "longer_than_sync": longer > naive["sync_s"]})
    return {"noise": ms(noise["s"]), "noise_s": noise["s"], "cells": noise["cells"], "best": variant_label(best),
            "best_step": Num(ms(best["step_median"]), best["source"]), "ties": ties, "rows": rows,
            "slower": slower, "naive": naive}


def handout_model(df, comm_records: list[dict]) -> dict | None:
    """(b) in the handout's terms: overhead(n_b) = n_b·o + s/(n_b·w) with o and w measured by
    distributed_communication_single_node at the sweep's world size, its optimum, and its
    prediction at each bucket count of the sweep beside the measured time after backward, with the
    root-mean-square error. None without the all-reduce records or the bucketed cells."""
    pts = df[(df["status"] == "ok") & (df["variant"] == "bucketed")]
    if pts.empty:
        return None
    rates = link_rates(comm_records, int(pts["world_size"].iloc[0]))
    if not rates or not rates["o_s"]:
        return None
    s, w, o = float(pts["grad_bytes"].iloc[0]), rates["w_bytes_s"], rates["o_s"]
    n_best = math.sqrt(s / (w * o))
    predicted = pts["calls"] * o + s / (pts["calls"] * w)
    error = float(((predicted - pts["sync_median"]) ** 2).mean() ** 0.5)
    return {"s": fmt_bytes(s), "w": Num(f"{sig(w / 1e9)} GB/s", rates["w_source"]),
            "w_size": f"{sig(rates['w_size_mb'])} MB", "o": fmt_seconds(o), "o_size": f"{sig(rates['o_size_mb'])} MB",
            "o_latency": Num(ms(rates["o_latency_s"]), rates["o_source"]), "world": rates["world"],
            "n_best": sig(n_best), "b_best": f"{sig(s / n_best / MIB)} MiB", "overhead": ms(2 * math.sqrt(s * o / w)),
            "points": [{"n_b": int(n), "measured": Num(ms(m), src), "predicted": ms(p)}
                       for n, m, p, src in zip(pts["calls"], pts["sync_median"], predicted, pts["source"])],
            "error": ms(error), "error_s": error,
            # the formula counts every call's fixed cost: where the most buckets took less, backward hid them
            "over_counts": bool(predicted.iloc[pts["calls"].argmax()] > pts["sync_median"].iloc[pts["calls"].argmax()]),
            "measured_lo": ms(float(pts["sync_median"].min())), "measured_hi": ms(float(pts["sync_median"].max()))}


def build(ctx) -> dict:
    df = steps_frame(ddp_records(ctx, EXPERIMENTS))
    out: dict = {"table": None, "setting": None, "rows": [], "fit": None, "student": []}
    if df.empty:
        return out
    sweep = df[df["experiment"] == EXPERIMENT].sort_values(["variant", "bucket_mb"])
    out["student"] = student_rows(sweep, ctx.records(EXPERIMENT), "student_bucketed", "bucketed")
    out.update(table=steps_table(sweep, "Bucketed DDP by bucket size, and PyTorch's DDP"), setting=setting(sweep))
    out["rows"] = [n for _, r in sweep.iterrows() if (n := step_numbers(sweep, r["variant"], r["bucket_mb"]))]
    ok = by_step(sweep, "bucketed")
    if len(ok):
        best, worst = ok.iloc[0], ok.iloc[-1]
        b, w = best["source"], worst["source"]  # each time below comes from one of these two records
        spread = math.hypot(best["step_std"], worst["step_std"])  # the two cells' steps, spread combined
        out["best"] = {"size": f"{sig(best['bucket_mb'])} MiB", "step": Num(ms(best["step_median"]), b),
                       "sync": Num(ms(best["sync_median"]), b), "worst_size": f"{sig(worst['bucket_mb'])} MiB",
                       "worst_step": Num(ms(worst["step_median"]), w), "worst_sync": Num(ms(worst["sync_median"]), w),
                       "step_s": float(best["step_median"]), "several": len(ok) > 1,
                       # the sizes are not told apart where best and worst lie within their combined spread
                       "within_spread": bool(len(ok) > 1 and worst["step_median"] - best["step_median"] <= spread),
                       "spread": ms(spread)}
        # what is left after backward, over every size: where sizes cannot be told apart by step, the
        # text quotes this range rather than calling it small
        lo, hi = ok.loc[ok["sync_median"].idxmin()], ok.loc[ok["sync_median"].idxmax()]
        out["best"].update(sync_lo=Num(ms(lo["sync_median"]), lo["source"]), sync_lo_size=f"{sig(lo['bucket_mb'])} MiB",
                           sync_hi=Num(ms(hi["sync_median"]), hi["source"]), sync_hi_size=f"{sig(hi['bucket_mb'])} MiB",
                           sync_spread=ms(math.hypot(lo["sync_std"], hi["sync_std"])),
                           # the two syncs' own spreads, combined (not the steps')
                           sync_inside_spread=bool(hi["sync_median"] - lo["sync_median"]
                                                   <= math.hypot(lo["sync_std"], hi["sync_std"])))
        ref = by_step(sweep, "torch_ddp")
        if len(ref):
            r = ref.iloc[0]
            diff = best["step_median"] / r["step_median"] - 1
            out["torch"] = {"cap": f"{sig(r['bucket_mb'])} MiB", "step": Num(ms(r["step_median"]), r["source"]),
                            "vs": f"{sig(100 * abs(diff), 2)} % {'slower' if diff > 0 else 'faster'}"}
        individual = step_numbers(df, "individual")
        if individual:
            out["individual"] = individual
        timed = [r for e in EXPERIMENTS for r in ctx.records(e) if r["config"].get("variant") in SWEEP]
        out["order"] = order = noise_and_order(sweep_and_naive(df), timed)
        noise = order["noise_s"] if order else 0.0
        # the lowest median is not the fastest where another bucket size lies within the noise of it
        out["best"]["within_noise"] = bool(order) and len(ok) > 1 and (
            ok.iloc[1]["step_median"] - best["step_median"] <= noise)
        if "torch" in out:
            gap = abs(best["step_median"] - ref.iloc[0]["step_median"])
            out["torch"]["within_noise"] = bool(order) and gap <= noise
    out["fit"] = model_fit(df)
    out["handout_model"] = handout_model(df, ctx.records("distributed_communication_single_node"))
    if not out["fit"]:
        out["fit_hint"] = fit_hint(ctx)
    if out["fit"]:
        out["fit"]["o_check"] = o_check(ctx.records("distributed_communication_single_node"), out["fit"]["o_s"],
                                        int(sweep["world_size"].iloc[0]))
    return out


def sweep_and_naive(df):
    """The sweep's cells and naive DDP's cell timed beside them (not a student's rows)."""
    return df[df["variant"].isin(SWEEP)]


def fit_hint(ctx) -> Hint:
    """What fits the overhead model where it was not fitted: a second bucket size in the grid, or, where
    the grid lists two or more, the sweep run again (a cell failed)."""
    grid = ctx.render_settings.grid
    sizes = (ctx.render_settings.grid_of(EXPERIMENT) or {}).get("bucket_sizes_mb") or []
    if len(sizes) < 2:
        return Hint("", needs=f"two bucket sizes or more, of different bucket counts, in the config's "
                              f"grids.{grid}.{EXPERIMENT}.bucket_sizes_mb")
    return rerun_command(EXPERIMENT)


# The fitted o is set against a measured call where it is at least this many times that call's latency.
O_CHECK_RATIO = 2.0


def o_check(records: list[dict], o_s: float, world: int) -> dict | None:
    """The fitted per-call cost o against the latency of the smallest NCCL all-reduce measured on as
    many GPUs (distributed_communication_single_node), where o is much the larger: then o holds more
    than a call's own cost. None where no such call was measured, or o is near it."""
    df = allreduce_frame(records) if records else None
    if df is None or df.empty:
        return None
    calls = df[(df["status"] == "ok") & (df["backend"] == "nccl") & (df["world_size"] == world)]
    if calls.empty:
        return None
    small = calls.loc[calls["size_mb"].idxmin()]
    ratio = o_s / small["median_s"]
    if ratio < O_CHECK_RATIO:
        return None
    return {"ratio": sig(ratio), "latency": Num(ms(small["median_s"]), small["source"]),
            "size": f"{sig(small['size_mb'])} MB", "world": world}


def headline(d: dict) -> list[str]:
    """The summary's clauses, in its answer's words: the best bucket size of (a), the fitted model of (b)."""
    b = d.get("best")
    if not b:
        return []
    if b["within_spread"]:
        out = [f"the bucket sizes cannot be told apart: their steps run from {b['step']}{GAP}to {b['worst_step']}"]
    else:
        only = "" if b["several"] else " (the only one that ran)"
        lead = (f"the lowest median step is {b['size']}'s" if b.get("within_noise")
                else f"the fastest bucket size{only} is {b['size']}")
        out = [f"{lead}: {b['step']} a step with {b['sync']} left after backward"]
    if d.get("fit"):
        out.append(f"o = {d['fit']['o']}, w = {d['fit']['w']}")
    return out
