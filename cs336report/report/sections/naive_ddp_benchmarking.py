"""naive_ddp_benchmarking: time per training step of naive DDP (one all-reduce per gradient after
backward) and the share of it spent communicating gradients."""

from __future__ import annotations

from ..ddp import ddp_records, setting, step_numbers, steps_frame, steps_table
from ..headlines import GAP

EXPERIMENTS = ("naive_ddp_benchmarking",)


def build(ctx) -> dict:
    df = steps_frame(ddp_records(ctx, EXPERIMENTS))
    if df.empty:
        return {"table": None, "setting": None, "naive": None}
    return {"table": steps_table(df, "Naive DDP: time per training step"), "setting": setting(df),
            "naive": step_numbers(df, "naive"), "failed": df[df["status"] != "ok"][["variant", "error"]].to_dict("records")}


def headline(d: dict) -> list[str]:
    """The summary's clause, in its answer's words."""
    n = d.get("naive")
    return [f"A naive DDP training step takes {n['step']}{GAP}of which {n['sync']}, {n['share']}, is spent "
            f"communicating gradients"] if n else []
