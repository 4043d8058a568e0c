"""memory_profiling: CUDA memory timelines, peaks, largest allocations by category, and the
analytic accounting beside them.

Reads the parse records (``memory_profiling_parse``: the parsed snapshot plus the capture's
data) and, for cells whose snapshot was not parsed, the capture records
(``memory_profiling``). Every number the template quotes is computed here.
"""

from __future__ import annotations

import math
import statistics

import pandas as pd

from ... import accounting
from ...spec import ModelSpec
from .. import answer_parts
from ..tables import Cell, Table, fmt_bytes, fmt_pct, fmt_seconds, sig, status_cell

ID = "memory_profiling"
TITLE = "memory_profiling"
EXPERIMENTS = ("memory_profiling", "memory_profiling_parse")
POINTS = 4
SUBQUESTIONS = ("a", "b", "c", "d", "e")

MODE_ORDER = ("forward_no_grad", "forward", "forward_backward", "train_step")
MODE_LABELS = {
    "forward": "forward (autograd on)",
    "forward_no_grad": "forward (no_grad)",
    "forward_backward": "forward + backward",
    "train_step": "train step (AdamW)",
}
FULL_STEP = ("train_step", "forward_backward")
CATEGORY_LABELS = {
    "Embed": "Embedding",
    "AttnProj": "Attention projections (QKV, out, RoPE)",
    "AttnScores": "Attention scores (QKᵀ, mask)",
    "Softmax": "Softmax",
    "AttnOut": "Attention output (PV)",
    "FFN": "Feed-forward (SwiGLU)",
    "Norm": "RMSNorm",
    "Block": "Block / residual",
    "LMHead": "LM head (logits)",
    "Loss": "Loss",
    "Gradient": "Gradients (backward)",
    "OptimizerState": "Optimizer (AdamW)",
    "Other": "Other",
    "Preexisting": "Live before recording",
}
PHASE_COLORS = {"forward": "#4C72B0", "backward": "#DD8452", "optimizer": "#55A868"}
DTYPES = ((4, "fp32"), (2, "bf16"), (1, "bool"), (8, "int64"))
TOP_ROWS = 10
# |bf16 - fp32| / fp32 below this reads as "no significant change" in the text.
SIGNIFICANT = 0.05
MiB = 2**20
GiB = 2**30


def skip_reason(ctx) -> str:
    if ctx.device != "cuda":
        return ("needs a CUDA device: memory snapshots come from the CUDA caching allocator "
                "(torch.cuda.memory._record_memory_history), so the CPU grid has no memory_profiling cells; "
                "the parser, tables and figures are tested on real snapshots from a GPU "
                "(tests/fixtures/snapshots/real)")
    return "memory_profiling is not configured in this grid"


# ----------------------------------------------------------------------------- tidy frame


def _label(config: dict) -> str:
    return "forward_no_grad" if config.get("grad") == "no_grad" else config.get("mode", "forward")


def frame(parse_records: list[dict], capture_records: list[dict]) -> pd.DataFrame:
    """One row per cell: its status, peaks from torch's counters and from the snapshot, and the parse."""
    rows = []
    parsed_cells = {r["cell"] for r in parse_records}
    records = [(r, (r["data"] or {}).get("capture") or {}, (r["data"] or {}).get("snapshot"),
                (r["data"] or {}).get("parse") or {}) for r in parse_records]
    records += [(r, {"status": r["status"], **(r["data"] or {})}, None, {}) for r in capture_records
                if r["cell"] not in parsed_cells]
    for r, cap, snap, parse in records:
        c = r["config"]
        peaks = cap.get("peak_memory") or {}
        snapshot_info = cap.get("snapshot") or {}
        rows.append({
            "cell": r["cell"], "status": r["status"], "error": r.get("error"),
            "implementation": c.get("implementation", "naive"), "precision": c.get("precision", "fp32"),
            "size": c.get("size", "?"), "context": int(c.get("context", 0)), "label": _label(c),
            "mode": c.get("mode", "forward"), "grad": c.get("grad", "enabled"),
            "batch": c.get("batch_size"), "model": c.get("model"),
            "saved_matrices": accounting.saved_matrices_of(cap, r.get("provenance")),
            "peak_alloc": peaks.get("allocated_bytes"), "peak_reserved": peaks.get("reserved_bytes"),
            "before": cap.get("allocated_before_bytes"), "device_bytes": cap.get("device_memory_bytes"),
            "snap": snap, "snap_peak": snap["peak"]["bytes"] if snap else None,
            "snap_reserved": snap["reserved"]["peak_bytes"] if snap else None,
            "snapshot_bytes": parse.get("file_bytes") or snapshot_info.get("bytes"),
            "dump_s": snapshot_info.get("dump_s"), "max_entries": c.get("max_entries"), "stacks": c.get("stacks"),
            "warmup": c.get("warmup_steps"), "steps": c.get("measured_steps"), "tf32": c.get("tf32"),
            "parse_s": parse.get("seconds"), "parse_rss": parse.get("peak_rss_bytes"),
            "source": r["_path"],
        })
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    df["peak"] = [a if _ok(a) else s for a, s in zip(df["peak_alloc"], df["snap_peak"])]
    df["peak_from"] = ["torch" if _ok(a) else ("snapshot" if _ok(s) else None)
                       for a, s in zip(df["peak_alloc"], df["snap_peak"])]
    df["mode_rank"] = [MODE_ORDER.index(m) if m in MODE_ORDER else 99 for m in df["label"]]
    return df.sort_values(["implementation", "precision", "context", "mode_rank"]).reset_index(drop=True)


