"""nsys_profile: where the GPU time of a forward pass and of a training step goes, by kernel.

Reads the parsed profiles (``results/nsys_parse/<cell>.json``, experiment ``nsys_profile``)
and, for question (a), the benchmarking_script results of the same cells. Every number the
template quotes is computed here from those records:

(a) forward time under the profiler (the ``step`` range of forward-only cells) against the
    Python timer without a profiler, per size and context;
(b) the kernel with the most time in the forward pass, its calls per forward pass, and its
    place among the kernels of forward + backward (training-step cells);
(c) the non-GEMM kernels with a non-trivial share of forward time;
(d) the GEMM share of kernel time in forward-only cells against full training steps, and the
    kernels and classes that gain share;
(e) softmax against the two attention matmuls: time ratio against FLOP ratio.
"""

from __future__ import annotations

import math

import pandas as pd

from ... import accounting
from ...kernels import CLASSES
from ...model import ModelSpec
from ..tables import Cell, Table, fmt_mean_std, fmt_pct, fmt_seconds, sig, status_cell

ID = "nsys_profile"
TITLE = "nsys_profile"
EXPERIMENTS = ("nsys_profile",)

MODE_LABELS = {"forward": "forward", "forward_backward": "forward + backward", "train_step": "train step"}
# A kernel (or class) is "non-trivial" when it takes at least this share of forward kernel time.
NON_TRIVIAL = 0.01
TOP_GAINS = 6


def skip_reason(ctx) -> str:
    return "the active grid has no nsys_profile section"


def _order(records: list[dict]) -> list[str]:
    sizes = {}
    for r in records:
        m = r["config"].get("model") or {}
        sizes.setdefault(r["config"].get("size"), m.get("d_model", 0) * m.get("num_layers", 0))
    return [s for s, _ in sorted(sizes.items(), key=lambda kv: kv[1])]


def cell_frame(records: list[dict], bench: list[dict]) -> pd.DataFrame:
    """One row per profiled cell: timings, sources, checks."""
    plain = {r["cell"]: r for r in bench}
    rows = []
    for r in records:
        c, d = r["config"], r["data"] or {}
        phases = d.get("phases") or {}
        timer = (d.get("python_timer") or {}).get("stats_s") or {}
        tool = d.get("tool") or {}
        b = plain.get(r["cell"])
        b_stats = (b or {}).get("data", {}).get("stats_s") or {}
        rows.append({
            "cell": r["cell"], "size": c.get("size"), "context": c.get("context"), "mode": c.get("mode"),
            "status": r["status"], "error": r.get("error"), "source": d.get("source") or tool.get("source"),
            "activity": d.get("activity") or tool.get("activity"), "nsys_version": tool.get("nsys_version"),
            "torch_version": tool.get("torch_version"), "exact": d.get("exact", True),
            "measured_steps": d.get("measured_steps"), "warnings": d.get("warnings") or [],
            "empty_reason": d.get("empty_reason"),
            "step_wall_ns": (phases.get("step") or {}).get("wall_ns_per_step"),
            "step_kernel_ns": (phases.get("step") or {}).get("kernel_ns_per_step"),
            "forward_kernel_ns": (phases.get("forward") or {}).get("kernel_ns_per_step"),
            "timer_mean_s": timer.get("mean"), "timer_std_s": timer.get("std"),
            "plain_status": b["status"] if b else None,
            "plain_mean_s": b_stats.get("mean"), "plain_std_s": b_stats.get("std"),
            "plain_wall_s": b.get("wall_s") if b else None, "plain_path": b.get("_path") if b else None,
            "profile_wall_s": tool.get("profile_wall_s"), "export_wall_s": tool.get("export_wall_s"),
            "checks": d.get("checks") or {}, "model": c.get("model"), "batch": c.get("batch_size"),
            "path": r.get("_path", ""),
        })
    df = pd.DataFrame(rows)
    if not df.empty:
        df["size"] = pd.Categorical(df["size"], categories=_order(records), ordered=True)
        df = df.sort_values(["size", "context", "mode"]).reset_index(drop=True)
    return df


def kernel_frame(records: list[dict]) -> pd.DataFrame:
    rows = []
    for r in records:
        if r["status"] != "ok":
            continue
        c = r["config"]
        for k in (r["data"] or {}).get("kernels", []):
            rows.append({"size": c.get("size"), "context": c.get("context"), "mode": c.get("mode"), **k})
    return pd.DataFrame(rows)


