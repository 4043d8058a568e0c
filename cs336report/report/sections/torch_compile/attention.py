"""torch_compile (a): the naive attention compiled against eager, its table and numbers."""

from __future__ import annotations

import pandas as pd

from ...tables import Cell, Table, fmt_bytes, select_columns, sig, status_cell
from ..pytorch_attention.analysis import exponents, fmt_exponent
from ..pytorch_attention.frame import FRAME_COLUMNS
from ..pytorch_attention.tables import bytes_cell, memory_notes
from .first_call import CACHE_NOTE, first_call_cell, first_call_summary, from_cache


def attention_pairs(eager: pd.DataFrame, compiled: pd.DataFrame) -> pd.DataFrame:
    """Compiled cells joined to the eager naive cell of the same (dtype, causal, batch, d, seq)."""
    keys = ["dtype", "causal", "batch", "d", "seq"]
    base = eager[eager["variant"] == "naive"]
    return compiled.merge(base, on=keys, how="left", suffixes=("", "_eager"))


def attention_table(pairs: pd.DataFrame, memory_key: str) -> Table:
    rows = []
    for _, r in pairs.sort_values(["d", "seq"]).iterrows():
        eager_status = r["status_eager"] if isinstance(r["status_eager"], str) else "missing"
        row = [Cell(str(r["d"])), Cell(str(r["seq"]))]
        eager_source = r["source_eager"] if isinstance(r["source_eager"], str) else None
        for which in ("fwd", "bwd"):
            e, c = r[f"{which}_mean_s_eager"], r[f"{which}_mean_s"]
            row.append(Cell(sig(e * 1e3), source=eager_source) if e == e else status_cell(eager_status))
            row.append(Cell(sig(c * 1e3), source=r["source"]) if c == c else status_cell(r["status"]))
            row.append(Cell(sig(e / c)) if e == e and c == c else Cell("–"))
        row.append(bytes_cell(r[f"{memory_key}_eager"], eager_status, eager_source))
        row.append(bytes_cell(r[memory_key], r["status"], r["source"]))
        row.append(first_call_cell(r["first_call_s"], r["cache_hits"]))
        rows.append(row)
    # not pytorch_attention's "allocated before backward", which counts the inputs too
    memory = "left allocated by the forward" if memory_key == "activation_bytes" else "saved for backward"
    return Table(
        title="Naive attention, eager against torch.compile",
        columns=["d_head", "seq", "forward eager", "forward compiled", "forward speed-up", "backward eager",
                 "backward compiled", "backward speed-up", f"{memory}, eager", f"{memory}, compiled",
                 "first compiled call"],
        units=["", "", "ms", "ms", "×", "ms", "ms", "×", "", "", "s"], rows=rows,
        sources=sorted(set(pairs["source"]) | set(pairs["source_eager"].dropna())),
        note="mean time per pass; speed-up = eager / compiled; the first compiled call (a forward and a backward "
             "pass, which compiles both) is not part of the timed passes"
             + ("; left allocated by the forward: torch.cuda.memory_allocated with a forward pass's graph alive, less "
                "what was allocated before that pass (inputs, upstream gradient, workspace)"
                if memory_key == "activation_bytes" else "")
             + (f"; {CACHE_NOTE}" if from_cache(pairs).any() else "") + memory_notes(pairs))


def attention_analysis(pairs: pd.DataFrame, memory_key: str) -> dict:
    both = pairs[(pairs["status"] == "ok") & (pairs["status_eager"] == "ok")]
    out: dict = {"n": len(pairs), "n_both": len(both),
                 "causal": bool(pairs["causal"].astype(bool).any()) if "causal" in pairs else False}
    # An eager cell that has no record was not run: only a recorded failure counts against it.
    only_compiled = pairs[(pairs["status"] == "ok") & pairs["status_eager"].isin(["oom", "error"])]
    if not only_compiled.empty:
        out["only_compiled"] = [{"d": int(r["d"]), "seq": int(r["seq"]), "eager": str(r["status_eager"])}
                                for _, r in only_compiled.iterrows()]
    # the first calls and the compiled cells' own failures need no eager twin
    first = first_call_summary(pairs[pairs["status"] == "ok"], lambda r: f"d_head {int(r['d'])}, seq {int(r['seq'])}")
    if first:
        out["first_call"] = first
    ooms = pairs[pairs["status"] == "oom"].sort_values(["seq", "d"])
    if not ooms.empty:
        out["compiled_oom"] = {"d": int(ooms.iloc[0]["d"]), "seq": int(ooms.iloc[0]["seq"])}
    shared = pairs[pairs["status"] == "oom_shared"].sort_values(["seq", "d"])
    if not shared.empty:
        out["shared_oom"] = {"cells": [f"d_head {int(r['d'])} at seq {int(r['seq'])}" for _, r in shared.iterrows()],
                             "others": fmt_bytes(shared["others_bytes"].max())}
    if both.empty:
        return out
    for which in ("fwd", "bwd"):
        ratio = both[f"{which}_mean_s_eager"] / both[f"{which}_mean_s"]
        best, worst = both.loc[ratio.idxmax()], both.loc[ratio.idxmin()]
        out[which] = {"min": sig(ratio.min()), "max": sig(ratio.max()), "median": sig(ratio.median()),
                      "best_d": int(best["d"]), "best_seq": int(best["seq"]), "faster": bool(ratio.median() >= 1),
                      "n": int(len(ratio)), "n_slower": int((ratio < 1).sum()),
                      "worst_d": int(worst["d"]), "worst_seq": int(worst["seq"])}
    mem = (both[memory_key] / both[f"{memory_key}_eager"]).dropna()
    if not mem.empty:
        compiled_m = (both["saved_bytes"] / both["matrix_bytes"]).median()
        eager_m = (both["saved_bytes_eager"] / both["matrix_bytes_eager"]).median()
        out["memory"] = {"min": sig(mem.min()), "max": sig(mem.max()), "matrices": sig(compiled_m, 2),
                         "matrices_eager": sig(eager_m, 2), "fewer": bool(compiled_m < eager_m - 0.5)}
    saved_exp = [e["saved"] for e in exponents(pairs[FRAME_COLUMNS]) if e["saved"] is not None]
    if saved_exp:
        out["saved_exponent"] = {"min": fmt_exponent(min(saved_exp)), "max": fmt_exponent(max(saved_exp))}
    return out


def answer_table(table: Table | None) -> Table | None:
    """(a): the eager and compiled attention's forward and backward times, without the memory columns."""
    if table is None:
        return None
    cols = ["d_head", "seq", "forward eager", "forward compiled", "forward speed-up", "backward eager",
            "backward compiled", "backward speed-up"]
    return select_columns(table, [c for c in cols if c in table.columns],
                          note="mean time per pass; speed-up = eager / compiled; the first compiled call, which "
                               "compiles, is not among the timed passes")
