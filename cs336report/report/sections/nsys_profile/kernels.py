"""nsys_profile (b)-(e): top kernels, non-GEMM kernels, the GEMM share, softmax against the matmuls."""

from __future__ import annotations

import pandas as pd

from ....accounting import transformer as accounting
from ....names.spec import ModelSpec
from ....parsers.kernels import CLASSES
from ...plots import legend_outside
from ...tables import Cell, Num, Table, fmt_count, fmt_pct, fmt_seconds, sig, status_cell
from .frames import MODE_LABELS, fb_kernels, fmt_ms, forward_kernels, forward_source, is_number, select_kernels, span

# What the forward-pass columns hold: forward-only cells, or the forward range of the training steps.
FORWARD_LABEL = {"forward": "forward only", "train_step": "forward range of the step"}

# A kernel (or class) is "non-trivial" when it takes at least this share of forward kernel time.
NON_TRIVIAL = 0.01
TOP_GAINS = 6


def top_kernel_table(cells: pd.DataFrame, kernels: pd.DataFrame) -> tuple[Table, dict]:
    rows, facts = [], []
    for (size, context), _ in cells.groupby(["size", "context"], observed=True, sort=True):
        fwd = forward_kernels(kernels, size, context)
        if fwd.empty:
            continue
        top = fwd.iloc[0]
        fb, fb_mode = fb_kernels(kernels, size, context)
        row = [Cell(str(size)), Cell(str(context)), Cell(top["short_name"]), Cell(top["class"]),
               Cell(fmt_pct(top["share"])), Cell(fmt_count(top["per_step_instances"]))]
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
            g = g.sort_values("context")
            counts = [fmt_count(c) for c in g["calls"]]  # in context order
            constant = len(set(counts)) == 1
            kernels = [{"name": name, "contexts": ", ".join(str(c) for c in k["context"])}
                       for name, k in g.groupby("name", sort=False)]
            calls.append({"size": size, "calls": counts[0] if constant else ", ".join(counts),
                          "context_list": ", ".join(str(c) for c in g["context"]), "kernels": kernels,
                          "layers": cfg.get("num_layers"), "contexts": len(g), "constant": constant})
        out["calls"] = calls
        out["calls_constant"] = all(c["constant"] for c in calls) and any(c["contexts"] > 1 for c in calls)
        moved = f[f["same"] == False]  # noqa: E712
        out["moved"] = [{"size": r["size"], "context": r["context"], "fb_top": r["fb_top"], "rank": r["fb_rank"]}
                        for _, r in moved.iterrows()]
    return table, out


def reference_cell(cells: pd.DataFrame, kernels: pd.DataFrame) -> tuple | None:
    """The cell whose kernels are listed: the smallest size at its longest context with forward kernels."""
    ok = cells[cells["status"] == "ok"]
    for size, g in ok.groupby("size", observed=True, sort=True):
        for context in sorted(g["context"], reverse=True):
            if not forward_kernels(kernels, size, context).empty:
                return size, int(context)
    return None


