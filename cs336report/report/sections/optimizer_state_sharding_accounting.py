"""optimizer_state_sharding_accounting: memory and time per rank of data-parallel AdamW training
with and without optimizer-state sharding, ZeroRedundancyOptimizer as the reference row, and how
the scheme differs from ZeRO stage 1 in memory and bytes sent (from the records' own counts). With a
student checkout, the student's sharded optimizer (get_sharded_optimizer) is a row beside ours; one
that is not implemented is a row that says so."""

from __future__ import annotations

import math

import pandas as pd

from ...records.shapes import phase_stats, typed
from ..tables import STATUS_TEXT, Cell, Num, Table, fmt_bytes, fmt_mean_std, fmt_pct, sig, status_cell, with_source

EXPERIMENTS = ("optimizer_state_sharding_accounting",)
LABELS = {"adamw": "AdamW, not sharded", "sharded": "ShardedOptimizer (ours)",
          "student": "sharded optimizer (yours)", "zero": "ZeroRedundancyOptimizer"}
ORDER = ("adamw", "sharded", "student", "zero")
STUDENT_ADAPTER = "get_sharded_optimizer"
STATE_GOAL = 0.05  # measured state saving per rank within 5 % of the analytic one
TIME_GOAL = 0.10  # our time per iteration within 10 % of ZeroRedundancyOptimizer's


def _peak(mem: dict | None, key: str = "peak"):
    return mem.get(key) if isinstance(mem, dict) else None


def frame(records: list[dict]) -> pd.DataFrame:
    """One row per rank of every ok record."""
    rows = []
    for r in records:
        if r["status"] != "ok":
            continue
        d, c = r["data"], r["config"]
        for k in d["ranks"]:
            last = k["memory_steps"][-1]
            rows.append({
                "optimizer": c["optimizer"], "rank": k["rank"], "size": c["size"], "context": c["context"],
                "world": d["world_size"], "backend": d["backend"], "global_batch": d["global_batch"],
                "batch_per_rank": d["batch_per_rank"], "params": d["params"], "owned": k["owned_params"],
                "after_init_peak": _peak(k["memory_after_init"]),
                "before_step_peak": _peak(last["before_step"]), "before_step_current": _peak(last["before_step"], "current"),
                "after_step_peak": _peak(last["after_step"]), "after_step_current": _peak(last["after_step"], "current"),
                "state_allocated": k.get("state_allocated_first_step"),
                **{f"t_{n}": v for n, v in k["tensors"].items()},
                "mean_s": k["stats_s"]["mean"], "std_s": k["stats_s"]["std"], "median_s": k["stats_s"]["median"],
                "noisy": k["stats_s"]["noisy"], "measured_s": k["times_s"]["measured_s"],
                "optimizer_s": phase_stats(k["phase_stats_s"], "optimizer_step").mean,
                "all_reduce_s": phase_stats(k["phase_stats_s"], "all_reduce").mean,
                "forward_backward_s": phase_stats(k["phase_stats_s"], "forward_backward").mean,
                "issued_all_reduce": k["issued_bytes"]["all_reduce"], "issued_broadcast": k["issued_bytes"]["broadcast"],
                "issued_broadcast_owned": k["issued_bytes"]["broadcast_owned"], "checksum": k["param_checksum"],
                "analytic": d["analytic"], "source": r["_path"],
            })
    return pd.DataFrame(rows)


def _b(x, source: str | None = None) -> str:
    """Bytes in their unit; a measured value links to ``source``, the record it comes from."""
    return Num(fmt_bytes(x), source) if x is not None and x == x else "–"


def _source(g: pd.DataFrame) -> str | None:
    """The one record of an optimizer's rows (its ranks), or None where they come from several."""
    sources = set(g["source"])
    return sources.pop() if len(sources) == 1 else None


