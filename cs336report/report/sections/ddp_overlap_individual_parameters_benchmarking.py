"""ddp_overlap_individual_parameters_benchmarking: (a) time per step with each gradient's
all-reduce started during backward, against naive and flat DDP, and the share of naive's
all-reduce time each overlapped variant hides; (b) the overlap, drawn from profiles of one step
(kernels per stream: the ddp_overlap_profile records, from nsys exports; records made before
those, from torch.profiler) with the fraction of communication hidden behind compute.
With a student checkout, the student's wrapper is a row of its own (cs336report.report.student_rows)."""

from __future__ import annotations

import math

from ..ddp import (by_step, ddp_records, fmt_bytes, fmt_pct, ms, overlap_of, setting, step_numbers, steps_frame,
                   steps_table, timeline_plot, variant_label)
from ..ddp_rates import link_rates
from ...records.shapes import DDPCell, read_as, typed
from ..headlines import GAP
from ..student_rows import student_rows
from ..tables import Num, sig

PROFILE = "ddp_overlap_profile"  # the profiled steps (problem 16 (b)); the others are timed
EXPERIMENT = "ddp_overlap_individual_parameters_benchmarking"  # the rule of the problem's own name
TIMED = (EXPERIMENT, "naive_ddp_benchmarking", "minimal_ddp_flat_benchmarking", "ddp_bucketed_benchmarking")
EXPERIMENTS = (*TIMED, PROFILE)


def _hidden_shares(df, naive: dict | None) -> list[dict]:
    """For the overlapped variants (per parameter; the bucketed size with the fastest step): the share
    of naive's gradient sync that no longer waits after backward, 1 − sync / naive's sync; and what the
    step gained, which is less where backward itself runs longer beside the all-reduces: naive's step
    less the variant's, as a share of naive's sync. Where the two steps' medians lie within their
    combined spread (the two standard deviations, combined), the text does not order them."""
    if not naive or not naive["sync_s"]:
        return []
    out = []
    bucketed = by_step(df, "bucketed")
    overlapped = [("individual", None)] + ([("bucketed", bucketed["bucket_mb"].iloc[0])] if len(bucketed) else [])
    for variant, bucket in overlapped:
        numbers = step_numbers(df, variant, bucket)
        if numbers:
            share = 1 - numbers["sync_s"] / naive["sync_s"]
            saved = naive["step_s"] - numbers["step_s"]
            longer = numbers["backward_s"] - naive["backward_s"]
            spread = math.hypot(naive["step_std_s"], numbers["step_std_s"])
            out.append({"label": numbers["label"], "sync": numbers["sync"], "share": fmt_pct(share),
                        "saved": ms(abs(saved)), "step_shorter": saved > 0,
                        "within_spread": abs(saved) <= spread, "spread": ms(spread),
                        "off_step": fmt_pct(saved / naive["sync_s"]),
                        "backward_longer": ms(longer) if longer > 0 else None})
    return out


def _label(record: dict) -> str:
    """The variant of a profiled cell, with its bucket size where it has one."""
    cell = read_as(DDPCell, record["config"])
    return variant_label({"variant": cell.variant, "bucket_mb": cell.bucket_size_mb})


def _profiles(ctx, df) -> tuple[str | None, list]:
    """(tool, [(label, rank 0's kernels, every rank's overlap)]) from the ddp_overlap_profile records,
    else from the timed records' own torch.profiler profiles (records made before those)."""
    found = []
    for r in ctx.records(PROFILE):
        ranks = typed(r).ranks or {}
        if r["status"] == "ok" and ranks.get("0", {}).get("kernels"):
            label = _label(r)
            found.append((r["data"]["tool"], label, {"kernels": ranks["0"]["kernels"]},
                          [ranks[k]["overlap"] for k in sorted(ranks)], r["_path"]))
    if found:
        return found[0][0], found
    older = [("torch.profiler", variant_label(r), r["profile"], [overlap_of(r["profile"])], r["source"])
             for _, r in df[df["experiment"] == EXPERIMENT].iterrows() if r["profile"] and r["profile"].get("kernels")]
    return ("torch.profiler" if older else None), older


def transfer_hidden(df, overlap: list[dict], comm_records: list[dict]) -> dict | None:
    """(b) as transfer time: the step's gradient bytes over the all-reduce bandwidth measured at the
    largest size on as many GPUs (distributed_communication_single_node), and per profiled variant
    how much of it at least ran beside compute: that time less the NCCL kernel time the profile
    found with no compute kernel beside it (an upper bound of the exposed transfer, as a kernel
    also runs while it waits for the other rank). None without the all-reduce records."""
    ran = df[df["status"] == "ok"]
    if ran.empty or not overlap:
        return None
    rates = link_rates(comm_records, int(ran["world_size"].iloc[0]))
    if not rates:
        return None
    s = float(ran["grad_bytes"].iloc[0])
    transfer = s / rates["w_bytes_s"]
    views = []
    for o in overlap:
        hidden = max(0.0, transfer - o["exposed_s"])
        views.append({"label": o["label"], "exposed": o["exposed"], "hidden": ms(hidden),
                      "share": fmt_pct(hidden / transfer), "none": hidden == 0.0})
    return {"s": fmt_bytes(s), "w": Num(f"{sig(rates['w_bytes_s'] / 1e9)} GB/s", rates["w_source"]),
            "w_size": f"{sig(rates['w_size_mb'])} MB", "world": rates["world"], "transfer": ms(transfer),
            "views": views}


