"""mixed_precision_accumulation: 1000 additions of 0.01 with fp32, fp16 and bf16 accumulators.

Each loop's error is split in two, both computed from the result: the error of storing the
addend in its dtype (n times the stored value's distance from 0.01), and the error of the
running sum itself (what is left: the result's distance from n times the stored addend).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from ...records.shapes import typed  # noqa: E402
from ..plots import legend_outside  # noqa: E402
from ..tables import Cell, Num, Table, fmt_pct, sig  # noqa: E402

EXPERIMENTS = ("mixed_precision_accumulation",)
SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def num(x: float, digits: int = 8) -> str:
    """A value with ``digits`` significant figures, trailing zeros dropped."""
    return format(x, f".{digits}g")


def frame(records: list[dict]) -> pd.DataFrame:
    """One tidy row per (device, loop)."""
    rows = []
    for r in records:
        if r["status"] != "ok":
            continue
        d = typed(r)
        for row in d.rows:
            rows.append({
                **{k: v for k, v in row.items() if k != "trajectory"},
                "device": d.device_type, "device_name": d.device_name or d.device_type,
                "n": d.n, "step": d.step, "trajectory": row.get("trajectory", []), "source": r["_path"],
            })
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    df["input_error"] = df["n"] * (df["addend_value"] - df["step"])  # storing the addend in its dtype
    df["sum_error"] = df["result"] - df["n"] * df["addend_value"]  # rounding of the running sum
    df["signed_error"] = df["result"] - df["expected"]
    return df


def table(df: pd.DataFrame, title: str) -> Table:
    rows = []
    for _, r in df.iterrows():
        stop = f"after {r['last_change']} additions" if r["stalled"] else "no"
        rows.append([
            Cell(r["description"]), Cell(SHORT.get(r["accumulator_dtype"], r["accumulator_dtype"])),
            Cell(SHORT.get(r["addend_dtype"], r["addend_dtype"])), Cell(num(r["addend_value"], 10)),
            Cell(num(r["result"])), Cell(num(r["expected"])), Cell(num(r["abs_error"], 3)),
            Cell(fmt_pct(r["rel_error"])), Cell(num(r["input_error"], 3)), Cell(num(r["sum_error"], 3)),
            Cell(num(r["ulp_at_result"], 3)), Cell(stop),
        ])
    return Table(
        title=title,
        columns=["loop", "accumulator", "addend", "addend as stored", "result", "expected", "absolute error",
                 "relative error", "from storing the addend", "from the running sum", "accumulator spacing at result",
                 "stops growing"],
        rows=rows, sources=sorted(set(df["source"])),
        note=f"from storing the addend: n × (stored addend − {num(df['step'].iloc[0])}); "
             "from the running sum: result − n × stored addend; "
             "the two add up to the signed error. Spacing: the gap to the next number of the accumulator's dtype.",
    )


def trajectory_plot(df: pd.DataFrame):
    """Accumulator value against the number of additions, one line per loop, and the exact sum."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    n, step = int(df["n"].iloc[0]), float(df["step"].iloc[0])
    ax.plot([0, n], [0, n * step], color="black", linestyle=":", label="exact")
    for _, r in df.iterrows():
        points = [(0, 0.0)] + [tuple(p) for p in r["trajectory"]]
        ax.plot([p[0] for p in points], [p[1] for p in points], label=r["description"])
    ax.set_xlabel("additions")
    ax.set_ylabel("accumulator value")
    ax.grid(True, alpha=0.3)
    legend_outside(ax, fontsize="small")
    return fig


def _row(g: pd.DataFrame, label: str) -> pd.Series | None:
    hit = g[g["label"] == label]
    return hit.iloc[0] if len(hit) else None