def non_gemm_table(kernels: pd.DataFrame, ref: tuple) -> tuple[Table, list[dict]]:
    fwd = forward_kernels(kernels, *ref)
    rest = fwd[(fwd["class"] != "gemm") & (fwd["share"] >= NON_TRIVIAL)]
    rows = [[Cell(k["short_name"]), Cell(k["class"]), Cell(fmt_pct(k["share"])),
             Cell(fmt_count(k["per_step_instances"])), Cell(fmt_seconds(k["avg_ns"] / 1e9))] for _, k in rest.iterrows()]
    table = Table(
        title=f"(c) Non-GEMM kernels with at least {fmt_pct(NON_TRIVIAL, 2)} of forward kernel time "
              f"({ref[0]}, context {ref[1]})",
        columns=["kernel", "class", "share of forward kernel time", "calls per forward pass", "average duration"],
        units=["", "", "%", "", ""], rows=rows, sources=[],
        note="Names are shortened; the result file holds the full names.")
    facts = [{"name": k["short_name"], "class": k["class"], "share": Num(fmt_pct(k["share"]), k["path"] or None)}
             for _, k in rest.head(5).iterrows()]
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
                     Cell(fmt_ms(sel["per_step_ns"].sum()))]
                    + [Cell(fmt_pct(sel.loc[c, "share"], 2) if c in sel.index else "0 %") for c in shown])
    return Table(
        title="Kernel time by class",
        columns=["size", "context", "cell", "kernel time per step"] + shown,
        units=["", "tokens", "", "ms"] + ["%"] * len(shown), rows=rows,
        sources=sorted(cells.loc[cells["status"] == "ok", "path"]),
        note="Forward cells: the forward range; training-step cells: every kernel of the step. Classes come "
             "from the kernel names (cs336report.kernels), so the softmax class holds only kernels named for a "
             "softmax (such as the loss's log-softmax); the model's hand-written softmax runs as exponential, "
             "subtraction, division, maximum and sum kernels, counted as elementwise and reduction here and "
             "within its own range in (e).")


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

    fmode = forward_source(cells)
    for (size, context), g in cells[cells["status"] == "ok"].groupby(["size", "context"], observed=True, sort=True):
        modes = set(g["mode"])
        if fmode not in modes or "train_step" not in modes:
            continue
        f, t = shares(size, context, fmode, "forward"), shares(size, context, "train_step", "step")
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
        title=f"(d) GEMM share of kernel time: {FORWARD_LABEL[fmode]} against a training step",
        columns=["size", "context", f"GEMM, {FORWARD_LABEL[fmode]}", "GEMM, training step", "change",
                 "class gaining most (points)", "optimizer_step range, training step"],
        units=["", "tokens", "%", "%", "points", "", "%"], rows=rows,
        sources=sorted(cells.loc[cells["status"] == "ok", "path"]))
    out: dict = {}
    if facts:
        f = pd.DataFrame(facts)
        change = f["train"] - f["fwd"]
        out = {"n": len(f), "n_down": int((change < 0).sum()), "fwd": span(f["fwd"], fmt_pct),
               "train": span(f["train"], fmt_pct), "change": span(100 * change, lambda x: sig(x, 2)),
               "best": f["best"].mode().iloc[0] if f["best"].notna().any() else None,
               "optimizer": span(f["optimizer"], fmt_pct),
               "forward_label": "forward-only cells" if fmode == "forward" else "forward range of each step"}
    return table, out


def gain_table(kernels: pd.DataFrame, ref: tuple) -> tuple[Table | None, list[dict]]:
    fmode = forward_source(kernels)
    fwd = select_kernels(kernels, *ref, fmode, "forward")
    step = select_kernels(kernels, *ref, "train_step", "step")
    if fwd.empty or step.empty:
        return None, []
    joined = step.set_index("name")[["short_name", "class", "share", "per_step_instances"]].join(
        fwd.set_index("name")[["share"]].rename(columns={"share": "fwd_share"}), how="left").fillna({"fwd_share": 0.0})
    joined["gain"] = joined["share"] - joined["fwd_share"]
    top = joined.sort_values("gain", ascending=False).head(TOP_GAINS)
    top = top[top["gain"] > 0]
    rows = [[Cell(k["short_name"]), Cell(k["class"]), Cell(fmt_pct(k["fwd_share"])), Cell(fmt_pct(k["share"])),
             Cell(sig(100 * k["gain"], 2)), Cell(fmt_count(k["per_step_instances"]))] for _, k in top.iterrows()]
    table = Table(
        title=f"(d) Kernels that gain share in a training step ({ref[0]}, context {ref[1]})",
        columns=["kernel", "class", f"share, {FORWARD_LABEL[fmode]}", "share, training step", "gain", "calls per step"],
        units=["", "", "%", "%", "points", ""], rows=rows, sources=[],
        note="A share of 0 in the forward column: the kernel does not run in the forward pass.")
    facts = [{"name": k["short_name"], "class": k["class"], "gain": sig(100 * k["gain"], 2),
              "new": k["fwd_share"] == 0} for _, k in top.head(3).iterrows()]
    return table, facts


# The option of parse-nsys that gives a profile parsed without its run's record the batch size (e)'s FLOPs need.
BATCH_OPTION = "--batch-size"


