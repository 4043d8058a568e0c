"""fsdp_accounting (2026 problem 21): (a) the bytes per rank of parameters, gradients and AdamW state
without sharding, with optimizer state sharding and with FSDP, from the fsdp_accounting record
(computed by cs336report.accounting.fsdp); (b) needs two GPUs and Nsight Systems."""

from __future__ import annotations

from ...names.handout import Hint
from ..tables import Cell, Num, Table, fmt_bytes, fmt_pct

EXPERIMENTS = ("fsdp_accounting",)
# (b): the all-gathers against the forward pass, on two GPUs under Nsight Systems
NEEDS_B = "2 GPUs and Nsight Systems"


def build(ctx) -> dict:
    records = [r for r in ctx.records("fsdp_accounting") if r["status"] == "ok"]
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
            "norm_params": f"{d['norm_params']:,}", "needs_b": NEEDS_B,
            "hint_b": Hint("", needs=f"{NEEDS_B}, and a rule for (b), which this version does not have yet")}


def skip_reason(ctx) -> str:
    return "no fsdp_accounting grid is configured for this run"
