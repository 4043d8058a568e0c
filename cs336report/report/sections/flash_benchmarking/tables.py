"""flash_benchmarking's evidence tables: latency, peak memory, autotuned tiles and speed-ups."""

from __future__ import annotations

import pandas as pd

from ....names.flash import IMPLEMENTATIONS
from ...tables import Cell, Table, join_columns, sig, status_cell
from .frames import PASS_LABELS, present_implementations
from .leaderboard import KERNEL_LABELS


def latency_table(df: pd.DataFrame, dtype: str, pass_name: str) -> Table:
    """Rows (d, seq), one column per implementation: the median time of ``pass_name``."""
    sub = df[(df["dtype"] == dtype) & (df["pass"] == pass_name)]
    impls = present_implementations(sub)
    rows = []
    for (d, seq), g in sub.groupby(["d", "seq"], sort=True):
        by = {str(r["implementation"]): r for _, r in g.iterrows()}
        row = [Cell(str(d)), Cell(str(seq))]
        for impl in impls:
            r = by.get(impl)
            if r is None:
                row.append(status_cell("missing"))
            elif r["status"] == "ok":
                row.append(Cell(sig(r["median_s"] * 1e3), source=r["source"]))
            else:
                row.append(status_cell(r["status"]))
        rows.append(row)
    return Table(
        title=f"{PASS_LABELS[pass_name].capitalize()} latency, {dtype}",
        columns=["d_head", "seq"] + [IMPLEMENTATIONS[i] for i in impls],
        units=["", "tokens"] + ["ms"] * len(impls), rows=rows, sources=sorted(set(sub["source"])),
        note="median of the per-call times; unsupported = the backend refused the input",
    )


def memory_table(mem: pd.DataFrame, dtype: str, d: int) -> Table:
    """Rows seq, one column per implementation: the peak allocated bytes of one forward + backward."""
    sub = mem[(mem["dtype"] == dtype) & (mem["d"] == d)]
    impls = present_implementations(sub)
    rows = []
    for seq, g in sub.groupby("seq", sort=True):
        by = {str(r["implementation"]): r for _, r in g.iterrows()}
        rows.append([Cell(str(seq))] + [Cell(sig(by[i]["peak_bytes"] / 2**20)) if i in by else status_cell("missing")
                                         for i in impls])
    return Table(
        title=f"Peak allocated of one forward + backward, {dtype}, d_head {d}",
        columns=["seq"] + [IMPLEMENTATIONS[i] for i in impls], units=["tokens"] + ["MiB"] * len(impls),
        rows=rows, sources=sorted(set(sub["source"])),
        note="peak allocated: torch.cuda.max_memory_allocated, inputs and upstream gradient included; – = the shape did not run",
    )


def tiles_table(tiles: pd.DataFrame) -> Table:
    present = set(tiles["kernel"])
    kernels = {k: label for k, label in KERNEL_LABELS.items() if k in present}
    dtypes = sorted(set(tiles["dtype"]))
    columns, keys = ["d_head", "seq"], []
    for dtype in dtypes:
        for k, label in kernels.items():
            columns.append(f"{label}, {dtype}")
            keys.append((dtype, k))
    grid = tiles.set_index(["d", "seq", "dtype", "kernel"])["text"]
    rows = []
    for d, seq in sorted(set(zip(tiles["d"], tiles["seq"]))):
        rows.append([Cell(str(d)), Cell(str(seq))] + [Cell(grid.get((d, seq, dt, k), "–")) for dt, k in keys])
    return Table(title=f"Tiles chosen by the autotuner ({IMPLEMENTATIONS['triton']})", columns=columns,
                 units=["", "tokens"] + [""] * len(keys), rows=rows, sources=sorted(set(tiles["source"])),
                 note="Q tile × K tile, warps, pipeline stages, as triton.autotune chose them for each shape")


def speedup_table(rows: list[dict], ref_label: str, d: int, sources: list[str]) -> Table:
    """One row per (dtype, other implementation): how the reference's forward + backward time compares."""
    cells = []
    for r in rows:
        cells.append([
            Cell(r["dtype"]), Cell(r["impl"]), Cell(f"{r['faster']} of {r['n']}"), Cell(sig(r["median"])),
            Cell(f"{sig(r['min'])} – {sig(r['max'])}"),
            Cell(f"{sig(r['longest'])} (seq {r['longest_seq']})" if "longest" in r else "–"),
            Cell(str(r["crossover"]) if r.get("crossover") else "never" if "longest" in r else "–"),
        ])
    return Table(
        title=f"Forward + backward time of each other implementation divided by that of {ref_label}",
        columns=["dtype", "other", f"shapes where {ref_label} is faster", "median", "range",
                 f"at d_head {d}, longest seq both ran", f"{ref_label} faster at every seq from"],
        units=["", "", "", "×", "×", "×", "tokens"], rows=cells, sources=sources,
        note="above 1: the other implementation takes longer; every ratio is of medians of the same shape",
    )


def answer_tables(tables: list[Table], reference: str = "Triton FA2", students: tuple[str, ...] = ()) -> list[Table]:
    """One table per dtype: forward, backward and forward + backward latency of the FlashAttention-2
    kernels (``reference``, the label of the analysis' reference: Triton where it ran) against the
    naive PyTorch attention; with a student's checkout their rows (``students``, by label) first,
    ours beside them as the reference."""
    out = []
    for dtype in ("bf16", "fp32"):
        parts = [(label, t) for label, prefix in (("fwd", "Forward latency"), ("bwd", "Backward latency"),
                                                  ("fwd+bwd", "Forward + backward latency"))
                 for t in tables if t.title == f"{prefix}, {dtype}"]
        if len(parts) == 3 and all(c in parts[0][1].columns for c in (reference, "naive")):
            mine = [c for c in students if c in parts[0][1].columns]
            title = (f"Latency, {dtype}: {', '.join(mine)} beside {reference} (ours, the reference) and the naive "
                     f"PyTorch attention" if mine else f"Latency, {dtype}: {reference} against the naive PyTorch attention")
            out.append(join_columns(parts, 2, [*mine, reference, "naive"], title))
    return out