def class_frame(records: list[dict]) -> pd.DataFrame:
    rows = []
    for r in records:
        if r["status"] != "ok":
            continue
        c = r["config"]
        for k in (r["data"] or {}).get("classes", []):
            rows.append({"size": c.get("size"), "context": c.get("context"), "mode": c.get("mode"), **k})
    return pd.DataFrame(rows)


def _ms(ns) -> str:
    return "–" if ns is None or (isinstance(ns, float) and math.isnan(ns)) else sig(ns / 1e6)


def _span(values, fmt) -> str:
    """``lo to hi`` of formatted values, or the one value when they agree."""
    lo, hi = fmt(min(values)), fmt(max(values))
    return lo if lo == hi else f"{lo} to {hi}"


def _count(x) -> str:
    """A call count: whole numbers without decimals, estimates with three significant figures."""
    return str(int(round(x))) if abs(x - round(x)) < 1e-6 else sig(x)


def _num(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def _key(size, context) -> tuple:
    return (str(size), int(context))


def _pick(kernels: pd.DataFrame, size, context, mode, rng) -> pd.DataFrame:
    if kernels.empty:
        return kernels
    sel = kernels[(kernels["size"].astype(str) == str(size)) & (kernels["context"] == context)
                  & (kernels["mode"] == mode) & (kernels["range"] == rng)]
    return sel.sort_values("total_ns", ascending=False)


def _forward_kernels(kernels: pd.DataFrame, size, context) -> pd.DataFrame:
    """Kernels of the forward pass: the forward-only cell if there is one, else a training step's forward range."""
    for mode in ("forward", "forward_backward", "train_step"):
        sel = _pick(kernels, size, context, mode, "forward")
        if not sel.empty:
            return sel
    return kernels.iloc[0:0]


def _fb_kernels(kernels: pd.DataFrame, size, context) -> tuple[pd.DataFrame, str | None]:
    """Kernels of forward + backward, summed per name, from a forward_backward or train_step cell."""
    for mode in ("forward_backward", "train_step"):
        sel = pd.concat([_pick(kernels, size, context, mode, r) for r in ("forward", "backward")])
        if not sel.empty and not _pick(kernels, size, context, mode, "backward").empty:
            out = (sel.groupby(["name", "short_name", "class"], as_index=False)[["total_ns", "per_step_instances"]]
                   .sum().sort_values("total_ns", ascending=False).reset_index(drop=True))
            out["share"] = out["total_ns"] / out["total_ns"].sum()
            return out, mode
    return kernels.iloc[0:0], None


# --------------------------------------------------------------------------- (a)

def timing_table(cells: pd.DataFrame) -> Table:
    rows, sources = [], []
    fwd = cells[cells["mode"] == "forward"]
    for _, r in fwd.iterrows():
        sources.append(r["path"])
        if r["plain_path"]:
            sources.append(r["plain_path"])
        head = [Cell(str(r["size"])), Cell(str(r["context"]))]
        plain = (Cell(fmt_mean_std(r["plain_mean_s"], r["plain_std_s"], 1e-3)) if r["plain_status"] == "ok"
                 else status_cell(r["plain_status"] or "missing"))
        if r["status"] != "ok" or not _num(r["step_wall_ns"]):
            rows.append(head + [plain] + [status_cell(r["status"] if r["status"] != "ok" else "missing")] * 5)
            continue
        diff = (r["step_wall_ns"] / 1e9 - r["plain_mean_s"]) / r["plain_mean_s"] if r["plain_status"] == "ok" else None
        rows.append(head + [
            plain, Cell(fmt_mean_std(r["timer_mean_s"], r["timer_std_s"], 1e-3) if _num(r["timer_mean_s"]) else "–"),
            Cell(_ms(r["step_wall_ns"])),
            Cell(f"{sig(100 * diff, 2)}" if diff is not None else "–"), Cell(_ms(r["step_kernel_ns"])),
            Cell(sig(100 * r["step_kernel_ns"] / r["step_wall_ns"]) if _num(r["step_kernel_ns"]) else "–"),
        ])
    return Table(
        title="(a) Forward pass: profiler against the Python timer",
        columns=["size", "context", "Python timer, no profiler", "Python timer, under the profiler",
                 "profiler: step range", "step range vs no profiler", "kernel time per forward",
                 "kernel time / step range"],
        units=["", "tokens", "ms", "ms", "ms", "%", "ms", "%"], rows=rows, sources=sorted(set(sources)),
        note="Python timer: mean ± std of the measured steps (benchmarking_script's cell, and the profiled run "
             "itself); step range: the profiler's mean duration of the measured steps' ranges; kernel time: "
             "the kernels' summed durations per step.")


def timing_analysis(cells: pd.DataFrame) -> dict:
    fwd = cells[(cells["mode"] == "forward") & (cells["status"] == "ok") & (cells["plain_status"] == "ok")]
    fwd = fwd[fwd["step_wall_ns"].map(_num)]
    if fwd.empty:
        return {}
    diff = (fwd["step_wall_ns"] / 1e9 - fwd["plain_mean_s"]) / fwd["plain_mean_s"]
    busy = fwd["step_kernel_ns"] / fwd["step_wall_ns"]
    worst = fwd.loc[diff.abs().idxmax()]
    lo, hi = fwd.loc[busy.idxmin()], fwd.loc[busy.idxmax()]
    return {
        "n": len(fwd), "median_diff": fmt_pct(diff.median(), 2), "max_abs_diff": fmt_pct(abs(diff.loc[worst.name]), 2),
        "worst_cell": f"{worst['size']}, context {worst['context']}",
        "n_within_5": int((diff.abs() <= 0.05).sum()),
        "busy_lo": fmt_pct(busy.min()), "busy_lo_cell": f"{lo['size']}, context {lo['context']}",
        "busy_hi": fmt_pct(busy.max()), "busy_hi_cell": f"{hi['size']}, context {hi['context']}",
        "timer_ratio_median": sig((fwd["timer_mean_s"] / fwd["plain_mean_s"]).median()),
    }


def cost_table(cells: pd.DataFrame) -> Table:
    rows = []
    for _, r in cells.iterrows():
        ratio = (r["timer_mean_s"] / r["plain_mean_s"] if r["status"] == "ok" and r["plain_status"] == "ok"
                 and _num(r["timer_mean_s"]) else None)
        rows.append([
            Cell(str(r["size"])), Cell(str(r["context"])), Cell(MODE_LABELS.get(r["mode"], r["mode"])),
            Cell(sig(r["profile_wall_s"]) if _num(r["profile_wall_s"]) else "–", r["status"]),
            Cell(sig(r["export_wall_s"]) if _num(r["export_wall_s"]) else "–"),
            Cell(sig(r["plain_wall_s"]) if _num(r["plain_wall_s"]) else "–"),
            Cell(sig(ratio) if ratio else "–"),
        ])
    return Table(
        title="Cost of profiling",
        columns=["size", "context", "mode", "profiled run", "stats export", "same cell, no profiler",
                 "step time under profiler / without"],
        units=["", "tokens", "", "s", "s", "s", "×"], rows=rows, sources=sorted(cells["path"]),
        note="Wall times of whole jobs: the profiled run includes starting the profiler and the process, building "
             "the model and writing the profile; the cell without a profiler is benchmarking_script's, which may "
             "run more steps.")


# --------------------------------------------------------------------------- (b)

def top_kernel_table(cells: pd.DataFrame, kernels: pd.DataFrame) -> tuple[Table, dict]:
    rows, facts = [], []
    for (size, context), _ in cells.groupby(["size", "context"], observed=True, sort=True):
        fwd = _forward_kernels(kernels, size, context)
        if fwd.empty:
            continue
        top = fwd.iloc[0]
        fb, fb_mode = _fb_kernels(kernels, size, context)
        row = [Cell(str(size)), Cell(str(context)), Cell(top["short_name"]), Cell(top["class"]),
               Cell(fmt_pct(top["share"])), Cell(_count(top["per_step_instances"]))]
        fact = {"size": str(size), "context": int(context), "name": top["short_name"], "class": top["class"],
                "calls": top["per_step_instances"], "share": top["share"], "same": None}
        if fb_mode:
            fb_top = fb.iloc[0]
            rank = fb.index[fb["name"] == top["name"]]
            place = int(rank[0]) + 1 if len(rank) else None
            share = fb.loc[rank[0], "share"] if len(rank) else None
            fact.update(same=fb_top["name"] == top["name"], fb_top=fb_top["short_name"], fb_rank=place)
            row += [Cell(fb_top["short_name"]), Cell("yes" if fact["same"] else "no"),
                    Cell(f"{place} ({fmt_pct(share)})" if place else "absent")]
        else:
            row += [status_cell("missing")] * 3
        rows.append(row)
        facts.append(fact)
    table = Table(
        title="(b) The kernel with the most forward time, and forward + backward",
        columns=["size", "context", "top forward kernel", "class", "share of forward kernel time",
                 "calls per forward pass", "top kernel, forward + backward", "same kernel",
                 "forward's top kernel in forward + backward: rank (share)"],
        units=["", "tokens", "", "", "%", "", "", "", ""], rows=rows,
        sources=sorted(cells.loc[cells["status"] == "ok", "path"]),
        note="Calls per forward pass: the kernel's instances in the forward range divided by the measured steps. "
             "Forward + backward: the training-step cell's forward range plus its backward pass. Names are "
             "shortened; the result files hold the full names.")
    out: dict = {}
    if facts:
        f = pd.DataFrame(facts)
        out = {"n": len(f), "n_gemm": int((f["class"] == "gemm").sum()),
               "names": sorted(set(f["name"])), "n_same": int((f["same"] == True).sum()),  # noqa: E712
               "n_compared": int(f["same"].notna().sum())}
        calls = []
        for size, g in f.groupby("size", sort=False):
            cfg = cells.loc[cells["size"].astype(str) == size, "model"].iloc[0] or {}
            counts = sorted({_count(c) for c in g["calls"]}, key=float)
            calls.append({"size": size, "calls": ", ".join(counts), "layers": cfg.get("num_layers"),
                          "contexts": len(g), "constant": len(counts) == 1})
        out["calls"] = calls
        out["calls_constant"] = all(c["constant"] for c in calls) and any(c["contexts"] > 1 for c in calls)
        moved = f[f["same"] == False]  # noqa: E712
        out["moved"] = [{"size": r["size"], "context": r["context"], "fb_top": r["fb_top"], "rank": r["fb_rank"]}
                        for _, r in moved.iterrows()]
    return table, out


# --------------------------------------------------------------------------- (c), (d)

def _reference(cells: pd.DataFrame, kernels: pd.DataFrame) -> tuple | None:
    """The cell whose kernels are listed: the smallest size at its longest context with forward kernels."""
    ok = cells[cells["status"] == "ok"]
    for size, g in ok.groupby("size", observed=True, sort=True):
        for context in sorted(g["context"], reverse=True):
            if not _forward_kernels(kernels, size, context).empty:
                return size, int(context)
    return None


def non_gemm_table(kernels: pd.DataFrame, ref: tuple) -> tuple[Table, list[dict]]:
    fwd = _forward_kernels(kernels, *ref)
    rest = fwd[(fwd["class"] != "gemm") & (fwd["share"] >= NON_TRIVIAL)]
    rows = [[Cell(k["short_name"]), Cell(k["class"]), Cell(fmt_pct(k["share"])),
             Cell(_count(k["per_step_instances"])), Cell(fmt_seconds(k["avg_ns"] / 1e9))] for _, k in rest.iterrows()]
    table = Table(
        title=f"(c) Non-GEMM kernels with at least {fmt_pct(NON_TRIVIAL, 2)} of forward kernel time "
              f"({ref[0]}, context {ref[1]})",
        columns=["kernel", "class", "share of forward kernel time", "calls per forward pass", "average duration"],
        units=["", "", "%", "", ""], rows=rows, sources=[],
        note="Names are shortened; the result file holds the full names.")
    facts = [{"name": k["short_name"], "class": k["class"], "share": fmt_pct(k["share"])} for _, k in rest.head(5).iterrows()]
    return table, facts


def class_table(classes: pd.DataFrame, cells: pd.DataFrame) -> Table:
    """Share of kernel time per class: forward-only (forward range) and full step, per cell."""
    rows = []
    shown = [c for c in CLASSES if c in set(classes["class"])] if not classes.empty else []
    for _, r in cells[cells["status"] == "ok"].iterrows():
        rng = "forward" if r["mode"] == "forward" else "step"
        sel = classes[(classes["size"].astype(str) == str(r["size"])) & (classes["context"] == r["context"])
                      & (classes["mode"] == r["mode"]) & (classes["range"] == rng)].set_index("class")
        if sel.empty:
            continue
        rows.append([Cell(str(r["size"])), Cell(str(r["context"])), Cell(MODE_LABELS.get(r["mode"], r["mode"])),
                     Cell(_ms(sel["per_step_ns"].sum()))]
                    + [Cell(fmt_pct(sel.loc[c, "share"], 2) if c in sel.index else "0 %") for c in shown])
    return Table(
        title="Kernel time by class",
        columns=["size", "context", "cell", "kernel time per step"] + shown,
        units=["", "tokens", "", "ms"] + ["%"] * len(shown), rows=rows,
        sources=sorted(cells.loc[cells["status"] == "ok", "path"]),
        note="Forward cells: the forward range; training-step cells: every kernel of the step. Classes come "
             "from the kernel names (cs336report.kernels).")


def gemm_shift_table(classes: pd.DataFrame, cells: pd.DataFrame) -> tuple[Table, dict]:
    rows, facts = [], []

    def optimizer_share(size, context) -> float:
        """Kernel time of the optimizer_step range over that of the whole training step."""
        sel = classes[(classes["size"].astype(str) == str(size)) & (classes["context"] == context)
                      & (classes["mode"] == "train_step")]
        step = sel.loc[sel["range"] == "step", "total_ns"].sum()
        return sel.loc[sel["range"] == "optimizer_step", "total_ns"].sum() / step if step else 0.0

    def shares(size, context, mode, rng) -> pd.Series:
        sel = classes[(classes["size"].astype(str) == str(size)) & (classes["context"] == context)
                      & (classes["mode"] == mode) & (classes["range"] == rng)]
        return sel.set_index("class")["share"]

    for (size, context), g in cells[cells["status"] == "ok"].groupby(["size", "context"], observed=True, sort=True):
        modes = set(g["mode"])
        if "forward" not in modes or "train_step" not in modes:
            continue
        f, t = shares(size, context, "forward", "forward"), shares(size, context, "train_step", "step")
        if f.empty or t.empty:
            continue
        gain = t.sub(f, fill_value=0.0).drop("gemm", errors="ignore").sort_values(ascending=False)
        best = gain.index[0] if len(gain) else None
        fg, tg = f.get("gemm", 0.0), t.get("gemm", 0.0)
        opt = optimizer_share(size, context)
        rows.append([Cell(str(size)), Cell(str(context)), Cell(fmt_pct(fg)), Cell(fmt_pct(tg)),
                     Cell(sig(100 * (tg - fg), 2)), Cell(f"{best} (+{sig(100 * gain[best], 2)})" if best else "–"),
                     Cell(fmt_pct(opt))])
        facts.append({"size": str(size), "context": int(context), "fwd": fg, "train": tg, "best": best,
                      "best_gain": gain[best] if best else 0.0, "optimizer": opt})
    table = Table(
        title="(d) GEMM share of kernel time: forward only against a training step",
        columns=["size", "context", "GEMM, forward only", "GEMM, training step", "change",
                 "class gaining most (points)", "optimizer_step range, training step"],
        units=["", "tokens", "%", "%", "points", "", "%"], rows=rows,
        sources=sorted(cells.loc[cells["status"] == "ok", "path"]))
    out: dict = {}
    if facts:
        f = pd.DataFrame(facts)
        change = f["train"] - f["fwd"]
        out = {"n": len(f), "n_down": int((change < 0).sum()), "fwd": _span(f["fwd"], fmt_pct),
               "train": _span(f["train"], fmt_pct), "change": _span(100 * change, lambda x: sig(x, 2)),
               "best": f["best"].mode().iloc[0] if f["best"].notna().any() else None,
               "optimizer": _span(f["optimizer"], fmt_pct)}
    return table, out


def gain_table(kernels: pd.DataFrame, ref: tuple) -> tuple[Table | None, list[dict]]:
    fwd = _pick(kernels, *ref, "forward", "forward")
    step = _pick(kernels, *ref, "train_step", "step")
    if fwd.empty or step.empty:
        return None, []
    joined = step.set_index("name")[["short_name", "class", "share", "per_step_instances"]].join(
        fwd.set_index("name")[["share"]].rename(columns={"share": "fwd_share"}), how="left").fillna({"fwd_share": 0.0})
    joined["gain"] = joined["share"] - joined["fwd_share"]
    top = joined.sort_values("gain", ascending=False).head(TOP_GAINS)
    top = top[top["gain"] > 0]
    rows = [[Cell(k["short_name"]), Cell(k["class"]), Cell(fmt_pct(k["fwd_share"])), Cell(fmt_pct(k["share"])),
             Cell(sig(100 * k["gain"], 2)), Cell(_count(k["per_step_instances"]))] for _, k in top.iterrows()]
    table = Table(
        title=f"(d) Kernels that gain share in a training step ({ref[0]}, context {ref[1]})",
        columns=["kernel", "class", "share, forward only", "share, training step", "gain", "calls per step"],
        units=["", "", "%", "%", "points", ""], rows=rows, sources=[],
        note="A share of 0 in the forward-only column: the kernel does not run in the forward pass.")
    facts = [{"name": k["short_name"], "class": k["class"], "gain": sig(100 * k["gain"], 2),
              "new": k["fwd_share"] == 0} for _, k in top.head(3).iterrows()]
    return table, facts


# --------------------------------------------------------------------------- (e)

def attention_table(cells: pd.DataFrame, kernels: pd.DataFrame) -> tuple[Table, dict]:
    rows, facts = [], []
    for _, r in cells[(cells["status"] == "ok")].iterrows():
        if r["mode"] != "forward" and not cells[(cells["size"] == r["size"]) & (cells["context"] == r["context"])
                                                & (cells["mode"] == "forward") & (cells["status"] == "ok")].empty:
            continue  # the forward-only cell of this size and context answers (e)
        pick = lambda rng: _pick(kernels, r["size"], r["context"], r["mode"], rng)  # noqa: E731
        scores, soft, value = pick("attention_scores"), pick("softmax"), pick("attention_value")
        if soft.empty:
            continue
        if not scores.empty and not value.empty:
            mm_scores = scores.loc[scores["class"] == "gemm", "per_step_ns"].sum()
            mm_value = value.loc[value["class"] == "gemm", "per_step_ns"].sum()
            matmul_ns = mm_scores + mm_value
        else:  # a user's attention function: one range around both matmuls and the softmax
            sdpa = pick("scaled_dot_product_attention")
            if sdpa.empty:
                continue
            mm_scores = mm_value = None
            matmul_ns = sdpa.loc[sdpa["class"] == "gemm", "per_step_ns"].sum()
        soft_ns = soft["per_step_ns"].sum()
        spec = ModelSpec(**r["model"])
        flops = accounting.attention_flops(spec, int(r["batch"]), int(r["context"]))
        if matmul_ns <= 0:
            continue
        time_ratio = soft_ns / matmul_ns
        matmul_flops = flops["attention_scores"] + flops["attention_value"]
        flop_ratio = flops["softmax"] / matmul_flops
        matmul_rate, soft_rate = matmul_flops / matmul_ns * 1e-3, flops["softmax"] / soft_ns * 1e-3  # TFLOP/s
        rows.append([Cell(str(r["size"])), Cell(str(r["context"])), Cell(_ms(mm_scores)), Cell(_ms(mm_value)),
                     Cell(_ms(matmul_ns)), Cell(_ms(soft_ns)), Cell(sig(time_ratio)), Cell(sig(flop_ratio)),
                     Cell(sig(time_ratio / flop_ratio)), Cell(sig(matmul_rate)), Cell(sig(soft_rate))])
        facts.append({"size": str(r["size"]), "context": int(r["context"]), "time_ratio": time_ratio,
                      "flop_ratio": flop_ratio, "per_flop": time_ratio / flop_ratio,
                      "matmul_rate": matmul_rate, "soft_rate": soft_rate,
                      "soft_kernels": soft["per_step_instances"].sum() / spec.num_layers})
    table = Table(
        title="(e) Softmax against the attention matmuls, per forward pass",
        columns=["size", "context", "QKᵀ matmul kernels", "PV matmul kernels", "both matmuls", "softmax kernels",
                 "time: softmax / matmuls", "FLOPs: softmax / matmuls", "time per FLOP: softmax / matmuls",
                 "matmuls' throughput", "softmax's throughput"],
        units=["", "tokens", "ms", "ms", "ms", "ms", "×", "×", "×", "TFLOP/s", "TFLOP/s"], rows=rows,
        sources=sorted(cells.loc[cells["status"] == "ok", "path"]),
        note=f"Times: GEMM kernels launched inside the attention_scores and attention_value ranges (for a model "
             f"with its own attention function, inside its scaled_dot_product_attention range, so only both "
             f"together), and every kernel inside the softmax range, summed over the layers of one forward pass. "
             f"FLOPs: {accounting.ATTENTION_FLOP_FORMULA}.")
    out: dict = {}
    if facts:
        f = pd.DataFrame(facts)
        out = {"n": len(f), "time": _span(f["time_ratio"], sig), "flop": _span(f["flop_ratio"], sig),
               "per_flop": _span(f["per_flop"], sig), "matmul_rate": _span(f["matmul_rate"], sig),
               "soft_rate": _span(f["soft_rate"], lambda x: sig(x, 2)),
               "soft_kernels": _span(f["soft_kernels"], _count)}
    return table, out


# --------------------------------------------------------------------------- checks

def checks_table(cells: pd.DataFrame) -> tuple[Table, dict]:
    rows = []
    bad_instances = 0
    for _, r in cells.iterrows():
        head = [Cell(str(r["size"])), Cell(str(r["context"])), Cell(MODE_LABELS.get(r["mode"], r["mode"]))]
        if r["status"] != "ok" or r["empty_reason"]:
            rows.append(head + [status_cell(r["status"]) if r["status"] != "ok" else Cell(r["empty_reason"])] * 5)
            continue
        ch = r["checks"]
        phases = ch.get("phases_over_step_wall") or {}
        outside = ch.get("kernels_outside_measured_steps") or {}
        inst = ch.get("range_instances") or {}
        wrong = [f"{k} {v['observed']}/{v['expected']}" for k, v in inst.items() if not v["ok"]]
        bad_instances += bool(wrong)
        whole = (ch.get("forward_kernel_instances") or {}).get("share_whole_per_step")
        rows.append(head + [
            Cell(fmt_pct(phases["ratio"]) if phases else "–"),
            Cell(fmt_pct(outside["share"], 2) if outside else "–"),
            Cell("all as expected" if inst and not wrong else ("; ".join(wrong) if wrong else "–")),
            Cell(fmt_pct(whole) if whole is not None else "–"),
            Cell("exact" if r["exact"] else "scaled from warm-up + measured"),
        ])
    table = Table(
        title="Sanity checks",
        columns=["size", "context", "mode", "phase ranges / step range", "kernel time outside the measured steps",
                 "range instances (observed/expected)", "forward kernel time in whole calls per step",
                 "phase tables"],
        units=["", "tokens", "", "%", "%", "", "%", ""], rows=rows, sources=sorted(cells["path"]),
        note="Phase ranges / step range: forward + backward + optimizer_step range durations over the step range "
             "(in the workflow's runs each phase range includes the synchronization that ends it). Range "
             "instances: step = measured steps, a phase = one per step, an attention range = one per layer and "
             "step. Whole calls: the share of forward kernel time in kernels whose number of calls is a multiple "
             "of the number of steps.")
    ok = cells[(cells["status"] == "ok") & cells["empty_reason"].isna()]
    ratios = [c.get("phases_over_step_wall", {}).get("ratio") for c in ok["checks"]]
    ratios = [x for x in ratios if x is not None]
    out = {"n": len(ok), "bad_instances": bad_instances, "phases": _span(ratios, fmt_pct) if ratios else None}
    return table, out


def class_figure(classes: pd.DataFrame, cells: pd.DataFrame):
    """Stacked shares of kernel time by class, forward only and training step, one bar per size and context."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = [m for m in ("forward", "train_step") if m in set(cells["mode"])]
    fig, axes = plt.subplots(1, len(modes), figsize=(5.2 * len(modes), 0.5 + 0.32 * max(4, cells[["size", "context"]]
                             .drop_duplicates().shape[0])), squeeze=False, sharey=True)
    shown = [c for c in CLASSES if c in set(classes["class"])]
    colors = dict(zip(CLASSES, plt.get_cmap("tab10").colors))
    order = cells[["size", "context"]].drop_duplicates().sort_values(["size", "context"])
    labels = [f"{s} / {c}" for s, c in zip(order["size"], order["context"])]
    for ax, mode in zip(axes[0], modes):
        rng = "forward" if mode == "forward" else "step"
        sub = classes[(classes["mode"] == mode) & (classes["range"] == rng)]
        left = [0.0] * len(order)
        for cls in shown:
            vals = []
            for s, c in zip(order["size"], order["context"]):
                v = sub[(sub["size"].astype(str) == str(s)) & (sub["context"] == c) & (sub["class"] == cls)]["share"]
                vals.append(100 * float(v.sum()) if len(v) else 0.0)
            ax.barh(range(len(order)), vals, left=left, color=colors[cls], label=cls)
            left = [a + b for a, b in zip(left, vals)]
        ax.set_yticks(range(len(order)), labels)
        ax.invert_yaxis()
        ax.set_xlim(0, 100)
        ax.set_xlabel("share of kernel time (%)")
        ax.set_title("forward pass" if mode == "forward" else "training step")
    axes[0][0].set_ylabel("size / context (tokens)")
    axes[0][-1].legend(fontsize="small", loc="lower right")
    fig.tight_layout()
    return fig


def build(ctx) -> dict:
    records = ctx.records("nsys_profile")
    cells = cell_frame(records, ctx.records("benchmarking"))
    kernels = kernel_frame(records)
    classes = class_frame(records)
    ok = cells[cells["status"] == "ok"] if not cells.empty else cells
    sources = sorted({(r["source"], r["activity"], r["nsys_version"] or r["torch_version"]) for _, r in ok.iterrows()
                      if r["source"]})
    out: dict = {
        "n_cells": len(cells), "n_ok": len(ok),
        "sources": [{"source": s, "activity": a, "version": v} for s, a, v in sources],
        "cpu": bool(len(ok)) and set(ok["activity"]) == {"cpu"},
        "failed": [{"size": str(r["size"]), "context": int(r["context"]), "mode": MODE_LABELS.get(r["mode"], r["mode"]),
                    "status": "OOM" if r["status"] == "oom" else r["status"]}
                   for _, r in cells[cells["status"] != "ok"].iterrows()] if not cells.empty else [],
        "estimated": bool(len(ok)) and not ok["exact"].all(),
        "warnings": sorted({w for ws in ok["warnings"] for w in ws}) if len(ok) else [],
        "settings": ctx.settings("nsys_profile"),
        "attention_formula": accounting.ATTENTION_FLOP_FORMULA,
        "non_trivial": fmt_pct(NON_TRIVIAL, 2),
    }
    if cells.empty or kernels.empty:
        return out
    out["timing_table"] = timing_table(cells)
    out["timing"] = timing_analysis(cells)
    out["cost_table"] = cost_table(cells)
    out["top_table"], out["top"] = top_kernel_table(cells, kernels)
    ref = _reference(cells, kernels)
    if ref:
        out["ref"] = {"size": str(ref[0]), "context": ref[1]}
        out["non_gemm_table"], out["non_gemm"] = non_gemm_table(kernels, ref)
        out["gain_table"], out["gains"] = gain_table(kernels, ref)
        ref_path = cells[(cells["size"].astype(str) == str(ref[0])) & (cells["context"] == ref[1])]["path"]
        out["non_gemm_table"].sources = sorted(ref_path)
        if out["gain_table"]:
            out["gain_table"].sources = sorted(ref_path)
    out["class_table"] = class_table(classes, cells)
    fwd_classes = classes[(classes["mode"] == "forward") & (classes["range"] == "forward")]
    if not fwd_classes.empty:
        non_gemm = 1 - fwd_classes[fwd_classes["class"] == "gemm"].groupby(["size", "context"], observed=True)["share"].sum()
        by_class = fwd_classes[fwd_classes["class"] != "gemm"].groupby("class")["share"].median().sort_values(ascending=False)
        out["non_gemm_share"] = {"span": _span(non_gemm, fmt_pct),
                                 "largest": by_class.index[0] if len(by_class) else None,
                                 "largest_median": fmt_pct(by_class.iloc[0]) if len(by_class) else None}
    out["shift_table"], out["shift"] = gemm_shift_table(classes, cells)
    out["attention_table"], out["attention"] = attention_table(cells, kernels)
    out["checks_table"], out["checks"] = checks_table(cells)
    if not classes.empty:
        out["figure"] = ctx.figure("nsys_profile_classes", class_figure(classes, ok),
                                   "Share of kernel time by class: the forward pass of forward-only cells, and the "
                                   "whole training step.")
    return out
