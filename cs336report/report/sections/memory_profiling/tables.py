"""memory_profiling's evidence tables: peaks, precision, residual, top allocations, ramps, snapshots."""

from __future__ import annotations

import math
import statistics

import pandas as pd

from ....accounting import transformer as accounting
from ....records.shapes import Snapshot, read_as
from ...labels import PEAK_ALLOCATED, PEAK_HOST, PEAK_RESERVED, SNAPSHOT_PEAK, legend
from ...tables import Cell, Table, fmt_bytes, fmt_seconds, sig, status_cell
from .frame import CATEGORY_LABELS, MODE_LABELS, MODE_ORDER, MiB, byte_unit, in_unit, is_measured, model_spec
from .shapes import explain_size

TOP_ROWS = 10


def peak_table(df: pd.DataFrame, impl: str, precision: str) -> Table:
    """(b): one row per context, peak allocated and reserved per mode."""
    sub = df[(df["implementation"] == impl) & (df["precision"] == precision)]
    labels = [m for m in MODE_ORDER if m in set(sub["label"])]
    unit, scale = byte_unit(list(sub["peak"]) + list(sub["peak_reserved"]))
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
                elif r["status"] != "ok" and not is_measured(r[key]):
                    row.append(status_cell(r["status"]))
                else:
                    row.append(Cell(in_unit(r[key], scale)))
        rows.append(row)
    columns = ["context"] + [f"{PEAK_ALLOCATED}, {MODE_LABELS[m]}" for m in labels] \
        + [f"{PEAK_RESERVED}, {MODE_LABELS[m]}" for m in labels]
    note = f"over the recorded steps, after a reset; {legend(PEAK_ALLOCATED, PEAK_RESERVED)}"
    if (sub["peak_from"] == "snapshot").any():
        note += f"; where the capture recorded no counters, the column gives the {SNAPSHOT_PEAK}"
    return Table(title=f"{PEAK_ALLOCATED.capitalize()} and {PEAK_RESERVED} by context length, {impl} implementation, "
                       f"{precision}",
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
    unit, scale = byte_unit([p[3]["peak"] for p in pairs] + [p[4]["peak"] for p in pairs])
    rows = []
    for impl, context, label, a, b in sorted(pairs, key=lambda p: (p[0], MODE_ORDER.index(p[2]), p[1])):
        cells = [Cell(impl), Cell(MODE_LABELS[label]), Cell(str(context))]
        both = a["status"] == "ok" and b["status"] == "ok"
        cells.append(Cell(in_unit(a["peak"], scale)) if a["status"] == "ok" else status_cell(a["status"]))
        cells.append(Cell(in_unit(b["peak"], scale)) if b["status"] == "ok" else status_cell(b["status"]))
        if both:
            diff = b["peak"] - a["peak"]
            cells += [Cell(f"{'+' if diff > 0 else ''}{sig(diff / scale)}"), Cell(f"{diff / a['peak'] * 100:+.1f}")]
        else:
            cells += [Cell("–"), Cell("–")]
        rows.append(cells)
    return Table(title=f"{PEAK_ALLOCATED.capitalize()}, fp32 against bf16 autocast",
                 columns=["implementation", "step", "context", "fp32", "bf16 autocast", "difference", "difference"],
                 units=["", "", "tokens", unit, unit, unit, "%"], rows=rows,
                 sources=sorted({p[3]["source"] for p in pairs} | {p[4]["source"] for p in pairs}),
                 note=f"{PEAK_ALLOCATED} (torch.cuda.max_memory_allocated); difference = bf16 − fp32; negative means "
                      "autocast needs less memory")


def _per_step(count: int, steps: int) -> str:
    """A count over the recorded steps as a count per step: whole where it divides evenly."""
    return f"{count // steps:,}" if count % steps == 0 else sig(count / steps, 3)


def residual_table(df: pd.DataFrame) -> tuple[Table | None, list[dict]]:
    """(d): one fp32 residual-stream tensor per context, and where that size shows up in the snapshot."""
    rows, facts = [], []
    for context, g in df.groupby("context"):
        r0 = g.iloc[0]
        spec, B = model_spec(r0), int(r0["batch"])
        size = accounting.residual_activation_bytes(spec, B, context, 4)
        ref = _reference_cell(g, precision="fp32")
        count = per_step = None
        where = "–"
        if ref is not None and ref["snap"]:
            snap = read_as(Snapshot, ref["snap"])
            hit = next((s for s in snap.by_size or [] if s["size"] == size), None)
            steps = ref["steps"] if is_measured(ref["steps"]) else snap.n_steps
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


def short_operation(op: str) -> str:
    """An operator name without its C++ argument list."""
    return op.split("(", 1)[0] if "::" in op else op


def top_table(row) -> Table:
    """(e): the largest allocations of one cell, repeated ones (same size, category, call chain) merged."""
    snap, spec, B, T = row["snap"], model_spec(row), int(row["batch"]), int(row["context"])
    groups: dict[tuple, dict] = {}
    for a in snap["top_allocations"]:
        key = (a["size"], a["category"], a["operation"], tuple(a["chain"][:3]))
        g = groups.setdefault(key, {**a, "count": 0, "phases": set()})
        g["count"] += 1
        g["phases"].add(a["phase"])
    unit, scale = byte_unit([a["size"] for a in snap["top_allocations"]])
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
    unit, scale = byte_unit(list(ramps["rise_bytes"]) + list(ramps["fall_bytes"]))
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
              "so they include the host time of launching the work and recording stacks. The rise and fall columns "
              "in bytes sum every rise and fall of a step, so a step of many small ones (a forward pass under "
              "no_grad frees each layer's temporaries as it goes) sums far more than its peak above where it began"),
    )


def snapshot_table(df: pd.DataFrame) -> Table:
    rows = []
    unit, scale = byte_unit(list(df["peak"]))
    for _, r in df.iterrows():
        snap = r["snap"]
        acc = snap["accounting"] if snap else None
        check = "–" if acc is None else ("ok" if acc["ok"] else "mismatch") + (
            ", ring buffer overflowed" if acc.get("overflow_suspected") else "")
        rows.append([
            Cell(r["cell"]), status_cell(r["status"]) if r["status"] != "ok" else Cell("ok"),
            Cell(in_unit(r["snap_peak"], scale)), Cell(snap["peak"]["phase"] if snap else "–"),
            Cell(in_unit(snap["baseline"]["bytes"], scale) if snap else "–"),
            Cell(f"{snap['n_events']:,}" if snap else "–"),
            Cell(fmt_bytes(r["snapshot_bytes"]) if is_measured(r["snapshot_bytes"]) else "–"),
            Cell(fmt_seconds(r["parse_s"]) if is_measured(r["parse_s"]) else "–"),
            Cell(fmt_bytes(r["parse_rss"]) if is_measured(r["parse_rss"]) else "–"),
            Cell(check),
        ])
    return Table(
        title="Snapshots: what each recorded and what parsing it cost",
        columns=["cell", "status", SNAPSHOT_PEAK, "phase of the snapshot peak", "live before the recorded steps",
                 "trace events", "snapshot file", "parse time", f"parse, {PEAK_HOST}", "accounting check"],
        units=["", "", unit, "", unit, "", "", "", "", ""], rows=rows, sources=sorted(df["source"]),
        note=(f"{legend(SNAPSHOT_PEAK)}; accounting check: live before + allocations − frees equals the blocks live "
              f"in the snapshot's final state; {PEAK_HOST}: the peak resident set size of the parsing process"),
    )