def attention_table(cells: pd.DataFrame, kernels: pd.DataFrame) -> tuple[Table, dict]:
    rows, facts, unknown = [], [], []  # unknown: cells whose batch size, so FLOPs, the records do not hold
    for _, r in cells[(cells["status"] == "ok")].iterrows():
        if r["mode"] != "forward" and not cells[(cells["size"] == r["size"]) & (cells["context"] == r["context"])
                                                & (cells["mode"] == "forward") & (cells["status"] == "ok")].empty:
            continue  # the forward-only cell of this size and context answers (e)
        pick = lambda rng: select_kernels(kernels, r["size"], r["context"], r["mode"], rng)  # noqa: E731
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
        if matmul_ns <= 0:
            continue
        time_ratio = soft_ns / matmul_ns
        times = [Cell(str(r["size"])), Cell(str(r["context"])), Cell(fmt_ms(mm_scores)), Cell(fmt_ms(mm_value)),
                 Cell(fmt_ms(matmul_ns)), Cell(fmt_ms(soft_ns)), Cell(sig(time_ratio))]
        fact = {"size": str(r["size"]), "context": int(r["context"]), "time_ratio": time_ratio}
        if r["model"]:
            fact["soft_kernels"] = soft["per_step_instances"].sum() / ModelSpec(**r["model"]).num_layers
        if not r["model"] or not is_number(r["batch"]):  # parsed without its run's record and --batch-size
            rows.append(times + [Cell("–")] * 4)
            unknown.append({**fact, "no_batch": not is_number(r["batch"])})
            continue
        spec = ModelSpec(**r["model"])
        flops = accounting.attention_flops(spec, int(r["batch"]), int(r["context"]))
        matmul_flops = flops["attention_scores"] + flops["attention_value"]
        flop_ratio = flops["softmax"] / matmul_flops
        matmul_rate, soft_rate = matmul_flops / matmul_ns * 1e-3, flops["softmax"] / soft_ns * 1e-3  # TFLOP/s
        rows.append(times + [Cell(sig(flop_ratio)), Cell(sig(time_ratio / flop_ratio)), Cell(sig(matmul_rate)),
                             Cell(sig(soft_rate))])
        facts.append({**fact, "flop_ratio": flop_ratio, "per_flop": time_ratio / flop_ratio,
                      "matmul_rate": matmul_rate, "soft_rate": soft_rate})
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
        out = {"n": len(f), "time": span(f["time_ratio"], sig), "flop": span(f["flop_ratio"], sig),
               "per_flop": span(f["per_flop"], sig), "matmul_rate": span(f["matmul_rate"], sig),
               "soft_rate": span(f["soft_rate"], lambda x: sig(x, 2)),
               "soft_kernels": span(f["soft_kernels"], fmt_count)}
    elif unknown:  # the times alone
        f = pd.DataFrame(unknown)
        out = {"n": len(f), "time": span(f["time_ratio"], sig)}
    no_batch = sum(u["no_batch"] for u in unknown)
    if no_batch:
        out["no_batch"] = {"n": no_batch, "option": BATCH_OPTION}
    return table, out


def class_figure(classes: pd.DataFrame, cells: pd.DataFrame):
    """Stacked shares of kernel time by class, forward only and training step, one bar per size and context."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # panels: (mode, range) -- the forward pass (of forward-only cells, else the steps' forward range), the step
    fmode = forward_source(cells)
    panels = [(m, r) for m, r in ((fmode, "forward"), ("train_step", "step")) if m in set(cells["mode"])]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 0.5 + 0.32 * max(4, cells[["size", "context"]]
                             .drop_duplicates().shape[0])), squeeze=False, sharey=True)
    shown = [c for c in CLASSES if c in set(classes["class"])]
    colors = dict(zip(CLASSES, plt.get_cmap("tab10").colors))
    order = cells[["size", "context"]].drop_duplicates().sort_values(["size", "context"])
    labels = [f"{s} / {c}" for s, c in zip(order["size"], order["context"])]
    for ax, (mode, rng) in zip(axes[0], panels):
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
        ax.set_title({"forward": "forward pass", "step": "training step"}[rng]
                     + (" (its forward range)" if (mode, rng) == ("train_step", "forward") else ""))
    axes[0][0].set_ylabel("size / context (tokens)")
    legend_outside(axes[0][-1], fontsize="small")
    return fig