def _nan(x) -> bool:
    return isinstance(x, float) and math.isnan(x)


def _ok(x) -> bool:
    """A measured value (not None, not NaN)."""
    return x is not None and not _nan(x)


def _unit(values) -> tuple[str, int]:
    vals = [v for v in values if _ok(v)]
    return ("GiB", GiB) if vals and max(vals) >= GiB else ("MiB", MiB)


def _num(x, scale: int) -> str:
    return sig(x / scale) if _ok(x) else "–"


def _spec(row) -> ModelSpec:
    return ModelSpec(**row["model"])


# ----------------------------------------------------------------------------- tables


def peak_table(df: pd.DataFrame, impl: str, precision: str) -> Table:
    """(b): one row per context, peak allocated and reserved per mode."""
    sub = df[(df["implementation"] == impl) & (df["precision"] == precision)]
    labels = [m for m in MODE_ORDER if m in set(sub["label"])]
    unit, scale = _unit(list(sub["peak"]) + list(sub["peak_reserved"]))
    rows = []
    for context, g in sub.groupby("context"):
        by = {r["label"]: r for _, r in g.iterrows()}
        row = [Cell(str(context))]
        for key in ("peak", "peak_reserved"):
            for label in labels:
                r = by.get(label)
                if r is None:
                    row.append(status_cell("missing"))
                elif r["status"] == "oom":
                    row.append(status_cell("oom"))
                elif r["status"] != "ok" and not _ok(r[key]):
                    row.append(status_cell(r["status"]))
                else:
                    row.append(Cell(_num(r[key], scale)))
        rows.append(row)
    columns = ["context"] + [f"peak allocated, {MODE_LABELS[m]}" for m in labels] \
        + [f"peak reserved, {MODE_LABELS[m]}" for m in labels]
    note = ("peak allocated: torch.cuda.max_memory_allocated over the recorded steps (after a reset); "
            "reserved: max_memory_reserved, the caching allocator's segments")
    if (sub["peak_from"] == "snapshot").any():
        note += "; where the capture recorded no counters, the peak is the snapshot's own"
    return Table(title=f"Peak memory by context length, {impl} implementation, {precision}",
                 columns=columns, units=["tokens"] + [unit] * (len(columns) - 1), rows=rows,
                 sources=sorted(sub["source"]), note=note)


def precision_table(df: pd.DataFrame) -> Table | None:
    """(c): fp32 against bf16 autocast, per implementation, context and mode."""
    ok = df[df["status"].isin(["ok", "oom"])]
    pairs = []
    for (impl, context, label), g in ok.groupby(["implementation", "context", "label"]):
        by = {r["precision"]: r for _, r in g.iterrows()}
        if "fp32" in by and "bf16" in by:
            pairs.append((impl, context, label, by["fp32"], by["bf16"]))
    if not pairs:
        return None
    unit, scale = _unit([p[3]["peak"] for p in pairs] + [p[4]["peak"] for p in pairs])
    rows = []
    for impl, context, label, a, b in sorted(pairs, key=lambda p: (p[0], MODE_ORDER.index(p[2]), p[1])):
        cells = [Cell(impl), Cell(MODE_LABELS[label]), Cell(str(context))]
        both = a["status"] == "ok" and b["status"] == "ok"
        cells.append(Cell(_num(a["peak"], scale)) if a["status"] == "ok" else status_cell(a["status"]))
        cells.append(Cell(_num(b["peak"], scale)) if b["status"] == "ok" else status_cell(b["status"]))
        if both:
            diff = b["peak"] - a["peak"]
            cells += [Cell(f"{'+' if diff > 0 else ''}{sig(diff / scale)}"), Cell(f"{diff / a['peak'] * 100:+.1f}")]
        else:
            cells += [Cell("–"), Cell("–")]
        rows.append(cells)
    return Table(title="Peak allocated memory, fp32 against bf16 autocast",
                 columns=["implementation", "step", "context", "fp32", "bf16 autocast", "difference", "difference"],
                 units=["", "", "tokens", unit, unit, unit, "%"], rows=rows,
                 sources=sorted({p[3]["source"] for p in pairs} | {p[4]["source"] for p in pairs}),
                 note="difference = bf16 − fp32; negative means autocast needs less memory")


def _per_step(count: int, steps: int) -> str:
    """A count over the recorded steps as a count per step: whole where it divides evenly."""
    return f"{count // steps:,}" if count % steps == 0 else sig(count / steps, 3)


