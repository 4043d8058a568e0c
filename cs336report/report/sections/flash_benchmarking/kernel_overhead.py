"""Kernel-only time beside do_bench's time of the flash_benchmarking passes: the per-call overhead.

do_bench times a call between CUDA events recorded by the host, so its time includes whatever the
host does between the two (Python, autograd bookkeeping, the autotuner's cache lookup, kernel
launches) whenever the kernels finish sooner than the host launches them. The records keep the
kernels' own GPU time per call (torch.profiler, ``kernel_s``); this table sets one beside the other
for the Triton implementation at one head dimension, with the FLOP rate of the kernels alone.
"""

from __future__ import annotations

import pandas as pd

from ....records.shapes import FlashCell, FlashPass, FlashShape, Stats, read_as, typed
from ...tables import Cell, Num, Table, sig, status_cell

PASS_COLUMNS = (("forward", "forward"), ("forward_backward", "forward + backward"))


def frame(records: list[dict], implementation: str = "triton") -> pd.DataFrame:
    rows = []
    for r in records:
        if r["status"] != "ok" or read_as(FlashCell, r["config"]).implementation != implementation:
            continue
        for shape in (read_as(FlashShape, s) for s in typed(r).shapes or []):
            for p, v in ((p, read_as(FlashPass, v)) for p, v in (shape.passes or {}).items()):
                if v.status != "ok" or v.kernel_s is None:
                    continue
                rows.append({"dtype": r["config"]["dtype"], "d": shape.d, "seq": shape.seq, "pass": p,
                             "bench_s": read_as(Stats, v.stats_s).median, "kernel_s": v.kernel_s,
                             "overhead_s": v.overhead_s, "tflops": (v.tflops or {}).get("kernels"),
                             "source": r["_path"]})
    return pd.DataFrame(rows)


def table(records: list[dict], d: int, implementation: str = "triton", label: str = "Triton FA2") -> Table | None:
    """Rows (dtype, seq) at head dimension ``d``: do_bench's median and the kernels' time of each pass,
    the overhead per call of forward + backward and the kernels' FLOP rate; None without kernel times."""
    df = frame(records, implementation)
    if df.empty or d not in set(df["d"]):
        return None
    df = df[df["d"] == d]
    rows = []
    for (dtype, seq), g in df.groupby(["dtype", "seq"], sort=True):
        by = g.set_index("pass")
        row = [Cell(dtype), Cell(str(seq))]
        for p, _ in PASS_COLUMNS:
            if p in by.index:
                row += [Cell(sig(by.loc[p, "bench_s"] * 1e3)), Cell(sig(by.loc[p, "kernel_s"] * 1e3))]
            else:
                row += [status_cell("missing")] * 2
        if "forward_backward" in by.index:
            fb = by.loc["forward_backward"]
            row += [Cell(sig(fb["overhead_s"] * 1e3)), Cell(f"{100 * fb['overhead_s'] / fb['bench_s']:.0f}"),
                    Cell(sig(fb["tflops"]) if fb["tflops"] else "–")]
        else:
            row += [status_cell("missing")] * 3
        rows.append(row)
    # profiler and CUDA events are two measurements: where the kernels alone took longer than do_bench's
    # median, the records' overhead is 0 (never negative), and the table says how often and by how much
    shown = df[df["pass"].isin([p for p, _ in PASS_COLUMNS])]
    over = shown[shown["kernel_s"] > shown["bench_s"]]
    longer = ""
    if len(over):
        worst = 100 * float((over["kernel_s"] / over["bench_s"]).max() - 1)
        longer = (f"; in {len(over)} of {len(shown)} timings here the kernels alone took longer than do_bench's median "
                  f"(by up to {worst:.0f} %; profiler and events are two measurements), and the overhead is then 0")
    columns = ["dtype", "seq"]
    units = ["", "tokens"]
    for _, name in PASS_COLUMNS:
        columns += [f"{name}, do_bench", f"{name}, kernels only"]
        units += ["ms", "ms"]
    columns += ["overhead per call (forward + backward)", "overhead share", "kernels' rate (forward + backward)"]
    units += ["ms", "%", "TFLOP/s"]
    return Table(
        title=f"Kernel time against do_bench time, {label}, d_head {d}", columns=columns, units=units, rows=rows,
        sources=sorted(set(df["source"])),
        note="do_bench: median per call between CUDA events the host records, so it includes the host's work per "
             "call (Python, autograd, the autotuner's lookup, kernel launches) wherever the kernels finish first; "
             "kernels only: the GPU time of the call's kernels (torch.profiler); overhead = do_bench − kernels; "
             "rate: matmul FLOPs of the causal pass (forward 2·B·T²·d, backward 2.5× that) over the kernels' time"
             + longer)


