"""torch.compile's first calls: their cells, the notes on cache hits and jobs, their summary."""

from __future__ import annotations

import math

import pandas as pd

from ...tables import Cell, fmt_seconds, sig

CACHE_NOTE = ("“(cache)”: Inductor found compiled graphs of this cell in the on-disk cache that an earlier job "
              "on the machine left, so its first call skipped some code generation and is not a full compilation")


def from_cache(rows: pd.DataFrame) -> pd.Series:
    """Which compiled cells' first call read graphs from Inductor's on-disk cache."""
    return rows["cache_hits"].fillna(0) > 0


JOB_NOTE = "“(n calls)”: the sum of the first calls of n cells of one job (its forward cell first)"


def first_call_cell(seconds: float, cache_hits, calls: int = 1) -> Cell:
    """The first compiled call's time, marked where Inductor served graphs from its cache or
    where the step was compiled over several first calls of one job."""
    if seconds != seconds:
        return Cell("–")
    return Cell(sig(seconds) + (" (cache)" if cache_hits else "") + (f" ({calls} calls)" if calls > 1 else ""))


# torch.compile's set-up below this took no import: the process had imported the compiler already
IMPORTED_BELOW_S = 0.5


def setup_seconds(first_calls: list[dict]) -> float:
    """The torch.compile set-up (importing the compiler) recorded with these first calls; NaN if none."""
    times = [c["setup_s"] for c in first_calls if c.get("setup_s") is not None]
    return float(sum(times)) if times else math.nan


def first_call_summary(rows: pd.DataFrame, name) -> dict | None:
    """The range of full compilations' first calls, the cells whose first call read the cache, and
    the range of torch.compile's own set-up where the records hold it."""
    timed = rows[rows["first_call_s"] == rows["first_call_s"]]
    if timed.empty:
        return None
    hits = from_cache(timed)
    full = timed.loc[~hits, "first_call_s"]
    out: dict = {"cached": [name(r) for _, r in timed[hits].iterrows()]}
    if not full.empty:
        out.update({"min": fmt_seconds(full.min()), "max": fmt_seconds(full.max()), "n": int(len(full))})
    setup = timed["setup_s"].dropna() if "setup_s" in timed else pd.Series(dtype=float)
    if not setup.empty:
        # importing TorchDynamo and Inductor takes seconds; a process that has imported them wraps in ms
        out["setup"] = {"min": fmt_seconds(setup.min()), "max": fmt_seconds(setup.max()), "n": int(len(setup)),
                        "imported": bool(setup.max() < IMPORTED_BELOW_S)}
    return out