def residual_table(df: pd.DataFrame) -> tuple[Table | None, list[dict]]:
    """(d): one fp32 residual-stream tensor per context, and where that size shows up in the snapshot."""
    rows, facts = [], []
    for context, g in df.groupby("context"):
        r0 = g.iloc[0]
        spec, B = _spec(r0), int(r0["batch"])
        size = accounting.residual_activation_bytes(spec, B, context, 4)
        ref = _reference_cell(g, precision="fp32")
        count = per_step = None
        where = "–"
        if ref is not None and ref["snap"]:
            hit = next((s for s in ref["snap"].get("by_size", []) if s["size"] == size), None)
            steps = ref["steps"] if _ok(ref["steps"]) else ref["snap"].get("n_steps")
            steps = max(1, int(steps or 1))
            count = hit["count"] if hit else 0
            per_step = count / steps
            if hit:
                where = ", ".join(f"{CATEGORY_LABELS.get(c, c)} {_per_step(n, steps)}" for c, n in hit["categories"].items())
        rows.append([
            Cell(str(context)), Cell(f"{B} × {context} × {spec.d_model} × 4 B"), Cell(f"{size:,}"),
            Cell(sig(size / MiB)),
            Cell("–" if per_step is None else sig(per_step, 3)),
            Cell(where if ref is not None else "–"),
            Cell("–" if ref is None else f"{MODE_LABELS[ref['label']]}, {ref['implementation']}"),
        ])
        facts.append({"context": int(context), "mib": sig(size / MiB), "bytes": f"{size:,}", "B": B,
                      "d": spec.d_model, "per_step": None if per_step is None else sig(per_step, 3), "where": where})
    if not rows:
        return None, []
    sources = sorted(df["source"])
    return Table(
        title="One fp32 residual-stream activation (batch × context × d_model × 4 bytes)",
        columns=["context", "shape × bytes", "size", "size", "allocations of exactly this size per step",
                 "by category (per step)", "cell searched"],
        units=["tokens", "", "B", "MiB", "", "", ""], rows=rows, sources=sources,
        note="size in MiB = bytes / 1024²; Q, K, V and the other projections to d_model have the same shape",
    ), facts


def _reference_cell(g: pd.DataFrame, precision: str = "fp32", labels=("forward", "train_step", "forward_backward",
                                                                           "forward_no_grad")):
    """The cell whose snapshot a question is answered from: fp32, naive first, autograd forward first."""
    cand = g[(g["precision"] == precision) & g["snap"].notna()]
    if cand.empty:
        cand = g[g["snap"].notna()]
    if cand.empty:
        return None
    for impl in ("naive", "native"):
        for label in labels:
            hit = cand[(cand["implementation"] == impl) & (cand["label"] == label)]
            if not hit.empty:
                return hit.iloc[0]
    return cand.iloc[0]


FLOAT = ("fp32", "bf16")


def named_shapes(spec: ModelSpec, B: int, T: int) -> list[tuple[str, int, tuple[str, ...], str]]:
    """Tensor shapes of this model and batch that explain allocation sizes (name, elements, dtypes, what)."""
    d, f, h, V = spec.d_model, spec.d_ff, spec.num_heads, spec.vocab_size
    return [
        ("B·T·V", B * T * V, FLOAT, "logits, their log-softmax or gradient"),
        ("B·h·T²", B * h * T * T, FLOAT, "attention scores or probabilities"),
        ("B·T·d_ff", B * T * f, FLOAT, "feed-forward hidden activation"),
        ("B·T·d", B * T * d, FLOAT, "residual-stream or projection activation"),
        ("V·d", V * d, FLOAT, "embedding or LM-head weight, its gradient or an AdamW moment"),
        ("d_ff·d", f * d, FLOAT, "feed-forward weight, its gradient or an AdamW moment"),
        ("d·d", d * d, FLOAT, "attention projection weight, its gradient or an AdamW moment"),
        ("B·h·T", B * h * T, FLOAT, "softmax row statistics"),
        ("B·T", B * T, ("fp32", "int64"), "per-token values or token ids"),
        ("T²", T * T, ("bool",), "causal mask"),
    ]


# Shapes an allocation of a category is expected to have, most likely first.
CATEGORY_SHAPES = {
    "AttnScores": ("B·h·T²", "T²", "B·h·T"), "Softmax": ("B·h·T²", "B·h·T"), "AttnOut": ("B·T·d", "B·h·T²"),
    "AttnProj": ("B·T·d",), "Norm": ("B·T·d", "B·T"), "Block": ("B·T·d",), "Embed": ("B·T·d",),
    "FFN": ("B·T·d_ff", "B·T·d"), "LMHead": ("B·T·V",), "Loss": ("B·T·V", "B·T"),
}


def explain_size(size: int, spec: ModelSpec, B: int, T: int, category: str | None = None,
                 precision: str = "bf16") -> str:
    """Which shape × dtype of the model has exactly ``size`` bytes ("–" if none).

    In an fp32 cell only fp32 (and bool / int64) tensors are considered; a size matching a
    shape the allocation's category is expected to have is given alone.
    """
    nbytes_of = {name: n for n, name in DTYPES}
    hits = []
    for name, n, dtypes, what in named_shapes(spec, B, T):
        for dtype in dtypes:
            if precision == "fp32" and dtype == "bf16":
                continue
            if n * nbytes_of[dtype] == size:
                hits.append((name, f"{name} × {dtype}: {what}"))
    preferred = [text for name, text in hits if name in CATEGORY_SHAPES.get(category or "", ())]
    if preferred:
        return preferred[0]
    return "; or ".join(text for _, text in hits) if hits else "–"


def short_operation(op: str) -> str:
    """An operator name without its C++ argument list."""
    return op.split("(", 1)[0] if "::" in op else op