HOST_SHARE = 0.5  # a call whose kernels take under this share of do_bench's time is mostly host overhead


def _ms(seconds: float) -> str:
    return sig(seconds * 1e3)


def short_sequences(records: list[dict], d: int, dtype: str, implementation: str = "triton") -> dict | None:
    """Where ``implementation``'s forward + backward call is mostly host overhead (kernels under
    HOST_SHARE of do_bench's median): the seqs at head size ``d`` and ``dtype``, do_bench's and the
    kernels' time of each pass at the shortest, and, over every such shape of the records, how far
    the kernels' forward + backward is from the sum of their forward and backward. None without."""
    df = frame(records, implementation)
    if df.empty:
        return None
    wide = df.pivot_table(index=["dtype", "d", "seq"], columns="pass", values=["bench_s", "kernel_s"])
    if not {"forward", "backward", "forward_backward"} <= set(wide["kernel_s"].columns):
        return None
    k, b = wide["kernel_s"].dropna(), wide["bench_s"]
    host = k[k["forward_backward"] < HOST_SHARE * b.loc[k.index, "forward_backward"]]
    mine = host[[i[0] == dtype and i[1] == d for i in host.index]]
    if mine.empty:
        return None
    gap = (host["forward_backward"] / (host["forward"] + host["backward"]) - 1).abs()
    bench_gap = (b.loc[host.index, "forward_backward"] / (b.loc[host.index, "forward"] + b.loc[host.index, "backward"]) - 1)
    first = mine.index[0]
    seqs = [int(i[2]) for i in mine.index]
    grid = sorted({int(i[2]) for i in k.index if i[0] == dtype and i[1] == d})
    return {"dtype": dtype, "d": d, "seq": seqs[0], "lo": min(seqs), "hi": max(seqs), "n_seqs": len(seqs),
            "from_shortest": seqs == grid[:len(seqs)],
            "n_shapes": len(host), "n_all": len(k),
            "bench": {p: _ms(b.loc[first, p]) for p in ("forward", "backward", "forward_backward")},
            "kernels": {p: sig(host.loc[first, p] * 1e6) for p in ("forward", "backward", "forward_backward")},
            "kernel_gap": f"{100 * gap.max():.0f}", "bench_gap_min": f"{100 * bench_gap.min():.0f}",
            "bench_gap_max": f"{100 * bench_gap.max():.0f}"}


def longest_rates(records: list[dict], d: int, labels: dict[str, str]) -> list[dict]:
    """The kernels' FLOP rate of forward + backward at the longest seq each implementation of
    ``labels`` ran at head size ``d``, per dtype."""
    out = []
    for impl, label in labels.items():
        df = frame(records, impl)
        if df.empty:
            continue
        fb = df[(df["d"] == d) & (df["pass"] == "forward_backward") & df["tflops"].notna()]
        for dtype, g in fb.groupby("dtype"):
            top = g.sort_values("seq").iloc[-1]
            out.append({"impl": label, "key": impl, "dtype": dtype, "seq": int(top["seq"]),
                        "tflops": Num(sig(top["tflops"]), top["source"])})
    return out
