"""distributed_communication_single_node: all-reduce latency and bandwidth, Gloo on CPUs and NCCL
on GPUs, by tensor size and number of processes (records: the experiment of the same name)."""

from __future__ import annotations

from ..ddp import allreduce_frame, allreduce_plot, allreduce_table
from ..headlines import GAP
from ..tables import Num, sig

EXPERIMENT = "distributed_communication_single_node"  # the rule of the problem's own name
EXPERIMENTS = (EXPERIMENT,)


def _row(r) -> dict:
    """The sentence values of one all-reduce size of one cell; the measured ones link to its record."""
    src = r["source"]
    return {"backend": r["backend"], "n": int(r["world_size"]), "size": sig(r["size_mb"]),
            "latency": Num(f"{sig(r['median_s'] * 1e3)} ms", src), "busbw": Num(f"{sig(r['busbw_gb_s'])} GB/s", src),
            "algbw": Num(f"{sig(r['algbw_gb_s'])} GB/s", src),
            "peak": f"{sig(r['peak_gb_s'])} GB/s" if r["peak_gb_s"] else None,
            "of_peak": Num(f"{sig(100 * r['busbw_gb_s'] / r['peak_gb_s'])} %", src) if r["peak_gb_s"] else None,
            "interconnect": r["interconnect"], "nccl": r["nccl"], "devices": ", ".join(dict.fromkeys(r["devices"]))}


def analysis(df) -> dict:
    ok = df[df["status"] == "ok"]
    out: dict = {"backends": {}, "not_run": [], "failed": []}
    for _, r in df[df["status"] != "ok"].iterrows():
        (out["not_run"] if r["status"] == "not_run" else out["failed"]).append(
            {"backend": r["backend"], "n": int(r["world_size"]), "why": r["error"]})
    for backend, g in ok.groupby("backend"):
        big = g[g["size_mb"] == g["size_mb"].max()].sort_values("world_size")
        small = g[g["size_mb"] == g["size_mb"].min()].sort_values("world_size")
        out["backends"][backend] = {
            "largest": [_row(r) for _, r in big.iterrows()], "smallest": _row(small.iloc[0]),
            "all_correct": bool(g["correct"].all()),
            # bus bandwidth at the largest size grows or shrinks with the number of processes
            "busbw_trend": ("grows" if big["busbw_gb_s"].iloc[-1] > big["busbw_gb_s"].iloc[0] * 1.1 else
                            "falls" if big["busbw_gb_s"].iloc[-1] < big["busbw_gb_s"].iloc[0] / 1.1 else "holds")
            if len(big) > 1 else None,
        }
    both = ok.pivot_table(index=["world_size", "size_mb"], columns="backend", values="median_s")
    if {"gloo", "nccl"} <= set(both.columns):
        both = both.dropna()
        if len(both):
            (n, size), row = max(both.iterrows(), key=lambda kv: kv[0][1])
            out["gloo_over_nccl"] = {"n": int(n), "size": sig(size), "ratio": sig(row["gloo"] / row["nccl"])}
    return out


def build(ctx) -> dict:
    df = allreduce_frame(ctx.records(EXPERIMENT))
    out: dict = {"table": None, "figures": [], "analysis": None}
    if df.empty:
        return out
    out["table"] = allreduce_table(df)
    ok = df[df["status"] == "ok"]
    if len(ok):
        # the caption names the lines the plot draws, and no others
        lines = [text for shown, text in ((ok["backend"].eq("nccl").any(), "solid: NCCL on GPUs"),
                                          (ok["backend"].eq("gloo").any(), "dashed: Gloo on CPUs"),
                                          (ok["peak_gb_s"].notna().any(), "dotted: the NVLink bandwidth per direction"))
                 if shown]
        out["figures"].append(ctx.figure(
            EXPERIMENT, allreduce_plot(df),
            "All-reduce latency (left) and bus bandwidth (right) against tensor size; " + "; ".join(lines) + ".",
            alt="Two log-log plots of all-reduce latency and bus bandwidth against tensor size."))
    out["analysis"] = analysis(df)
    return out


def headline(d: dict) -> list[str]:
    """The summary's clauses, in its answer's words: NCCL's largest all-reduce where it ran, else Gloo's."""
    backends = (d.get("analysis") or {}).get("backends") or {}
    if backends.get("nccl"):
        r = backends["nccl"]["largest"][0]
        return [f"With NCCL on {r['n']} GPUs{GAP}a {r['size']} MB all-reduce takes {r['latency']}: a bus bandwidth of "
                f"{r['busbw']}"]
    if backends.get("gloo"):
        g = backends["gloo"]["largest"][0]
        return [f"Gloo on the CPU takes {g['latency']} for {g['size']} MB with {g['n']} processes"]
    return []