def top_table(row) -> Table:
    """(e): the largest allocations of one cell, repeated ones (same size, category, call chain) merged."""
    snap, spec, B, T = row["snap"], _spec(row), int(row["batch"]), int(row["context"])
    groups: dict[tuple, dict] = {}
    for a in snap["top_allocations"]:
        key = (a["size"], a["category"], a["operation"], tuple(a["chain"][:3]))
        g = groups.setdefault(key, {**a, "count": 0, "phases": set()})
        g["count"] += 1
        g["phases"].add(a["phase"])
    unit, scale = _unit([a["size"] for a in snap["top_allocations"]])
    rows = []
    for i, g in enumerate(sorted(groups.values(), key=lambda g: (-g["size"], g["rank"]))[:TOP_ROWS], start=1):
        chain = " ← ".join(g["chain"][:3]) or "(no model frame: run by autograd or the optimizer)"
        rows.append([Cell(str(i)), Cell(sig(g["size"] / scale)), Cell(str(g["count"])),
                     Cell(CATEGORY_LABELS.get(g["category"], g["category"])), Cell(", ".join(sorted(g["phases"]))),
                     Cell(short_operation(g["operation"])), Cell(chain),
                     Cell(explain_size(g["size"], spec, B, T, g["category"], row["precision"]))])
    return Table(
        title=f"Largest allocations: {row['implementation']}, {row['precision']}, context {T}, {MODE_LABELS[row['label']]}",
        columns=["#", "size", "times in the top list", "category", "phase", "operation", "call chain (innermost first)",
                 "what it is (size matched to the model's shapes)"],
        units=["", unit, "", "", "", "", "", ""], rows=rows, sources=[row["source"]],
        note=f"the {len(snap['top_allocations'])} largest allocations of the recorded steps, identical ones merged",
    )


def category_tables(df: pd.DataFrame) -> list[Table]:
    """Max single allocation per category, fp32 against bf16, one table per implementation and mode."""
    out = []
    ok = df[df["snap"].notna()]
    for (impl, label), g in ok.groupby(["implementation", "label"]):
        contexts = sorted(set(g["context"]))
        cols, by = [], {}
        for context in contexts:
            for precision in ("fp32", "bf16"):
                hit = g[(g["context"] == context) & (g["precision"] == precision)]
                if not hit.empty:
                    by[(context, precision)] = hit.iloc[0]["snap"]["per_category"]
        pairs = [c for c in contexts if (c, "fp32") in by and (c, "bf16") in by]
        if not pairs:
            continue
        cats = [c for c in CATEGORY_LABELS if any(by[(t, p)].get(c, {}).get("max_bytes") for t in pairs
                                                   for p in ("fp32", "bf16"))]
        rows = []
        for cat in cats:
            row = [Cell(CATEGORY_LABELS[cat])]
            for t in pairs:
                a = by[(t, "fp32")].get(cat, {}).get("max_bytes", 0)
                b = by[(t, "bf16")].get(cat, {}).get("max_bytes", 0)
                row += [Cell(sig(a / MiB) if a else "–"), Cell(sig(b / MiB) if b else "–"),
                        Cell(f"{'+' if b > a else ''}{sig((b - a) / MiB)}" if a and b else "–")]
            rows.append(row)
        for t in pairs:
            cols += [f"ctx {t} fp32", f"ctx {t} bf16", f"ctx {t} Δ"]
        sources = sorted(g[g["context"].isin(pairs)]["source"])
        out.append(Table(title=f"Largest single allocation per category, {impl}, {MODE_LABELS[label]}",
                         columns=["category"] + cols, units=[""] + ["MiB"] * len(cols), rows=rows, sources=sources,
                         note="Δ = bf16 autocast − fp32; categories from the Python frames of each allocation"))
    return out