def memory_table(df: pd.DataFrame) -> Table:
    """One row per optimizer: each number the largest over its ranks (they differ by a shard's few bytes)."""
    rows = []
    for opt in [o for o in ORDER if o in set(df["optimizer"])]:
        g = df[df["optimizer"] == opt]
        a = g["analytic"].iloc[0]
        state_expected = a[{"adamw": "unsharded", "sharded": "sharded", "student": "sharded",
                            "zero": "zero1"}[opt]]["optimizer_state"]
        top = {col: g[col].max() for col in ("after_init_peak", "before_step_peak", "after_step_peak", "t_parameters",
                                             "t_gradients", "t_optimizer_state", "t_saved_activations")}
        same = _b(top["t_parameters"]) == _b(top["t_gradients"])
        src = _source(g)  # every number of the row is this record's (its ranks' largest, its analytic counts)
        rows.append([Cell(LABELS[opt])] + [
            with_source(c, src) for c in (
                Cell(_b(top["after_init_peak"])), Cell(_b(top["before_step_peak"])), Cell(_b(top["after_step_peak"])),
                Cell(_b(top["t_parameters"]) if same else f"{_b(top['t_parameters'])} / {_b(top['t_gradients'])}"),
                Cell(f"{_b(top['t_optimizer_state'])} ({_b(state_expected)})"),
                Cell(f"{_b(top['t_saved_activations'])} ({_b(a['saved_activations'] + a['logits'])})"))])
    ranks = int(df.groupby("optimizer")["rank"].nunique().max())
    return Table(title="Peak allocated per rank and what it holds",
                 columns=["optimizer", "after model init", "before step", "after step", "parameters, gradients (each)",
                          "optimizer state (analytic)", "saved activations (analytic)"],
                 rows=rows, sources=sorted(set(df["source"])),
                 note=f"each number the largest of the {ranks} ranks'; "
                      "peak allocated: torch.cuda.max_memory_allocated, reset before each region (model construction; "
                      "forward, backward and gradient all-reduce; the optimizer step), in the last measured step; "
                      "parts: bytes of the tensors themselves; analytic: optimizer state 8 B per parameter (÷ world "
                      "size when sharded, as equal shards), saved activations by the reference architecture's count "
                      "(cs336report.accounting.saved_activation_bytes) plus the fp32 logits, which the loss keeps "
                      "for backward")


def time_table(df: pd.DataFrame, missing: list[dict] = ()) -> Table:
    """Time per iteration per optimizer and rank; ``missing``: the student's cell that did not run
    (``status``, ``error``), a row of its own."""
    rows = []
    for opt in [o for o in ORDER if o in set(df["optimizer"])]:
        for _, r in df[df["optimizer"] == opt].sort_values("rank").iterrows():
            rows.append([Cell(LABELS[opt]), Cell(str(r["rank"])), Cell(fmt_mean_std(r["mean_s"], r["std_s"], 1e-3)),
                         Cell(sig(r["median_s"] * 1e3)), Cell(sig(r["forward_backward_s"] * 1e3)),
                         Cell(sig(r["all_reduce_s"] * 1e3)), Cell(sig(r["optimizer_s"] * 1e3)),
                         Cell("noisy" if r["noisy"] else "")])
    for m in missing:
        rows.append([Cell(LABELS["student"]), Cell("–"), status_cell(m["status"]), Cell(m["error"] or "", m["status"])]
                    + [Cell("–")] * 4)
    return Table(title="Time per iteration", columns=["optimizer", "rank", "mean ± std", "median",
                                                      "forward + backward, mean", "gradient all-reduce, mean",
                                                      "optimizer step, mean", ""],
                 units=["", "", "ms", "ms", "ms", "ms", "ms", ""], rows=rows, sources=sorted(set(df["source"])),
                 note="each step synchronized, and each phase inside it; the optimizer step includes the "
                      "broadcast of the updated parameters where the state is sharded")


def comms_table(df: pd.DataFrame) -> Table:
    a = df.iloc[0]["analytic"]
    issued = {opt: g.iloc[0] for opt, g in df[df["rank"] == 0].groupby("optimizer")}
    rows = []
    for key, label in (("unsharded", LABELS["adamw"]), ("sharded", LABELS["sharded"] + " and ZeroRedundancyOptimizer"),
                       ("zero1", "ZeRO stage 1 (Rajbhandari et al. 2020)")):
        m = a[key]
        total = m["parameters"] + m["gradients"] + m["optimizer_state"]
        rows.append([Cell(label), Cell(_b(m["parameters"])), Cell(_b(m["gradients"])), Cell(_b(m["optimizer_state"])),
                     Cell(_b(total)), Cell(_b(m["sent"])), Cell(m["collectives"])])
    note = ("per rank, fp32 with AdamW, P = {:,} parameters on {} ranks; sent: ring collectives, all-reduce 2·(N−1)/N of "
            "the buffer, reduce-scatter, all-gather and a broadcast of 1/N of it (N−1)/N").format(int(df.iloc[0]["params"]),
                                                                                              int(df.iloc[0]["world"]))
    if "sharded" in issued:
        s = issued["sharded"]
        note += (f"; issued by our rank 0 each step: all-reduce of {_b(s['issued_all_reduce'])}, broadcasts of "
                 f"{_b(s['issued_broadcast'])} of which it owns {_b(s['issued_broadcast_owned'])}")
    return Table(title="Memory and communication per rank: data parallel, sharded state, ZeRO stage 1",
                 columns=["scheme", "parameters", "gradients", "optimizer state", "total", "sent per step", "collectives"],
                 rows=rows, sources=sorted(set(df["source"])), note=note)


