"""Where pytorch_attention's naive cells run out of memory and why, counted in T×T matrices.

Each naive cell records one T×T matrix's bytes (``matrix_bytes``, B·T²·b), its forward pass's peak
allocated and its whole peak; the error of a cell that ran out names the allocator's state
(:mod:`cs336report.parsers.oom`). From those: which cells stopped in the forward pass and which in
backward, and why (:func:`oom_causes`); and, for the 80 GB card the handout assumed, the first
sequence length whose peak would not fit (:func:`on_80_gb`).
"""

from __future__ import annotations

import math

import pandas as pd

from ....parsers.oom import fragmented, oom_bytes
from ... import checks
from ...tables import Num, fmt_bytes, sig

ORDINALS = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth", 6: "sixth", 7: "seventh", 8: "eighth"}


def _measured(x) -> bool:
    return x is not None and x == x


def _in_forward(phase) -> bool:
    return isinstance(phase, str) and "forward" in phase


def oom_causes(naive: pd.DataFrame) -> dict | None:
    """At the shortest seq where naive cells ran out of memory: the cells that got through the forward
    pass (``through``: their forward peak, in T×T matrices) and ran out in backward, and those that ran
    out in the forward pass (``forward``: what their error says the allocator held). None without an
    out-of-memory cell, or where every one failed in the same phase."""
    ooms = naive[naive["status"] == "oom"]
    if ooms.empty:
        return None
    seq = int(ooms["seq"].min())
    at = ooms[ooms["seq"] == seq].sort_values("d")
    matrix = float(at["matrix_bytes"].iloc[0])
    through = [r for _, r in at.iterrows() if not _in_forward(r["oom_phase"]) and _measured(r["fwd_peak_bytes"])]
    stopped = [r for _, r in at.iterrows() if _in_forward(r["oom_phase"])]
    if not through or not stopped or not matrix == matrix:
        return None
    n_forward = max(r["fwd_peak_bytes"] for r in through) / matrix
    card = float(at["gpu_memory_bytes"].iloc[0])
    out = {"seq": seq, "matrix": fmt_bytes(matrix), "n_forward": sig(n_forward, 2),
           "forward_need": fmt_bytes(round(n_forward) * matrix),
           "card": fmt_bytes(card) if card == card else None, "within": bool(round(n_forward) * matrix < card),
           "through": [{"d": int(r["d"]), "fwd_peak": Num(fmt_bytes(r["fwd_peak_bytes"]), r["source"])}
                       for r in through],
           "forward": []}
    for r in stopped:
        sizes = oom_bytes(r["error"])
        if not {"requested", "allocated", "unallocated", "free"} <= sizes.keys():
            return None
        held = int(sizes["allocated"] // matrix)
        out["forward"].append({
            "d": int(r["d"]), "requested": Num(fmt_bytes(sizes["requested"]), r["source"]),
            "is_matrix": abs(sizes["requested"] - matrix) < 0.01 * matrix,
            "ordinal": ORDINALS.get(held + 1, f"{held + 1}th"), "held": held,
            "allocated": Num(fmt_bytes(sizes["allocated"]), r["source"]),
            "unallocated": Num(fmt_bytes(sizes["unallocated"]), r["source"]),
            "free": Num(fmt_bytes(sizes["free"]), r["source"]),
            "capacity": fmt_bytes(sizes["capacity"]) if "capacity" in sizes else None,
            "fragmented": bool(fragmented(sizes))})
    out["all_fragmented"] = all(f["fragmented"] for f in out["forward"])
    out["all_matrices"] = all(f["is_matrix"] for f in out["forward"])
    return out


def on_80_gb(naive: pd.DataFrame, d: int | None = None, card_bytes: float = checks.H100_BYTES) -> dict | None:
    """From the longest naive cell that ran (at head size ``d``, where given: the accounting's): its
    peak and its forward pass's, in T×T matrices, set against ``card_bytes``: the longest seq whose
    peak fits at the cell's batch and dtype, and the first seq of the grid (then doubling) that would not."""
    ok = naive[(naive["status"] == "ok") & naive["peak_bytes"].notna() & naive["matrix_bytes"].notna()]
    if d is not None and (ok["d"] == d).any():
        ok = ok[ok["d"] == d]
    if ok.empty:
        return None
    top = ok.sort_values(["seq", "d"]).iloc[-1]
    seq = int(top["seq"])
    k = float(top["peak_bytes"] / top["matrix_bytes"])
    k_fwd = float(top["fwd_peak_bytes"] / top["matrix_bytes"]) if _measured(top["fwd_peak_bytes"]) else None
    per_t2 = float(top["matrix_bytes"]) / seq**2  # B·b: one T×T matrix is per_t2·T² bytes
    fits = math.isqrt(int(card_bytes / (k * per_t2)))
    grid = sorted(set(int(s) for s in naive["seq"]))
    beyond = next((s for s in grid if s > fits), None)
    if beyond is None:
        beyond = grid[-1]
        while beyond <= fits:
            beyond *= 2
    out = {"card": fmt_bytes(card_bytes), "seq": seq, "matrices": sig(k, 3), "fits": f"{fits // 100 * 100:,}",
           "first": beyond, "first_peak": fmt_bytes(k * per_t2 * beyond**2), "batch": int(top["batch"]), "d": int(top["d"])}
    if k_fwd is not None:
        forward = k_fwd * per_t2 * beyond**2
        out.update(fwd_matrices=sig(k_fwd, 2), first_fwd=fmt_bytes(forward), in_forward=forward > card_bytes)
    return out