def ramp_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Per cell: median over recorded steps of the allocation rise and the fall, from the trace."""
    rows = []
    for _, r in df[df["snap"].notna()].iterrows():
        steps = [s for s in r["snap"]["ramps"]["per_step"] if s["ramp_bytes"] or s["drop_bytes"]]
        if not steps or not r["snap"]["has_time"]:
            continue
        rise = [s["ramp_us"] for s in steps]
        fall = [s["drop_us"] for s in steps]
        rows.append({
            "cell": r, "steps": len(steps),
            "rise_s": statistics.median(rise) / 1e6, "fall_s": statistics.median(fall) / 1e6,
            "rise_bytes": statistics.median([s["ramp_bytes"] for s in steps]),
            "fall_bytes": statistics.median([s["drop_bytes"] for s in steps]),
            "ramps": statistics.median([s["n_ramps"] for s in steps]),
            "drops": statistics.median([s["n_drops"] for s in steps]),
        })
    return pd.DataFrame(rows)


def ramp_table(ramps: pd.DataFrame) -> Table | None:
    if ramps.empty:
        return None
    unit, scale = _unit(list(ramps["rise_bytes"]) + list(ramps["fall_bytes"]))
    rows = []
    for _, x in ramps.iterrows():
        r = x["cell"]
        ratio = x["rise_s"] / x["fall_s"] if x["fall_s"] else math.nan
        rows.append([Cell(r["implementation"]), Cell(r["precision"]), Cell(str(r["context"])),
                     Cell(MODE_LABELS[r["label"]]), Cell(str(x["steps"])),
                     Cell(sig(x["rise_s"] * 1e3)), Cell(sig(x["fall_s"] * 1e3)), Cell(sig(ratio)),
                     Cell(sig(x["rise_bytes"] / scale)), Cell(sig(x["fall_bytes"] / scale)),
                     Cell(f"{sig(x['ramps'], 2)} / {sig(x['drops'], 2)}")])
    return Table(
        title="Rise and fall of the memory timeline per step",
        columns=["implementation", "precision", "context", "step", "steps", "rise", "fall", "rise / fall", "rise",
                 "fall", "rises / falls per step"],
        units=["", "", "tokens", "", "", "ms", "ms", "×", unit, unit, ""], rows=rows,
        sources=sorted(x["cell"]["source"] for _, x in ramps.iterrows()),
        note=("medians over the recorded steps. A rise is a run of the timeline that climbs by more than 5 % of its "
              "range without falling back by as much; a fall the reverse. Times are the allocator's event clock, "
              "so they include the host time of launching the work and recording stacks"),
    )


def accounting_rows(df: pd.DataFrame) -> list[dict]:
    out = []
    for _, r in df.iterrows():
        if r["model"] is None or r["batch"] is None:
            continue
        spec = _spec(r)
        impl = r["implementation"] if r["implementation"] in ("naive", "native") else "naive"
        pred = accounting.predicted_peak_bytes(spec, int(r["batch"]), int(r["context"]), r["mode"], r["grad"], impl,
                                               r["precision"], "foreach", r["saved_matrices"])
        measured = r["peak"] if r["status"] == "ok" else None
        out.append({"row": r, "pred": pred, "measured": measured,
                    "ratio": measured / pred["total"] if measured else None})
    return out


def accounting_table(items: list[dict]) -> Table | None:
    if not items:
        return None
    unit, scale = _unit([i["pred"]["total"] for i in items])
    rows = []
    for i in items:
        r, p = i["row"], i["pred"]
        measured = status_cell(r["status"]) if i["measured"] is None else Cell(_num(i["measured"], scale))
        rows.append([Cell(r["implementation"]), Cell(r["precision"]), Cell(str(r["context"])),
                     Cell(MODE_LABELS[r["label"]]), Cell(_num(p["parameters"], scale)),
                     Cell(_num(p["gradients"], scale)), Cell(_num(p["optimizer_state"], scale)),
                     Cell(_num(p["activations"], scale)), Cell(_num(p["logits"], scale)),
                     Cell(_num(p["total"], scale)), measured,
                     Cell("–" if i["ratio"] is None else sig(i["ratio"]))])
    return Table(
        title="Analytic accounting beside the measured peak",
        columns=["implementation", "precision", "context", "step", "weights", "gradients", "AdamW moments",
                 "saved activations", "logits (and loss tensors)", "predicted peak", "measured peak",
                 "measured / predicted"],
        units=["", "", "tokens", ""] + [unit] * 7 + ["×"], rows=rows,
        sources=sorted(i["row"]["source"] for i in items),
        note=("predicted in fp32 for every row (bf16 rows show what autocast changes against it); with a backward "
              "pass the prediction is the larger of the start of backward (weights, moments, saved activations, "
              "logits, log-softmax and its gradient) and the end of the step (16 bytes per parameter)"),
    )


def snapshot_table(df: pd.DataFrame) -> Table:
    rows = []
    unit, scale = _unit(list(df["peak"]))
    for _, r in df.iterrows():
        snap = r["snap"]
        acc = snap["accounting"] if snap else None
        check = "–" if acc is None else ("ok" if acc["ok"] else "mismatch") + (
            ", ring buffer overflowed" if acc.get("overflow_suspected") else "")
        rows.append([
            Cell(r["cell"]), status_cell(r["status"]) if r["status"] != "ok" else Cell("ok"),
            Cell(_num(r["snap_peak"], scale)), Cell(snap["peak"]["phase"] if snap else "–"),
            Cell(_num(snap["baseline"]["bytes"], scale) if snap else "–"),
            Cell(f"{snap['n_events']:,}" if snap else "–"),
            Cell(fmt_bytes(r["snapshot_bytes"]) if _ok(r["snapshot_bytes"]) else "–"),
            Cell(fmt_seconds(r["parse_s"]) if _ok(r["parse_s"]) else "–"),
            Cell(fmt_bytes(r["parse_rss"]) if _ok(r["parse_rss"]) else "–"),
            Cell(check),
        ])
    return Table(
        title="Snapshots: what each recorded and what parsing it cost",
        columns=["cell", "status", "snapshot peak", "peak in phase", "live before the recorded steps", "trace events",
                 "snapshot file", "parse time", "parse peak host memory", "accounting check"],
        units=["", "", unit, "", unit, "", "", "", "", ""], rows=rows, sources=sorted(df["source"]),
        note=("snapshot peak: the largest allocated total in the trace (requested sizes); accounting check: live "
              "before + allocations − frees equals the blocks live in the snapshot's final state; parse peak host "
              "memory: peak resident memory of the parsing process"),
    )


# ----------------------------------------------------------------------------- figures


def timeline_figure(rows: list, title: str):
    """Memory over time, one panel per cell: stacked by category, phases shaded, torch's peak dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    unit, scale = _unit([r["snap"]["peak"]["bytes"] for r in rows] + [r["peak_alloc"] for r in rows])
    fig, axes = plt.subplots(1, len(rows), figsize=(max(4.6 * len(rows), 8.0), 3.9), squeeze=False, sharey=True)
    cmap = plt.get_cmap("tab20")
    cats = list(CATEGORY_LABELS)
    colors = {c: ("#c8c8c8" if c == "Preexisting" else cmap(i % 20)) for i, c in enumerate(cats)}
    used = []
    for ax, r in zip(axes[0], rows):
        snap = r["snap"]
        tl = snap["timeline"]
        timed = bool(tl.get("t_us"))
        t0 = tl["t_us"][0] if timed and tl["t_us"] else 0
        x = [(t - t0) / 1e3 for t in tl["t_us"]] if timed else tl["x"]
        series = tl.get("by_category") or {}
        order = ["Preexisting"] + [c for c in cats if c != "Preexisting" and c in series] \
            + [c for c in series if c not in CATEGORY_LABELS]
        order = [c for c in order if c in series]
        if order:
            ax.stackplot(x, *[[v / scale for v in series[c]] for c in order], colors=[colors.get(c, "#888") for c in order],
                         linewidth=0)
            used += [c for c in order if c not in used]
        else:
            ax.plot(x, [v / scale for v in tl["y"]], color="black", linewidth=0.8)
        for p in snap["phases"]:
            if timed and p["start_us"] is not None:
                lo, hi = (p["start_us"] - t0) / 1e3, (p["end_us"] - t0) / 1e3
            else:
                lo, hi = p["start"], p["end"]
            ax.axvspan(lo, hi, color=PHASE_COLORS[p["phase"]], alpha=0.10, linewidth=0)
        starts = sorted({p["step"]: (p["start_us"] if timed else p["start"]) for p in snap["phases"]}.items())
        for step, start in starts[1:]:
            ax.axvline((start - t0) / 1e3 if timed else start, color="black", linewidth=0.6, linestyle=":")
        if _ok(r["peak_alloc"]):
            ax.axhline(r["peak_alloc"] / scale, color="crimson", linewidth=0.8, linestyle="--")
        status = "" if r["status"] == "ok" else f" — {r['status'].upper()}"
        ax.set_title(f"{MODE_LABELS[r['label']]}{status}", fontsize="medium")
        ax.set_xlabel("time since recording started (ms)" if timed else "trace event")
        ax.grid(True, alpha=0.25)
    axes[0][0].set_ylabel(f"allocated ({unit})")
    handles = [Patch(color=colors.get(c, "#888"), label=CATEGORY_LABELS.get(c, c)) for c in used]
    handles += [Patch(color=PHASE_COLORS[p], alpha=0.25, label=f"{p} phase") for p in PHASE_COLORS]
    handles.append(matplotlib.lines.Line2D([], [], color="crimson", linestyle="--", label="torch peak counter"))
    ncol = 4
    fig.suptitle(title, fontsize="medium")
    fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize="x-small", frameon=False)
    fig.tight_layout(rect=(0, 0.045 * math.ceil(len(handles) / ncol) + 0.02, 1, 1))
    return fig


