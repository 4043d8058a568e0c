"""pytorch_attention's evidence tables: the handout's grid and SDPA against the naive attention."""

from __future__ import annotations

import pandas as pd

from ...tables import Cell, Table, fmt_bytes, fmt_mean_std, sig, status_cell
from .frame import label


def time_cell(r, which: str, spread: bool = True) -> Cell:
    """Mean ± std of ``which`` (fwd, bwd), or the mean alone, linked to the row's record."""
    mean = r[f"{which}_mean_s"]
    if mean == mean:
        text = fmt_mean_std(mean, r[f"{which}_std_s"], 1e-3) if spread else sig(mean * 1e3)
        return Cell(text, source=r.get("source"))
    return status_cell(r["status"] if r["status"] != "ok" else "missing")


def bytes_cell(value: float, status: str, source: str | None = None) -> Cell:
    """Bytes in their unit, linked to ``source`` (the record it was measured in) where given."""
    if value == value:
        return Cell(fmt_bytes(value), source=source)
    return status_cell(status) if status != "ok" else Cell("–")


def status_text(r) -> Cell:
    return Cell("ok") if r["status"] == "ok" else status_cell(r["status"])


def grid_table(df: pd.DataFrame, title: str, with_variant: bool = False, brief: bool = False) -> Table:
    """The handout's table: rows (d, seq); forward, backward, allocated before backward, peak allocated, saved, status.
    ``brief`` (the answer's view): times without their spread, and no status column where every cell ran
    or ran out of memory (its OOM cells say so); the evidence keeps both."""
    status = not brief or not set(df["status"]) <= {"ok", "oom"}
    columns = (["implementation"] if with_variant else []) + [
        "d_head", "seq", "forward", "backward", "allocated before backward", "peak allocated", "saved for backward"] \
        + (["status"] if status else [])
    units = ([""] if with_variant else []) + ["", "", "ms", "ms", "", "", ""] + ([""] if status else [])
    rows = []
    for _, r in df.iterrows():
        row = [Cell(label(r["variant"], r["dtype"]))] if with_variant else []
        row += [Cell(str(r["d"])), Cell(str(r["seq"])), time_cell(r, "fwd", not brief), time_cell(r, "bwd", not brief),
                bytes_cell(r["before_bwd_bytes"], r["status"], r["source"]),
                bytes_cell(r["peak_bytes"], r["status"], r["source"]),
                bytes_cell(r["saved_bytes"], r["status"], r["source"])] + ([status_text(r)] if status else [])
        rows.append(row)
    times = ("times: mean over the timed passes" if brief
             else "times: mean ± sample standard deviation over the timed passes")
    how = ("how each memory column is measured: in the evidence" if brief
           else "allocated before backward: torch.cuda.memory_allocated with the forward graph alive; peak allocated: "
                "torch.cuda.max_memory_allocated over that forward and the backward passes; saved for backward: bytes "
                "of the tensors autograd kept (inputs excluded), counted with saved_tensors_hooks")
    return Table(title=title, columns=columns, units=units, rows=rows, sources=sorted(df["source"]),
                 note=f"{times}; {how}" + memory_notes(df))


def memory_notes(df: pd.DataFrame) -> str:
    """What a table's memory and OOM cells need said about the cells' processes and the card."""
    notes = ""
    held = df[df["baseline_bytes"] > 0]
    if not held.empty:
        notes += (f"; {len(held)} of these cells began with up to {fmt_bytes(held['baseline_bytes'].max())} still "
                  "allocated by an earlier cell of the same process, which their memory columns leave out")
    shared = df[df["status"] == "oom_shared"]
    if not shared.empty:
        notes += (f"; OOM (card shared): the cell ran out of memory while other processes held up to "
                  f"{fmt_bytes(shared['others_bytes'].max())} of the card, so it did not meet its own limit")
    return notes


def comparison_table(df: pd.DataFrame) -> Table | None:
    """Each SDPA row next to the naive cell of the same (d, seq): time and memory ratios."""
    naive = df[df["variant"] == "naive"].set_index(["d", "seq"])
    other = df[df["variant"].astype(str).str.startswith("sdpa")]
    if other.empty:
        return None
    rows = []
    for _, r in other.iterrows():
        base = naive.loc[(r["d"], r["seq"])] if (r["d"], r["seq"]) in naive.index else None
        row = [Cell(label(r["variant"], r["dtype"])), Cell(str(r["d"])), Cell(str(r["seq"]))]
        if r["status"] != "ok":
            row += [status_cell(r["status"])] * 3
        elif base is None or base["status"] != "ok":
            text = "no naive cell" if base is None else f"naive: {status_cell(base['status']).text}"
            row += [Cell(text)] + [Cell("–")] * 2
        else:
            row += [Cell(sig(base["fwd_mean_s"] / r["fwd_mean_s"])), Cell(sig(base["bwd_mean_s"] / r["bwd_mean_s"])),
                    Cell(_ratio(base, r))]
        rows.append(row)
    return Table(title="SDPA backends against the naive attention", rows=rows,
                 columns=["implementation", "d_head", "seq", "forward speed-up", "backward speed-up",
                          "naive memory / SDPA memory"],
                 units=["", "", "", "×", "×", "×"], sources=sorted(df["source"]),
                 note="speed-up = naive time / SDPA time; memory: bytes in use before backward beyond the inputs "
                      "where the device reports them (CUDA), else bytes saved for backward")


def _ratio(base, r) -> str:
    key = "activation_bytes" if base["activation_bytes"] == base["activation_bytes"] else "saved_bytes"
    if not (r[key] > 0):
        return "–"
    return sig(base[key] / r[key])