def analysis(df: pd.DataFrame) -> dict:
    """The numbers the analysis quotes, from the first device's rows (all devices when identical)."""
    g = df[df["device"] == df["device"].iloc[0]]
    n, step = int(g["n"].iloc[0]), float(g["step"].iloc[0])
    out: dict = {"n": n, "step": num(step), "expected": num(n * step)}
    ref = g[(g["accumulator_dtype"] == "float32") & (g["addend_dtype"] == "float32")]
    if len(ref):
        a = ref.iloc[0]
        out["reference"] = {"description": a["description"], "result": Num(num(a["result"]), a["source"]),
                            "abs": num(a["abs_error"], 3), "rel": fmt_pct(a["rel_error"])}
    low = g[g["accumulator_dtype"] != "float32"].sort_values("rel_error", ascending=False)
    out["low"] = [{
        "description": r["description"], "dtype": SHORT.get(r["accumulator_dtype"], r["accumulator_dtype"]),
        "result": Num(num(r["result"]), r["source"]), "rel": fmt_pct(r["rel_error"]), "abs": num(r["abs_error"], 3),
        "sum_error": num(r["sum_error"], 3), "input_error": num(r["input_error"], 3),
        "vs_reference": sig(r["abs_error"] / ref.iloc[0]["abs_error"]) if len(ref) and ref.iloc[0]["abs_error"] else None,
    } for _, r in low.iterrows()]
    out["low_sum_dominates"] = bool((low["sum_error"].abs() > low["input_error"].abs()).all())
    out["stalled"] = [{
        "description": r["description"], "dtype": SHORT.get(r["accumulator_dtype"], r["accumulator_dtype"]),
        "result": num(r["result"]), "last_change": int(r["last_change"]), "ulp": num(r["ulp_at_result"], 3),
        "half_ulp_above_step": bool(r["ulp_at_result"] / 2 > step),
    } for _, r in g[g["stalled"]].iterrows()]
    mixed = []
    c, d = _row(g, "c"), _row(g, "d")
    if c is not None and d is not None:
        out["cast_same"] = bool(c["result"] == d["result"])
    for _, r in g[(g["accumulator_dtype"] == "float32") & (g["addend_dtype"] != "float32")].iterrows():
        if r["cast_addend"] and out.get("cast_same"):
            continue  # the same numbers as the loop without the cast
        mixed.append({
            "description": r["description"], "addend": SHORT.get(r["addend_dtype"], r["addend_dtype"]),
            "stored": Num(num(r["addend_value"], 10), r["source"]), "result": Num(num(r["result"]), r["source"]),
            "abs": num(r["abs_error"], 3),
            "input_error": num(r["input_error"], 3), "sum_error": num(r["sum_error"], 3),
            "input_share": fmt_pct(abs(r["input_error"]) / max(abs(r["input_error"]) + abs(r["sum_error"]), 1e-300)),
        })
    out["mixed"] = mixed
    b = _row(g, "b")
    if b is not None and c is not None and c["abs_error"]:
        out["fp32_acc_gain"] = {"low": num(b["abs_error"], 3), "high": num(c["abs_error"], 3),
                                "ratio": Num(sig(b["abs_error"] / c["abs_error"]),
                                             b["source"] if b["source"] == c["source"] else None)}
    return out


def build(ctx) -> dict:
    df = frame(ctx.records("mixed_precision_accumulation"))
    out: dict = {"tables": [], "figures": [], "devices": [], "identical": False, "analysis": None}
    if df.empty:
        return out
    devices = list(dict.fromkeys(df["device"]))
    names = df.drop_duplicates("device").set_index("device")["device_name"].to_dict()
    out["devices"] = [f"{d} ({names[d]})" if names[d] != d else d for d in devices]
    per_device = {d: df[df["device"] == d].set_index("label")["result"] for d in devices}
    first = per_device[devices[0]]
    out["identical"] = len(devices) > 1 and all(s.equals(first) for s in per_device.values())
    if out["identical"] or len(devices) == 1:
        g = df[df["device"] == devices[0]]
        t = table(g, f"{g['n'].iloc[0]} additions of {num(g['step'].iloc[0])}, on {' and '.join(out['devices'])}")
        t.sources = sorted(set(df["source"]))
        out["tables"].append(t)
    else:
        for d, label in zip(devices, out["devices"]):
            g = df[df["device"] == d]
            out["tables"].append(table(g, f"{g['n'].iloc[0]} additions of {num(g['step'].iloc[0])}, on {label}"))
    out["figures"].append(ctx.figure(
        "mixed_precision_accumulation", trajectory_plot(df[df["device"] == devices[0]]),
        f"Accumulator value after each number of additions ({out['devices'][0]}); dotted: the exact sum.",
    ))
    out["analysis"] = analysis(df)
    return out