# ----------------------------------------------------------------------------- analysis


def _live_before(row) -> int:
    """Bytes live before the recorded steps: the capture's counter, else the snapshot's baseline."""
    if _ok(row["before"]):
        return row["before"]
    return row["snap"]["baseline"]["bytes"] if row["snap"] else 0


def _gib(x) -> str:
    return fmt_bytes(x) if _ok(x) else "–"


def start_bytes(snap: dict) -> int:
    """Bytes allocated when the recorded steps begin: the timeline's first point, else the baseline."""
    return snap["timeline"]["y"][0] if snap["timeline"]["y"] else snap["baseline"]["bytes"]


def phase_summary(row) -> dict:
    """Where a full step's timeline peaks, and how high each phase gets above the recorded start."""
    snap = row["snap"]
    start = start_bytes(snap)
    peaks = {}
    for p in snap["phases"]:
        peaks[p["phase"]] = max(peaks.get(p["phase"], 0), p["peak_bytes"])
    return {"peak": _gib(snap["peak"]["bytes"]), "peak_phase": snap["peak"]["phase"], "start": _gib(start),
            "phase_peaks": [{"phase": k, "peak": _gib(v)} for k, v in peaks.items()]}


def analysis(df: pd.DataFrame, ramps: pd.DataFrame, acc: list[dict]) -> dict:
    out: dict = {"n_cells": len(df), "n_ok": int((df["status"] == "ok").sum()), "failed": [], "growth": [],
                 "precision_cmp": [], "ramps": []}
    for _, r in df[df["status"] != "ok"].iterrows():
        out["failed"].append({"cell": r["cell"], "status": "OOM" if r["status"] == "oom" else r["status"],
                              "error": r["error"] or ""})
    ok = df[df["status"] == "ok"]
    base = ok[ok["precision"] == "fp32"] if (ok["precision"] == "fp32").any() else ok
    base = base[base["implementation"] == "naive"] if (base["implementation"] == "naive").any() else base
    if base.empty:
        return out
    top_ctx = int(base["context"].max())
    at = {r["label"]: r for _, r in base[base["context"] == top_ctx].iterrows()}
    out["ctx"] = top_ctx
    out["impl"], out["precision"] = base.iloc[0]["implementation"], base.iloc[0]["precision"]
    # (a) stages
    full = next((at[m] for m in FULL_STEP if m in at and at[m]["snap"]), None)
    if full is not None:
        out["full"] = {"label": MODE_LABELS[full["label"]], **phase_summary(full)}
        out["full"]["start_per_param"] = sig(start_bytes(full["snap"]) / accounting.param_count(_spec(full)), 3)
    fwd = at.get("forward")
    if fwd is not None and fwd["snap"]:
        out["forward"] = phase_summary(fwd)
    nog = at.get("forward_no_grad")
    if fwd is not None and nog is not None:
        a, b = fwd["peak"] - _live_before(fwd), nog["peak"] - _live_before(nog)
        out["no_grad"] = {"grad_peak": _gib(fwd["peak"]), "nograd_peak": _gib(nog["peak"]),
                          "grad_above": _gib(a), "nograd_above": _gib(b),
                          "ratio": sig(a / b) if b > 0 else "–"}
    # (b) growth with context
    growth = []
    for label, g in base.groupby("label"):
        g = g.sort_values("context")
        if len(g) >= 2:
            lo, hi = g.iloc[0], g.iloc[-1]
            growth.append({"label": MODE_LABELS[label], "lo": int(lo["context"]), "hi": int(hi["context"]),
                           "peak_lo": _gib(lo["peak"]), "peak_hi": _gib(hi["peak"]),
                           "diff": _gib(hi["peak"] - lo["peak"]), "rank": MODE_ORDER.index(label)})
    out["growth"] = sorted(growth, key=lambda x: x["rank"])
    # (c) precision
    prec = []
    for (impl, context, label), g in ok.groupby(["implementation", "context", "label"]):
        by = {r["precision"]: r for _, r in g.iterrows()}
        if "fp32" in by and "bf16" in by and int(context) == top_ctx:
            diff = by["bf16"]["peak"] - by["fp32"]["peak"]
            rel = diff / by["fp32"]["peak"]
            prec.append({"impl": impl, "label": MODE_LABELS[label], "fp32": _gib(by["fp32"]["peak"]),
                         "bf16": _gib(by["bf16"]["peak"]), "diff": ("+" if diff > 0 else "−") + _gib(abs(diff)),
                         "pct": f"{rel * 100:+.1f} %", "significant": abs(rel) >= SIGNIFICANT,
                         "rank": MODE_ORDER.index(label)})
    out["precision_cmp"] = sorted(prec, key=lambda x: (x["impl"], x["rank"]))
    out["weight_copies"] = [w for w in (weight_copies(r) for _, r in ok.iterrows()
                                        if r["precision"] == "bf16" and int(r["context"]) == top_ctx
                                        and r["implementation"] == out["impl"] and r["snap"]) if w]
    out["significant_threshold"] = fmt_pct(SIGNIFICANT, 2)
    # (e) largest allocation
    ref = full if full is not None else (fwd if fwd is not None and fwd["snap"] else None)
    if ref is not None and ref["snap"]["top_allocations"]:
        big = ref["snap"]["top_allocations"][0]
        out["largest"] = {"size": _gib(big["size"]), "category": CATEGORY_LABELS.get(big["category"], big["category"]),
                          "what": explain_size(big["size"], _spec(ref), int(ref["batch"]), top_ctx, big["category"],
                                               ref["precision"]),
                          "phase": big["phase"], "label": MODE_LABELS[ref["label"]]}
        cats = ref["snap"]["per_category"]
        scores = cats.get("AttnScores", {}).get("max_bytes", 0)
        if scores:
            spec = _spec(ref)
            out["scores"] = {"size": _gib(scores),
                             "what": explain_size(scores, spec, int(ref["batch"]), top_ctx, "AttnScores", ref["precision"]),
                             "h": spec.num_heads}
    # rise and fall
    if not ramps.empty:
        rr = []
        for _, x in ramps.iterrows():
            r = x["cell"]
            if r["implementation"] == out["impl"] and r["precision"] == out["precision"] and int(r["context"]) == top_ctx:
                rr.append({"label": MODE_LABELS[r["label"]], "rise": fmt_seconds(x["rise_s"]),
                           "fall": fmt_seconds(x["fall_s"]),
                           "ratio": sig(x["rise_s"] / x["fall_s"]) if x["fall_s"] else "–",
                           "rank": MODE_ORDER.index(r["label"])})
        out["ramps"] = sorted(rr, key=lambda x: x["rank"])
    # accounting
    ratios = [i for i in acc if i["ratio"] is not None and i["row"]["precision"] == "fp32"]
    if ratios:
        out["acc_ratio"] = {"min": sig(min(i["ratio"] for i in ratios)), "max": sig(max(i["ratio"] for i in ratios)),
                            "n": len(ratios)}
    # parsing cost of the largest snapshot
    sized = df[df["snapshot_bytes"].notna() & df["parse_s"].notna()]
    if not sized.empty:
        big = sized.loc[sized["snapshot_bytes"].idxmax()]
        out["parse"] = {"cell": big["cell"], "bytes": fmt_bytes(big["snapshot_bytes"]),
                        "events": f"{big['snap']['n_events']:,}" if big["snap"] else "–",
                        "seconds": fmt_seconds(big["parse_s"]),
                        "rss": fmt_bytes(big["parse_rss"]) if _ok(big["parse_rss"]) else "–"}
    return out