def build(ctx) -> dict:
    records = ddp_records(ctx, TIMED)
    df = steps_frame(records)
    out: dict = {"table": None, "setting": None, "figures": [], "overlap": [], "profile_note": None, "student": [],
                 "hides": [], "tool": None}
    if df.empty:
        return out
    # naive may have run twice (its own problem, and profiled here): the table keeps this problem's row
    shown = df[df["variant"].isin(["naive", "flat", "individual", "student_individual"])]
    shown = shown.sort_values("experiment", key=lambda s: s != EXPERIMENT).drop_duplicates(["variant", "bucket_mb"])
    shown = shown.sort_values("variant", key=lambda s: s.map({"naive": 0, "flat": 1, "individual": 2,
                                                              "student_individual": 3}))
    out.update(table=steps_table(shown, "Overlapped per-parameter DDP against naive and flat: time per step"),
               setting=setting(df), **{v: step_numbers(shown, v) for v in ("individual", "naive", "flat")},
               student=student_rows(shown, records, "student_individual", "individual"))
    out["hides"] = _hidden_shares(df, out.get("naive"))
    # naive's row here is this problem's own run of it, where naive_ddp_benchmarking timed it too
    naive_runs = df[(df["variant"] == "naive") & (df["status"] == "ok")]["experiment"]
    out["naive_again"] = bool((naive_runs == EXPERIMENT).any() and (naive_runs != EXPERIMENT).any())
    tool, profiled = _profiles(ctx, df)
    out["tool"] = tool
    for _, label, _, overlaps, source in profiled:
        h = overlaps[0]
        fractions = [o["hidden_fraction"] for o in overlaps if o["hidden_fraction"] is not None]
        # each profile's numbers link to the record that holds it
        out["overlap"].append({"label": label, "comm": Num(ms(h["comm_us"] / 1e6), source),
                               "hidden": Num(ms(h["hidden_us"] / 1e6), source),
                               "exposed": Num(ms(h["exposed_us"] / 1e6), source), "exposed_s": h["exposed_us"] / 1e6,
                               "step": Num(ms(h["step_us"] / 1e6), source),
                               "fraction": Num(fmt_pct(h["hidden_fraction"]), source)
                               if h["hidden_fraction"] is not None else "–",
                               "ranks": len(overlaps),
                               # each rank's NCCL kernel time: a kernel also runs while it waits for the other
                               # ranks, so where they differ the larger is mostly waiting, not transfer
                               "comm_ranks": [ms(o["comm_us"] / 1e6) for o in overlaps] if len(overlaps) > 1 else [],
                               "range": (f"{fmt_pct(min(fractions))}–{fmt_pct(max(fractions))}"
                                         if len(fractions) > 1 and min(fractions) != max(fractions) else None),
                               "source": source})
    out["transfer"] = transfer_hidden(df, out["overlap"], ctx.records("distributed_communication_single_node"))
    drawn = {source for *_, source in profiled}
    # a profile cell that gave no kernels beside ones that did: named under the drawing, with its error
    out["profile_failed"] = [
        {"label": _label(r),
         "why": f"{r['status']}, {r.get('error') or 'no kernels'}", "source": r["_path"]}
        for r in ctx.records(PROFILE) if r["_path"] not in drawn] if profiled else []
    if profiled:
        out["figures"].append(ctx.figure(
            EXPERIMENT, timeline_plot([(label, profile) for _, label, profile, _, _ in profiled]),
            f"One profiled training step per variant, rank 0 ({tool}): every kernel on its CUDA stream (blue: "
            "compute, red: NCCL, green: a side stream, where the bucketed variant copies reduced buckets back); "
            "where red runs beside blue, communication is hidden behind compute.",
            alt="Kernel timelines of one DDP step per variant, compute and NCCL streams."))
    elif failed := [r for r in ctx.records(PROFILE) if r["status"] != "ok"]:
        out["profile_note"] = "the profiled cells did not complete (" + "; ".join(
            f"{r['cell']}: {r['status']}, {r.get('error') or 'no kernels'}" for r in failed) + ")"
    elif any(read_as(DDPCell, r["config"]).profile_steps for r in records):
        out["profile_note"] = "the profiles are CUDA only: this run's cells ran on the CPU"
    else:
        out["profile_note"] = "no profile was configured (profile_steps: 0, or no CUDA device)"
    return out


def headline(d: dict) -> list[str]:
    """The summary's clauses, in its answer's words: the overlapped step, and whether it beat naive DDP's."""
    i = d.get("individual")
    if not i:
        return []
    naive = d.get("naive")
    return [f"Starting each gradient's all-reduce from its post-accumulate-grad hook gives {i['step']} a step{GAP}with "
            f"{i['sync']} left to wait for after backward",
            "The communication now runs while backward computes the remaining gradients"
            if naive and i["step_s"] < naive["step_s"] else "Overlap did not pay off here"]
