"""fsdp_accounting (2026 problem 21): (a) the bytes per rank of parameters, gradients and AdamW state
without sharding, with optimizer state sharding and with FSDP, from the fsdp_accounting record
(computed by cs336report.accounting.fsdp); (b) whether the weights' all-gathers finish in time for
the forward pass, from the fsdp_accounting_profile record (each rank's last profiled forward pass
under nsys, parsed by cs336report.steps.fsdp_forward): its kernels drawn per stream in place of
the Nsight screenshots, and the time the compute stream sat idle while a gather ran."""

from __future__ import annotations

from ...records.shapes import typed
from ..ddp import timeline_plot
from ..tables import Cell, Num, Table, fmt_bytes, fmt_pct, sig

EXPERIMENT = "fsdp_accounting"
PROFILE = "fsdp_accounting_profile"  # (b): the profiled steps, parsed
EXPERIMENTS = (EXPERIMENT, PROFILE)
# (b): the all-gathers against the forward pass, on two GPUs under Nsight Systems
NEEDS_B = "2 GPUs and Nsight Systems"
# (b): the gathers are in time when the compute stream waits on them for at most this share of the forward
IN_TIME_SHARE = 0.05
# (b): the handout's batch and context for its two-GPU benchmarks (global batch 4, context 512)
HANDOUT_SETTING = {"batch_size": 4, "context": 512}


def _ms(us: float, source: str) -> Num:
    return Num(f"{sig(us / 1e3)} ms", source)


def _rank_view(rank: str, d: dict, src: str) -> dict:
    """One rank's forward pass in the answer's words, each number linked to the record."""
    g, w = d["gathers"], d["wait"]
    share = w["waited_us"] / d["forward_us"] if d["forward_us"] > 0 else 0.0
    return {"rank": rank, "forward": _ms(d["forward_us"], src), "gather": _ms(g["comm_us"], src),
            "hidden": _ms(g["hidden_us"], src), "exposed": _ms(g["exposed_us"], src),
            "waited": _ms(w["waited_us"], src), "waited_share": Num(fmt_pct(share), src), "share": share,
            "in_time": share <= IN_TIME_SHARE, "kernels": d["gather_kernels"], "gathers": d.get("forward_gathers")}


def forward_pass(ctx) -> dict:
    """(b): each rank's last profiled forward pass from the first parsed record (``ok``), else why none."""
    records = ctx.records(PROFILE)
    parsed = [r for r in records if r["status"] == "ok" and isinstance(typed(r).ranks, dict) and typed(r).ranks]
    if not parsed:
        failed = [f"{r['cell']}: {r.get('error') or r['status']}" for r in records if r["status"] != "ok"]
        return {"ok": False, "reason": "; ".join(failed) or None}
    r = parsed[0]
    src, ranks, cell = r["_path"], typed(r).ranks, r["config"]
    views = [_rank_view(k, ranks[k], src) for k in sorted(ranks, key=int)]
    figure = ctx.figure(
        "fsdp_accounting_forward",
        timeline_plot([(f"rank {v['rank']}: forward pass", {"kernels": ranks[v["rank"]]["kernels"]}) for v in views],
                      xlabel="time from the start of the forward pass's range (ms)"),
        f"The last profiled forward pass of each rank ({cell['size']}, {cell['world_size']} GPUs, nsys), in place of "
        "the Nsight screenshots: every kernel on its CUDA stream (blue: compute, red: NCCL all-gathers, green: a "
        "side stream); a gap in blue while red runs is the forward waiting for a weight.",
        alt="Kernel timelines of one FSDP forward pass per rank, compute and NCCL streams.")
    table = Table(title="Each rank's last profiled forward pass: all-gathers against compute",
                  columns=["rank", "forward", "all-gather kernels", "all-gather time", "beside compute", "exposed",
                           "compute waiting on a gather", "share of the forward"], sources=[src],
                  rows=[[Cell(v["rank"]), Cell(v["forward"], source=src), Cell(str(v["kernels"])),
                         Cell(v["gather"], source=src), Cell(v["hidden"], source=src), Cell(v["exposed"], source=src),
                         Cell(v["waited"], source=src), Cell(v["waited_share"], source=src)] for v in views],
                  note="all-gather time is the union of the NCCL kernels' intervals, which includes waiting for the "
                       "other rank; the wait is the compute stream's idle time while a gather ran")
    return {"ok": True, "ranks": views, "first": views[0], "others": views[1:],
            "in_time": all(v["in_time"] for v in views), "threshold": fmt_pct(IN_TIME_SHARE, 2),
            "size": cell["size"], "world_size": cell["world_size"], "context": cell["context"],
            "batch_size": cell["batch_size"], "compute_dtype": cell["compute_dtype"],
            "handout_setting": all(cell[k] == v for k, v in HANDOUT_SETTING.items()),
            "warmup_steps": cell["warmup_steps"], "profile_steps": cell["profile_steps"],
            "figure": figure, "table": table}


def _accounting(ctx) -> dict:
    """(a) from the first ok fsdp_accounting record."""
    records = [r for r in ctx.records(EXPERIMENT) if r["status"] == "ok"]
    if not records:
        return {"ok": False}
    r = records[0]
    d, src = r["data"], r["_path"]
    columns = ["params_bytes", "grads_bytes", "optimizer_bytes", "total_bytes"]
    table = Table(title=f"Bytes per rank, {d['size']} on {d['world_size']} ranks, fp32 with AdamW",
                  columns=["scheme", "parameters", "gradients", "optimizer state", "total"], sources=[src],
                  rows=[[Cell(row["scheme"])] + [Cell(fmt_bytes(row[c]), source=src) for c in columns]
                        for row in d["rows"]],
                  note=f"{d['params']:,} parameters, of which {d['norm_params']:,} are RMSNorm gains that FSDP "
                       "replicates; FSDP's gathered weights and all activations are left out")
    by = {row["scheme"]: row for row in d["rows"]}
    s = d["saving"]
    return {"ok": True, "table": table, "size": d["size"], "world_size": d["world_size"],
            "none": Num(fmt_bytes(by["no sharding"]["total_bytes"]), src),
            "zero1": Num(fmt_bytes(by["optimizer state sharding"]["total_bytes"]), src),
            "fsdp": Num(fmt_bytes(by["FSDP"]["total_bytes"]), src),
            "saving": Num(fmt_bytes(s["bytes"]), src), "saving_pct": fmt_pct(s["fraction_of_sharded_optimizer"]),
            "norm_params": f"{d['norm_params']:,}"}


def build(ctx) -> dict:
    return {**_accounting(ctx), "b": forward_pass(ctx), "needs_b": NEEDS_B}


def skip_reason(ctx) -> str:
    return "no fsdp_accounting grid is configured for this run"