def weight_copies(row) -> dict | None:
    """Allocations of exactly a weight matrix's size in bf16 outside backward and the optimizer:
    the casts autocast makes of the fp32 weights, per recorded step."""
    spec = _spec(row)
    d, f, V = spec.d_model, spec.d_ff, spec.vocab_size
    B, T = int(row["batch"]), int(row["context"])
    activations = {n * b for name, n, _, _ in named_shapes(spec, B, T) if name.startswith("B·") for b in (2, 4)}
    sizes = {2 * d * d, 2 * f * d, 2 * V * d} - activations  # sizes an activation could also have are left out
    count = nbytes = 0
    for s in row["snap"].get("by_size", []):
        if s["size"] in sizes:
            n = sum(k for c, k in s["categories"].items() if c not in ("Gradient", "OptimizerState"))
            count += n
            nbytes += n * s["size"]
    if not count:
        return None
    steps = row["steps"] if _ok(row["steps"]) else row["snap"].get("n_steps") or 1
    weights = sum(2 * n for n in (d * d * 4 * spec.num_layers, f * d * 3 * spec.num_layers, 2 * V * d))
    return {"label": MODE_LABELS[row["label"]], "per_step": sig(count / steps, 3), "bytes": _gib(nbytes / steps),
            "all_weights": _gib(weights), "rank": MODE_ORDER.index(row["label"])}