def analysis(df: pd.DataFrame) -> dict:
    out: dict = {"cuda": bool(df["after_step_peak"].notna().any()), "sharded": None, "zero": None, "vs_zero": None,
                 "vs_adamw": None, "state_full": None, "student": None, "student_vs_ours": None}
    first = df.iloc[0]
    out.update(size=first["size"], context=int(first["context"]), world=int(first["world"]),
               global_batch=int(first["global_batch"]), batch_per_rank=int(first["batch_per_rank"]),
               backend=first["backend"], params=f"{int(first['params']):,}")
    by = {opt: g.sort_values("rank") for opt, g in df.groupby("optimizer")}
    a = first["analytic"]
    src = {opt: _source(g) for opt, g in by.items()}
    out["parameters"] = _b(first["t_parameters"], first["source"])
    out["gradients"] = _b(first["t_gradients"], first["source"])
    out["activations"] = _b(first["t_saved_activations"], first["source"])
    out["activations_analytic"] = _b(a["saved_activations"] + a["logits"], first["source"])
    if "adamw" in by:
        out["state_full"] = _b(by["adamw"]["t_optimizer_state"].max(), src["adamw"])
    for opt in ("sharded", "zero", "student"):
        if opt in by and "adamw" in by:
            full = by["adamw"]["t_optimizer_state"].values
            mine = by[opt]["t_optimizer_state"].values
            saving = [f - m for f, m in zip(full, mine)]
            expected = a["unsharded"]["optimizer_state"] - a["sharded"]["optimizer_state"]
            worst = max(abs(s - expected) / expected for s in saving)
            out[opt] = {"state": _b(max(mine), src[opt]), "saving": _b(min(saving)), "expected": _b(expected),
                        "deviation": fmt_pct(worst), "goal_met": bool(worst <= STATE_GOAL)}
            if out["cuda"]:
                allocated = by[opt]["state_allocated"].dropna()
                out[opt].update(
                    allocated=_b(allocated.max()) if len(allocated) else "–",
                    after_step=_b(by[opt]["after_step_peak"].max(), src[opt]),
                    after_step_full=_b(by["adamw"]["after_step_peak"].max(), src["adamw"]),
                    before_step=_b(by[opt]["before_step_peak"].max(), src[opt]),
                    before_step_full=_b(by["adamw"]["before_step_peak"].max(), src["adamw"]),
                    after_init=_b(by[opt]["after_init_peak"].max(), src[opt]),
                    # what is allocated after initialization besides the parameters themselves
                    after_init_other=_b((by[opt]["after_init_peak"] - by[opt]["t_parameters"]).max()),
                    # what the optimizer step allocates on top of what is live before it
                    step_extra=_b((by[opt]["after_step_peak"] - by[opt]["before_step_current"]).max(), src[opt]),
                    step_extra_full=_b((by["adamw"]["after_step_peak"] - by["adamw"]["before_step_current"]).max(),
                                       src["adamw"]))
    times = {opt: g.loc[g["rank"] == 0].iloc[0] for opt, g in by.items()}
    out["times"] = {opt: {"mean": Num(sig(r["mean_s"] * 1e3), r["source"]),
                          "std": Num(sig(r["std_s"] * 1e3, 2), r["source"]),
                          "optimizer": Num(sig(r["optimizer_s"] * 1e3), r["source"])} for opt, r in times.items()}
    if "sharded" in times and "zero" in times:
        ratio = times["sharded"]["mean_s"] / times["zero"]["mean_s"]
        out["vs_zero"] = {"ratio": sig(ratio), "pct": fmt_pct(ratio - 1), "apart": fmt_pct(abs(ratio - 1)),
                          "slower": bool(ratio > 1),
                          "goal_met": bool(ratio - 1 <= TIME_GOAL)}
    if "student" in times and "sharded" in times:
        ratio = times["student"]["mean_s"] / times["sharded"]["mean_s"]
        out["student_vs_ours"] = {"ratio": sig(ratio)}
    if "sharded" in times and "adamw" in times:
        change = times["sharded"]["mean_s"] / times["adamw"]["mean_s"] - 1
        # an ordering is stated only where the means differ by more than their combined spread
        spread = math.hypot(times["sharded"]["std_s"], times["adamw"]["std_s"])
        out["vs_adamw"] = {"pct": fmt_pct(abs(change)), "slower": bool(change > 0),
                           "within_spread": bool(abs(times["sharded"]["mean_s"] - times["adamw"]["mean_s"]) <= spread)}
        # where the difference lies: the optimizer step (update and broadcast) or forward and backward
        parts = {k: times["sharded"][col] - times["adamw"][col] for k, col in
                 (("step", "mean_s"), ("optimizer", "optimizer_s"), ("forward_backward", "forward_backward_s"))
                 if times["sharded"][col] == times["sharded"][col] and times["adamw"][col] == times["adamw"][col]}
        if len(parts) == 3:
            out["vs_adamw"]["ms"] = {k: f"{v * 1e3:+.3g} ms" for k, v in parts.items()}
    out["same_weights"] = bool(all(g["checksum"].nunique() == 1 for g in by.values()))
    if "student" in by:
        out["student_same_weights"] = bool(by["student"]["checksum"].nunique() == 1)
    sent = {k: a[k]["sent"] for k in ("unsharded", "sharded", "zero1")}
    out["sent"] = {k: _b(v) for k, v in sent.items()}
    out["sent_ratio"] = sig(sent["sharded"] / sent["zero1"])
    out["zero1_state"] = _b(a["zero1"]["optimizer_state"])
    return out


