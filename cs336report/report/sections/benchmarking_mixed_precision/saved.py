"""(d) of benchmarking_mixed_precision: what the autograd graph keeps for backward, by role."""

from __future__ import annotations

import math

import pandas as pd

from ...tables import Cell, Table, fmt_bytes, fmt_pct, sig, status_cell
from .dtypes import LOW

ROLE_COLUMNS = (("activation", "float32", "fp32 activations"), ("activation", "low", "16-bit activations"),
                ("parameter_copy", None, "16-bit copies of parameters"), ("index", None, "integer and boolean"))


def census_frame(records: list[dict]) -> pd.DataFrame:
    rows = []
    for r in records:
        if r["status"] != "ok":
            continue
        c = r["config"]
        for case in r["data"]["cases"]:
            base = {"implementation": c["implementation"], "size": c["size"], "context": case["context"],
                    "precision": case["precision"], "status": case["status"], "source": r["_path"],
                    "after_forward": (case["allocated_after_forward_bytes"] - case["allocated_before_bytes"])
                    if case.get("allocated_after_forward_bytes") is not None else math.nan,
                    "scale": c["model"]["d_model"] * c["model"]["num_layers"]}
            if not case["groups"]:
                rows.append({**base, "op": None, "dtype": None, "role": None, "bytes": 0})
            for g in case["groups"]:
                rows.append({**base, "op": g["op"], "dtype": g["dtype"], "role": g["role"], "bytes": g["bytes"]})
    return pd.DataFrame(rows)


def _role_bytes(g: pd.DataFrame) -> dict[str, float]:
    out = {}
    for role, dtype, label in ROLE_COLUMNS:
        sel = g["role"] == role
        if dtype == "float32":
            sel &= g["dtype"] == "float32"
        elif dtype == "low":
            sel &= g["dtype"].isin(LOW)
        out[label] = float(g.loc[sel, "bytes"].sum())
    out["total"] = float(g.loc[g["role"].notna() & (g["role"] != "parameter"), "bytes"].sum())
    return out


def census_table(df: pd.DataFrame, size: str, has_alloc: bool) -> Table:
    columns = ["implementation", "context", "precision"] + [label for _, _, label in ROLE_COLUMNS] + ["total saved"]
    if has_alloc:
        columns.append("allocated by the forward")
    rows = []
    for (impl, context, precision), g in df.groupby(["implementation", "context", "precision"], sort=False):
        if g["status"].iloc[0] != "ok":
            rows.append([Cell(impl), Cell(str(context)), Cell(precision)] + [status_cell(g["status"].iloc[0])]
                        * (len(columns) - 3))
            continue
        b = _role_bytes(g)
        row = [Cell(impl), Cell(str(context)), Cell(precision)] + [Cell(fmt_bytes(b[label])) for _, _, label in ROLE_COLUMNS]
        row.append(Cell(fmt_bytes(b["total"])))
        if has_alloc:
            row.append(Cell(fmt_bytes(g["after_forward"].iloc[0])) if g["after_forward"].iloc[0] == g["after_forward"].iloc[0]
                       else status_cell("missing"))
        rows.append(row)
    return Table(title=f"Tensors kept for backward after one forward, {size}", columns=columns, rows=rows,
                 sources=sorted(set(df["source"])),
                 note="each storage counted once; parameters saved as they are are left out (they take no memory of "
                      "their own)" + ("; allocated by the forward: torch.cuda.memory_allocated after the forward "
                                      "minus before, logits included" if has_alloc else ""))


def op_changes(df: pd.DataFrame, impl: str, size: str, context: int, top: int = 6) -> pd.DataFrame:
    g = df[(df["implementation"] == impl) & (df["size"] == size) & (df["context"] == context)
           & df["role"].notna() & (df["role"] != "parameter")]
    pivot = g.pivot_table(index="op", columns="precision", values="bytes", aggfunc="sum", fill_value=0.0)
    for p in ("fp32", "bf16"):
        if p not in pivot:
            pivot[p] = 0.0
    pivot["change"] = pivot["bf16"] - pivot["fp32"]
    fp32_kept = g[(g["precision"] == "bf16") & (g["dtype"] == "float32")].groupby("op")["bytes"].sum()
    pivot["bf16_kept_fp32"] = fp32_kept.reindex(pivot.index).fillna(0.0)
    return pivot.reindex(pivot["change"].abs().sort_values(ascending=False).index).head(top)


def op_table(changes: pd.DataFrame, impl: str, size: str, context: int, sources: list[str]) -> Table:
    rows = [[Cell(op), Cell(fmt_bytes(r["fp32"])), Cell(fmt_bytes(r["bf16"])),
             Cell(("+" if r["change"] >= 0 else "−") + fmt_bytes(abs(r["change"]))), Cell(fmt_bytes(r["bf16_kept_fp32"]))]
            for op, r in changes.iterrows()]
    return Table(title=f"Largest changes by saving operation, {impl}, {size}, context {context}",
                 columns=["autograd node", "fp32 run", "bf16 run", "change", "of the bf16 run, kept in fp32"],
                 rows=rows, sources=sources,
                 note="bytes the node keeps for backward (the node that saved a storage first, walking back from the loss)")


def census_part(records: list[dict]) -> dict | None:
    df = census_frame(records)
    if df.empty:
        return None
    largest = df.sort_values("scale")["size"].iloc[-1]
    has_alloc = bool(df["after_forward"].notna().any())
    tables = [census_table(df[df["size"] == size], size, has_alloc) for size in df.sort_values("scale")["size"].unique()]
    sub = df[df["size"] == largest]
    ctx_hi = int(sub["context"].max())
    op_tables, findings = [], []
    for impl in sorted(sub["implementation"].unique()):
        g = sub[(sub["implementation"] == impl) & (sub["context"] == ctx_hi)]
        if set(g["precision"]) < {"fp32", "bf16"} or (g["status"] != "ok").any():
            continue
        changes = op_changes(df, impl, largest, ctx_hi)
        op_tables.append(op_table(changes, impl, largest, ctx_hi, sorted(set(g["source"]))))
        fp32, bf16 = _role_bytes(g[g["precision"] == "fp32"]), _role_bytes(g[g["precision"] == "bf16"])
        kept = changes[changes["bf16_kept_fp32"] > 0].sort_values("bf16_kept_fp32", ascending=False)
        up = changes[changes["change"] > 0]
        findings.append({
            "impl": impl, "size": largest, "context": ctx_hi,
            "fp32_total": fmt_bytes(fp32["total"]), "bf16_total": fmt_bytes(bf16["total"]),
            "ratio": sig(bf16["total"] / fp32["total"]) if fp32["total"] else "–",
            "copies": fmt_bytes(bf16["16-bit copies of parameters"]),
            "fp32_acts_in_bf16": fmt_bytes(bf16["fp32 activations"]),
            "fp32_acts_share": fmt_pct(bf16["fp32 activations"] / bf16["total"]) if bf16["total"] else "–",
            "kept_ops": ", ".join(kept.index[:3]),
            "up_ops": [{"op": op, "change": fmt_bytes(r["change"])} for op, r in up.head(3).iterrows()],
        })
    copies = {f["copies"] for f in findings}
    return {"tables": tables, "op_tables": op_tables, "findings": findings, "has_alloc": has_alloc,
            "copies_same": len(findings) > 1 and len(copies) == 1}
