"""ddp_overlap_individual_parameters_benchmarking: (a) time per step with each gradient's
all-reduce started during backward, against naive and flat DDP; (b) the overlap, drawn from
profiles of one step (kernels per stream) with the fraction of communication hidden behind compute.
With a student checkout, the student's wrapper is a row of its own (cs336report.report.student_rows)."""

from __future__ import annotations

from ..ddp import (ddp_records, fmt_pct, ms, overlap_of, setting, step_numbers, steps_frame, steps_table,
                   timeline_plot, variant_label)
from ..student_rows import student_rows
from ..tables import Num

ID = "ddp_overlap_individual_parameters_benchmarking"
TITLE = "ddp_overlap_individual_parameters_benchmarking"
EXPERIMENTS = (ID, "naive_ddp_benchmarking", "minimal_ddp_flat_benchmarking")
POINTS = 1
SUBQUESTIONS = ("a", "b")


def build(ctx) -> dict:
    records = ddp_records(ctx, EXPERIMENTS)
    df = steps_frame(records)
    out: dict = {"table": None, "setting": None, "figures": [], "overlap": [], "profile_note": None, "student": []}
    if df.empty:
        return out
    # naive may have run twice (its own problem, and profiled here): the table keeps this problem's row
    shown = df.sort_values("experiment", key=lambda s: s != ID).drop_duplicates(["variant", "bucket_mb"])
    shown = shown.sort_values("variant", key=lambda s: s.map({"naive": 0, "flat": 1, "individual": 2,
                                                              "student_individual": 3}))
    out.update(table=steps_table(shown, "Overlapped per-parameter DDP against naive and flat: time per step"),
               setting=setting(df), **{v: step_numbers(shown, v) for v in ("individual", "naive", "flat")},
               student=student_rows(shown, records, "student_individual", "individual"))
    profiled = [(variant_label(r), r["profile"], r["source"]) for _, r in df[df["experiment"] == ID].iterrows()
                if r["profile"] and r["profile"].get("kernels")]
    for label, profile, src in profiled:  # each profile's numbers link to the record that holds it
        h = overlap_of(profile)
        out["overlap"].append({"label": label, "comm": Num(ms(h["comm_us"] / 1e6), src),
                               "hidden": Num(ms(h["hidden_us"] / 1e6), src),
                               "exposed": Num(ms(h["exposed_us"] / 1e6), src), "step": Num(ms(h["step_us"] / 1e6), src),
                               "fraction": Num(fmt_pct(h["hidden_fraction"]), src)
                               if h["hidden_fraction"] is not None else "–"})
    if profiled:
        out["figures"].append(ctx.figure(
            ID, timeline_plot([(label, profile) for label, profile, _ in profiled]),
            "One profiled training step per variant: every kernel on its CUDA stream (blue: compute, red: NCCL); "
            "where red runs beside blue, communication is hidden behind compute.",
            alt="Kernel timelines of one DDP step per variant, compute and NCCL streams."))
    elif any(r["config"].get("profile_steps") for r in records):
        out["profile_note"] = "the profiles are CUDA only: this run's cells ran on the CPU"
    return out


def headline(d: dict) -> str:
    i = d.get("individual")
    return f"{i['step']} a step overlapped" if i else "no overlapped step ran"