def targets(out: dict) -> list[dict]:
    """The project's goals for this problem, checked on the records."""
    rows = []
    if out.get("sharded"):
        rows.append({"goal": "optimizer-state saving per rank within 5 % of the analytic one",
                     "value": out["sharded"]["deviation"], "met": out["sharded"]["goal_met"]})
    if out.get("vs_zero"):
        rows.append({"goal": "time per iteration within 10 % of ZeroRedundancyOptimizer's",
                     "value": out["vs_zero"]["pct"], "met": out["vs_zero"]["goal_met"]})
    return rows


def student_run(records: list[dict]) -> dict | None:
    """The student's cell: its status, why it did not run, the optimizer's class and whose code it is."""
    mine = [r for r in records if r["config"]["optimizer"] == "student"]
    if not mine:
        return None
    r, d = mine[0], typed(mine[0])
    return {"status": r["status"], "status_text": STATUS_TEXT.get(r["status"], r["status"]), "error": r.get("error"),
            "optimizer_class": d.optimizer_class, "provenance": d.provenance, "adapter": STUDENT_ADAPTER}


def build(ctx) -> dict:
    records = ctx.records("optimizer_state_sharding_accounting")
    df = frame(records)
    student = student_run(records)
    if df.empty:
        return {"ok": False, "student": student}
    out = analysis(df)
    missing = [student] if student and student["status"] != "ok" else []
    return {"ok": True, "analysis": out, "memory_table": memory_table(df), "time_table": time_table(df, missing),
            "comms_table": comms_table(df), "targets": targets(out), "student": student,
            "failed": [r["cell"] + ": " + (r.get("error") or r["status"]) for r in records
                       if r["status"] != "ok" and r["config"]["optimizer"] != "student"]}  # the student's: a row


def headline(data: dict) -> list[str]:
    """The summary's clauses, in its answer's words: the state a rank holds, the time against ZeRO's."""
    if not data.get("ok"):
        return []
    a = data["analysis"]
    out = []
    if a.get("sharded"):
        out.append(f"what sharding changes is the AdamW state each rank holds, {a['sharded']['state']} instead of "
                   f"{a['state_full']}")
    if a.get("vs_zero"):
        out.append(f"Ours takes {a['vs_zero']['ratio']}× ZeroRedundancyOptimizer's time")
    return out
