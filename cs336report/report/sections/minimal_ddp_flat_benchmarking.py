"""minimal_ddp_flat_benchmarking: one all-reduce over all gradients flattened into one tensor,
against naive DDP's one per gradient, in the same setting."""

from __future__ import annotations

import math

from ..ddp import ddp_records, setting, step_numbers, steps_frame, steps_table
from ..headlines import GAP
from ..tables import sig

EXPERIMENTS = ("minimal_ddp_flat_benchmarking", "naive_ddp_benchmarking")


def build(ctx) -> dict:
    df = steps_frame(ddp_records(ctx, EXPERIMENTS))
    if df.empty:
        return {"table": None, "setting": None, "flat": None, "naive": None}
    flat, naive = step_numbers(df, "flat"), step_numbers(df, "naive")
    out = {"table": steps_table(df, "Flat against naive DDP: time per training step"), "setting": setting(df),
           "flat": flat, "naive": naive}
    if flat and naive:
        spread = math.hypot(flat["sync_std_s"], naive["sync_std_s"])  # the two cells' sync spread combined
        out["diff"] = {"step": f"{sig((naive['step_s'] - flat['step_s']) * 1e3)} ms",
                       "sync": f"{sig(abs(naive['sync_s'] - flat['sync_s']) * 1e3)} ms",
                       "faster": flat["step_s"] < naive["step_s"], "sync_faster": flat["sync_s"] < naive["sync_s"],
                       "sync_apart": abs(naive["sync_s"] - flat["sync_s"]) > spread,
                       "sync_spread": f"{sig(spread * 1e3)} ms"}
    return out


def headline(d: dict) -> list[str]:
    """The summary's clauses, in its answer's words: the flat step, and whether it beats naive DDP's sync."""
    f = d.get("flat")
    if not f:
        return []
    out = [f"one all-reduce of all gradients flattened into one tensor gives {f['step']} a step{GAP}of which "
           f"{f['sync']} ({f['share']}) is the gradient sync"]
    diff = d.get("diff")
    if diff:
        out.append("The gradient syncs of the two cannot be told apart here" if not diff["sync_apart"] else
                   f"Batching saves {diff['sync']} of gradient sync" if diff["sync_faster"] else "Batching saves nothing here")
    return out
