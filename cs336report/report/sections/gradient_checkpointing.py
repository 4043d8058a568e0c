"""gradient_checkpointing (2026 problem 6): the derivation of the peak against the grouping, and the
measured peaks of each single-level grouping, read from the gradient_checkpointing record
(cs336report/experiments/gradient_checkpointing). A CPU record's peaks are the CPU allocator's."""

from __future__ import annotations

import pandas as pd

from ...accounting.checkpointing import modelled_peak
from ...records.shapes import typed
from ..tables import Cell, Num, Table, fmt_bytes, fmt_pct, sig, status_cell

EXPERIMENTS = ("gradient_checkpointing",)
# (a) is a derivation: answered from the record's derivation, or where no cell ran, from the code
ANALYTIC = {}


def frame(record: dict) -> pd.DataFrame:
    df = pd.DataFrame(record["data"]["rows"])
    df["source"] = record["_path"]
    return df


def peaks_table(df: pd.DataFrame, d: dict) -> Table:
    rows = []
    for _, r in df.iterrows():
        label = "none" if r["group"] == 0 else f"{r['group']} block{'s' if r['group'] != 1 else ''}"
        peak = (Cell(fmt_bytes(r["peak_bytes"]), source=r["source"]) if r["status"] == "ok"
                else status_cell(r["status"]))
        rows.append([Cell(label), Cell(str(r["checkpoints"])), peak, Cell(fmt_bytes(r["modelled_bytes"]))])
    where = "the CPU allocator" if d["measure"] == "cpu" else "CUDA"
    return Table(title=f"Peak memory of one forward and backward pass by group size ({where})",
                 columns=["blocks a checkpoint", "checkpoints", "measured peak", "modelled activations"],
                 rows=rows, sources=sorted(set(df["source"])),
                 note=f"measured: {d['measure_words']}; modelled: the activations the single-level model puts at "
                      "the peak (group inputs and one group's saved tensors, or every block's without checkpoints, "
                      "and those after the blocks), from the analytic bytes a block saves; parameters and "
                      "gradients are in the measured peak, not the model")


def analysis(df: pd.DataFrame, record: dict) -> dict:
    d, src = record["data"], record["_path"]
    ok = df[(df["status"] == "ok") & (df["group"] > 0)].sort_values("group")
    out: dict = {"device": "CPU" if d["measure"] == "cpu" else "GPU", "measure_words": d["measure_words"],
                 "size": record["config"]["size"], "batch": d["batch_size"], "context": d["context"],
                 "heads": d["num_heads"], "layers": d["num_layers"], "d_model": d["d_model"],
                 "r": Num(fmt_bytes(d["residual_bytes"]), src),
                 "a": Num(fmt_bytes(d["analytic"]["a_bytes"]), src),
                 "k_model": Num(sig(d["analytic"]["k_best"], 3), src),
                 # groupings that ran out of memory; group 0 is the pass without checkpoints
                 "oom": [int(g) for g in df[(df["status"] == "oom") & (df["group"] > 0)]["group"]],
                 "none_oom": bool(((df["group"] == 0) & (df["status"] == "oom")).any())}
    none = df[(df["group"] == 0) & (df["status"] == "ok")]
    if len(none):
        out["none"] = Num(fmt_bytes(none.iloc[0]["peak_bytes"]), src)
    if len(ok):
        groups = list(ok["group"])
        best = ok.loc[ok["peak_bytes"].idxmin()]
        i = groups.index(best["group"])
        out["best"] = {"group": int(best["group"]), "checkpoints": int(best["checkpoints"]),
                       "peak": Num(fmt_bytes(best["peak_bytes"]), src)}
        out["neighbours"] = [{"group": int(r["group"]), "peak": Num(fmt_bytes(r["peak_bytes"]), src),
                              "over": fmt_pct(r["peak_bytes"] / best["peak_bytes"] - 1)}
                             for _, r in ok.iloc[[j for j in (i - 1, i + 1) if 0 <= j < len(ok)]].iterrows()]
        if len(none):
            out["saving"] = fmt_pct(1 - best["peak_bytes"] / none.iloc[0]["peak_bytes"])
        # of the groupings that ran, the one the single-level model (N·r/k + a·k) puts lowest
        n, r, a = d["num_layers"], d["residual_bytes"], d["analytic"]["a_bytes"]
        out["k_model_run"] = int(min(groups, key=lambda k: modelled_peak(k, n, r, a)))
    fit = typed(record).fit or {}
    if fit.get("k_best"):
        out["k_fit"] = Num(sig(fit["k_best"], 3), src)
    return out


def build(ctx) -> dict:
    records = [r for r in ctx.records("gradient_checkpointing") if r["status"] == "ok"]
    if not records:
        return {"ok": False}
    record = records[0]
    df = frame(record)
    return {"ok": True, "table": peaks_table(df, record["data"]), "derivation": record["data"]["derivation"],
            "analysis": analysis(df, record)}


def skip_reason(ctx) -> str:
    return "no gradient_checkpointing grid is configured for this run"