def settings(df: pd.DataFrame) -> list[dict]:
    def values(col):
        return ", ".join(sorted({str(v) for v in df[col] if _ok(v)})) or "–"

    return [{"label": label, "value": values(col), "handout": "", "differs": False}
            for label, col in (("warm-up steps", "warmup"), ("recorded steps", "steps"), ("batch size", "batch"),
                               ("TF32 matmuls", "tf32"), ("implementation", "implementation"),
                               ("precision", "precision"), ("max_entries", "max_entries"), ("stacks", "stacks"))]


def build(ctx) -> dict:
    df = frame(ctx.records("memory_profiling_parse"), ctx.records("memory_profiling"))
    out = {"figures": [], "peak_tables": [], "top_tables": [], "category_tables": [], "precision_table": None,
           "residual_table": None, "residual": [], "ramp_table": None, "accounting_table": None, "sizes": [],
           "formulas": {"activations": accounting.ACTIVATION_FORMULA,
                        "state": "weights 4 B, gradients 4 B, AdamW moments 8 B per parameter (16 B/parameter)"},
           "analysis": {"n_cells": 0, "failed": [], "growth": [], "precision_cmp": [], "ramps": []}}
    if df.empty:
        out["snapshot_table"] = Table(title="Snapshots", columns=["cell"], rows=[])
        out["answer"] = {}
        return out
    out["settings"] = settings(df)
    out["peak_tables"] = [peak_table(df, impl, precision)
                          for (impl, precision), _ in df.groupby(["implementation", "precision"])]
    for (impl, precision, context), g in df.groupby(["implementation", "precision", "context"]):
        rows = [r for _, r in g.iterrows() if r["snap"]]
        if rows:
            name = f"memory_timeline_{impl}_{precision}_ctx{context}"
            title = f"{impl}, {precision}, {rows[0]['size']}, context {context}"
            out["figures"].append(ctx.figure(
                name, timeline_figure(rows, title),
                f"Allocated memory over the recorded steps ({title}), one panel per step kind, stacked by the "
                "category of each allocation's frames; shaded: forward, backward and optimizer phases; dotted: a new "
                "step; dashed: torch.cuda.max_memory_allocated.",
                alt=f"Memory timeline, {title}"))
    out["precision_table"] = precision_table(df)
    out["residual_table"], out["residual"] = residual_table(df)
    for _, r in df[df["snap"].notna()].iterrows():
        if r["precision"] == "fp32" and r["implementation"] == "naive" and r["context"] == df["context"].max() \
                and r["label"] in ("forward", "train_step"):
            out["top_tables"].append(top_table(r))
    if not out["top_tables"]:
        first = df[df["snap"].notna()]
        if not first.empty:
            out["top_tables"].append(top_table(first.iloc[-1]))
    out["category_tables"] = category_tables(df)
    ramps = ramp_rows(df)
    out["ramp_table"] = ramp_table(ramps)
    acc = accounting_rows(df)
    out["accounting_table"] = accounting_table(acc)
    sizes = {}
    for _, r in df.drop_duplicates("size").iterrows():
        if r["model"]:
            spec = _spec(r)
            state = accounting.training_state_bytes(spec)
            sizes[r["size"]] = {"size": r["size"], "params": f"{accounting.param_count(spec):,}",
                                "floor": fmt_bytes(state["total"]), "weights": fmt_bytes(state["parameters"])}
    out["sizes"] = list(sizes.values())
    out["snapshot_table"] = snapshot_table(df)
    out["analysis"] = analysis(df, ramps, acc)
    out["answer"] = answer_parts.memory_profiling(ctx, df, timeline_figure, MODE_LABELS)
    return out
