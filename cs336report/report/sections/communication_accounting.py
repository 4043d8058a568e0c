"""communication_accounting: the XXL memory and communication arithmetic, read from its record
(results/communication_accounting/xxl.json, computed by cs336report.accounting.distributed).
The answer prints each derivation line with its numbers; the evidence lists every line and the
setting."""

from __future__ import annotations

import math

from ..tables import Cell, Num, Table, sig

EXPERIMENTS = ("communication_accounting",)


def fmt_value(value, unit: str) -> str:
    """A derivation's value with its unit: bytes also in decimal GB (the handout's unit)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if unit == "B":
        return f"{value:,.0f} B = {value / 1e9:,.1f} GB" if value >= 1e9 else f"{value:,.0f} B = {value / 1e6:,.2f} MB"
    if unit.startswith("s"):
        return f"{value:.4g} {unit}"
    text = f"{value:,.0f}" if float(value).is_integer() else sig(value, 4)
    return f"{text} {unit}".strip()


def fmt_short(value, unit: str) -> str:
    """The value for running text: bytes in decimal GB or MB only."""
    if unit == "B" and value is not None:
        return f"{value / 1e9:,.1f} GB" if value >= 1e9 else f"{value / 1e6:,.2f} MB"
    return fmt_value(value, unit)


def _steps(steps: list[dict], source: str | None = None) -> list[dict]:
    """The derivation's lines with their values formatted, each linked to ``source``, the record."""
    return [{**s, "value_text": Num(fmt_value(s["value"], s["unit"]), source),
             "short": Num(fmt_short(s["value"], s["unit"]), source)} for s in steps]


def _by_name(steps: list[dict]) -> dict:
    return {s["name"]: s for s in steps}


def build(ctx) -> dict:
    records = [r for r in ctx.records("communication_accounting") if r["status"] == "ok"]
    if not records:
        return {"ok": False}
    r = records[0]
    d = r["data"]
    letters = ctx.edition.problem("communication_accounting").subquestions  # the parts of the record
    parts = {k: _steps(d[k], r["_path"]) for k in letters}
    rows = [[Cell(f"({k})"), Cell(s["name"]), Cell(s["formula"]), Cell(s["substituted"]), Cell(s["value_text"])]
            for k in letters for s in parts[k]]
    table = Table(title="Every line of the derivation", columns=["part", "quantity", "formula", "with numbers", "value"],
                  rows=rows, sources=[r["_path"]],
                  note="GB = 10⁹ bytes, the unit of the handout's 80 GB and 95 GB; tokens count the batch "
                       "(sequences × sequence length)")
    setting = Table(title="Setting", columns=["key", "value"], sources=[r["_path"]],
                    rows=[[Cell(k), Cell(f"{v:,}" if isinstance(v, int) else f"{v:.4g}")] for k, v in d["setting"].items()],
                    note="the handout's XXL model and hardware; tokens is ours (the handout leaves the batch open)")
    a, b, c, dd = (_by_name(parts[k]) for k in letters)
    return {"ok": True, "parts": parts, "setting": d["setting"], "table": table,
            "setting_table": setting, "a": a, "b": b, "c": c, "d": dd,
            "fits": b.get("smallest N_FSDP", {}).get("value") is not None}


def headline(data: dict) -> list[str]:
    """The summary's clauses, in its answer's words: (a) the devices, (b) N_FSDP, (c) the batch."""
    if not data.get("ok"):
        return []
    a, b, c = data["a"], data["b"], data["c"]
    return [f"The fp32 master weights, accumulated gradients and AdamW state take "
            f"{a['weights + gradients + optimizer state']['short']}, as much as "
            f"{a['H100s for these (80 GB each)']['short']} H100s of 80 GB hold",
            f"it falls below one TPU v5p's 95 GB from N_FSDP = {b['smallest N_FSDP']['short']}" if data["fits"]
            else "no N_FSDP fits",
            f"the forward pass is compute bound from {c['per-device batch B*/N']['value_text']} a device, so "
            f"{c['per-device batch, whole tokens']['value_text']} a device"]
