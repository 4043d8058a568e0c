"""The numbers memory_profiling's sentences quote, computed from its frame and tables' rows."""

from __future__ import annotations

import pandas as pd

from ....accounting import transformer as accounting, peak as accounting_peak
from ....records.shapes import Snapshot, read_as
from ...labels import PEAK_ALLOCATED, SNAPSHOT_PEAK
from ...tables import Num, fmt_bytes, fmt_pct, fmt_seconds, sig
from .frame import CATEGORY_LABELS, MODE_LABELS, MODE_ORDER, is_measured, model_spec
from .shapes import explain_size, named_shapes

FULL_STEP = ("train_step", "forward_backward")

# |bf16 - fp32| / fp32 below this reads as "no significant change" in the text.
SIGNIFICANT = 0.05


def _signed_pct(rel: float) -> str:
    """A relative change as a signed percentage, with the same minus sign (U+2212) as the byte differences."""
    return ("+" if rel > 0 else "−") + f"{abs(rel) * 100:.1f} %"


def _live_before(row) -> int:
    """Bytes live before the recorded steps: the capture's counter, else the snapshot's baseline."""
    if is_measured(row["before"]):
        return row["before"]
    return row["snap"]["baseline"]["bytes"] if row["snap"] else 0


def _gib(x, source: str | None = None) -> str:
    """Bytes in their unit; a measured value links to ``source``, the record it comes from."""
    return Num(fmt_bytes(x), source) if is_measured(x) else "–"


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
    counted = is_measured(row["peak_alloc"])
    return {"peak": _gib(snap["peak"]["bytes"], row["source"]), "peak_phase": snap["peak"]["phase"],
            "start": _gib(start, row["source"]), "allocated": _gib(row["peak_alloc"], row["source"]),
            # the one peak the answers quote: the counter's peak allocated, the snapshot's where there is none
            "top": _gib(row["peak_alloc"] if counted else snap["peak"]["bytes"], row["source"]),
            "top_name": PEAK_ALLOCATED if counted else SNAPSHOT_PEAK,
            "phase_peaks": [{"phase": k, "peak": _gib(v)} for k, v in peaks.items()]}


def _is_weights(rise: int, params: int) -> bool:
    """Whether ``rise`` bytes are about one fp32 copy of ``params`` weights (within 10 %)."""
    return abs(rise / (4 * params) - 1) <= 0.1


def optimizer_peak(snap: dict, params: int) -> dict:
    """Where a full step peaks in its optimizer step: how far above backward's highest point, and
    whether that rise is about one fp32 copy of the weights (within 10 %). Where it peaks elsewhere:
    the optimizer step's own spike (:func:`optimizer_spike`), if it has one."""
    if snap["peak"]["phase"] != "optimizer":
        return optimizer_spike(snap, params)
    backward = max((p["peak_bytes"] for p in snap["phases"] if p["phase"] == "backward"), default=None)
    if backward is None:
        return {}
    rise = snap["peak"]["bytes"] - backward
    return {"backward_peak": _gib(backward), "optimizer_rise": _gib(rise), "weights": _gib(4 * params),
            "rise_is_weights": _is_weights(rise, params)}


def optimizer_spike(snap: dict, params: int) -> dict:
    """The largest rise of the timeline inside an optimizer step (a ``ramp`` segment that starts and
    ends there): ``spike_rise`` from ``spike_from`` to ``spike_top``, and whether it is about one fp32
    copy of the weights. Empty where the optimizer step allocates nothing that shows."""
    ramps = [s for s in (snap.get("ramps") or {}).get("segments", [])
             if s["kind"] == "ramp" and s["phase_start"] == s["phase_end"] == "optimizer"]
    if not ramps:
        return {}
    top = max(ramps, key=lambda s: s["bytes"])
    return {"spike_rise": _gib(top["bytes"]), "spike_from": _gib(top["start_bytes"]),
            "spike_top": _gib(top["end_bytes"]), "weights": _gib(4 * params),
            "rise_is_weights": _is_weights(top["bytes"], params)}


def opening_drop(snap: dict, params: int) -> dict:
    """A full step that opens with a fall (``zero_grad(set_to_none=True)`` freeing the gradients the
    step before left): by how much and to where, and whether it is about one fp32 value per parameter.
    Empty where the first recorded step opens otherwise."""
    segments = [s for s in (snap.get("ramps") or {}).get("segments", []) if s.get("step") == 0]
    first = min(segments, key=lambda s: s["start"], default=None)
    if first is None or first["kind"] != "drop" or first["start"] != 0:
        return {}
    return {"drop": _gib(-first["bytes"]), "drop_to": _gib(first["end_bytes"]),
            "drop_is_grads": _is_weights(-first["bytes"], params)}


def size_kinds(snap: dict, size: int) -> list[dict]:
    """What the allocations of ``size`` bytes were, per recorded step: one entry per category, most
    first (the snapshot's ``by_size`` table); empty where the table lacks that size."""
    parsed = read_as(Snapshot, snap)
    row = next((r for r in parsed.by_size or [] if r["size"] == size), None)
    if row is None or not parsed.n_steps:
        return []
    kinds = sorted(row["categories"].items(), key=lambda kv: (-kv[1], kv[0]))
    return [{"category": CATEGORY_LABELS.get(c, c)[0].lower() + CATEGORY_LABELS.get(c, c)[1:],
             "per_step": n // snap["n_steps"] if n % snap["n_steps"] == 0 else sig(n / snap["n_steps"])}
            for c, n in kinds]


def peak_phases(by_context: dict[int, tuple[str, str]]) -> dict:
    """Of a full step's (fp32, bf16) peak phases by context: the contexts where both peak in the
    optimizer step (``optimizer_both``), which autocast does not touch, and those where bf16 moves
    the peak to another phase (``moved``: context, fp32's phase, bf16's)."""
    both = [c for c, (a, b) in sorted(by_context.items()) if a == b == "optimizer"]
    moved = [{"context": c, "fp32": a, "bf16": b} for c, (a, b) in sorted(by_context.items()) if a != b]
    return {"optimizer_both": both, "moved": moved}


def analysis(df: pd.DataFrame, ramps: pd.DataFrame) -> dict:
    out: dict = {"n_cells": len(df), "n_ok": int((df["status"] == "ok").sum()), "failed": [], "growth": [],
                 "precision_cmp": [], "ramps": []}
    for _, r in df[df["status"] != "ok"].iterrows():
        out["failed"].append({"cell": r["cell"], "status": "OOM" if r["status"] == "oom" else r["status"],
                              "error": r["error"] or ""})
    ok = df[df["status"] == "ok"]
    out["has_no_grad"] = bool((ok["label"] == "forward_no_grad").any())  # the grid may have no such cells
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
        params = accounting.param_count(model_spec(full))
        out["full"]["start_per_param"] = Num(sig(start_bytes(full["snap"]) / params, 3), full["source"])
        out["full"].update(optimizer_peak(full["snap"], params))
        out["full"].update(opening_drop(full["snap"], params))
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
    # (c) precision: bf16 against fp32 at every context both ran; the longest context is the headline,
    # and the others show how autocast's weight copies weigh most where the activations are small
    prec, by_mode, phases = [], {}, {}
    for (impl, context, label), g in ok.groupby(["implementation", "context", "label"]):
        by = {r["precision"]: r for _, r in g.iterrows()}
        if "fp32" not in by or "bf16" not in by:
            continue
        diff = by["bf16"]["peak"] - by["fp32"]["peak"]
        rel = diff / by["fp32"]["peak"]
        by_mode.setdefault((impl, label), []).append((int(context), rel))
        if by["fp32"]["snap"] and by["bf16"]["snap"]:  # the phase each precision's step peaks in
            phases.setdefault((impl, label), {})[int(context)] = (by["fp32"]["snap"]["peak"]["phase"],
                                                                 by["bf16"]["snap"]["peak"]["phase"])
        if int(context) == top_ctx:
            prec.append({"impl": impl, "label": MODE_LABELS[label], "fp32": _gib(by["fp32"]["peak"]),
                         "bf16": _gib(by["bf16"]["peak"]), "diff": ("+" if diff > 0 else "−") + _gib(abs(diff)),
                         "pct": _signed_pct(rel), "significant": abs(rel) >= SIGNIFICANT, "abs_rel": abs(rel),
                         "rank": MODE_ORDER.index(label)})
    out["precision_cmp"] = sorted(prec, key=lambda x: (x["impl"], x["rank"]))
    spans = [{"impl": impl, "label": MODE_LABELS[label], "rank": MODE_ORDER.index(label),
              "points": [{"context": c, "pct": _signed_pct(rel)} for c, rel in sorted(points)],
              "sign_changes": min(r for _, r in points) < 0 < max(r for _, r in points),
              **peak_phases(phases.get((impl, label), {}))}
             for (impl, label), points in by_mode.items() if len(points) > 1]
    out["precision_by_context"] = sorted(spans, key=lambda x: (x["impl"], x["rank"]))
    out["weight_copies"] = [w for w in (weight_copies(r) for _, r in ok.iterrows()
                                        if r["precision"] == "bf16" and int(r["context"]) == top_ctx
                                        and r["implementation"] == out["impl"] and r["snap"]) if w]
    if (ok["precision"] != "fp32").any():
        out["cast_cache"] = _gib(accounting_peak.autocast_cast_bytes(model_spec(base.iloc[0]), "bf16"))
    out["significant_threshold"] = fmt_pct(SIGNIFICANT, 2)
    # (e) largest allocation
    ref = full if full is not None else (fwd if fwd is not None and fwd["snap"] else None)
    if ref is not None and ref["snap"]["top_allocations"]:
        big = ref["snap"]["top_allocations"][0]
        out["largest"] = {"size": _gib(big["size"], ref["source"]),
                          "category": CATEGORY_LABELS.get(big["category"], big["category"]),
                          "what": explain_size(big["size"], model_spec(ref), int(ref["batch"]), top_ctx,
                                               big["category"], ref["precision"]),
                          "phase": big["phase"], "label": MODE_LABELS[ref["label"]],
                          "kinds": size_kinds(ref["snap"], big["size"])}
        cats = ref["snap"]["per_category"]
        scores = cats.get("AttnScores", {}).get("max_bytes", 0)
        if scores:
            spec = model_spec(ref)
            out["scores"] = {"size": _gib(scores, ref["source"]),
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
    # parsing cost of the largest snapshot
    sized = df[df["snapshot_bytes"].notna() & df["parse_s"].notna()]
    if not sized.empty:
        big = sized.loc[sized["snapshot_bytes"].idxmax()]
        out["parse"] = {"cell": big["cell"], "bytes": fmt_bytes(big["snapshot_bytes"]),
                        "events": f"{big['snap']['n_events']:,}" if big["snap"] else "–",
                        "seconds": fmt_seconds(big["parse_s"]),
                        "rss": fmt_bytes(big["parse_rss"]) if is_measured(big["parse_rss"]) else "–"}
    return out


def weight_copies(row) -> dict | None:
    """Allocations of exactly a weight matrix's size in bf16 outside backward and the optimizer:
    the casts autocast makes of the fp32 weights, per recorded step."""
    spec = model_spec(row)
    d, f, V = spec.d_model, spec.d_ff, spec.vocab_size
    B, T = int(row["batch"]), int(row["context"])
    activations = {n * b for name, n, _, _ in named_shapes(spec, B, T) if name.startswith("B·") for b in (2, 4)}
    sizes = {2 * d * d, 2 * f * d, 2 * V * d} - activations  # sizes an activation could also have are left out
    count = nbytes = 0
    snap = read_as(Snapshot, row["snap"])
    for s in snap.by_size or []:
        if s["size"] in sizes:
            n = sum(k for c, k in s["categories"].items() if c not in ("Gradient", "OptimizerState"))
            count += n
            nbytes += n * s["size"]
    if not count:
        return None
    steps = row["steps"] if is_measured(row["steps"]) else snap.n_steps or 1
    return {"label": MODE_LABELS[row["label"]], "per_step": sig(count / steps, 3),
            "bytes": _gib(nbytes / steps, row["source"]),
            "all_weights": _gib(accounting_peak.autocast_cast_bytes(spec, "bf16")),
            "n_weights": accounting.linear_weight_count(spec), "rank": MODE_ORDER.index(row["label"])}


def settings(df: pd.DataFrame) -> list[dict]:
    def values(col):
        return ", ".join(sorted({str(v) for v in df[col] if is_measured(v)})) or "–"

    return [{"label": label, "value": values(col), "handout": "", "differs": False}
            for label, col in (("warm-up steps", "warmup"), ("recorded steps", "steps"), ("batch size", "batch"),
                               ("TF32 matmuls", "tf32"), ("implementation", "implementation"),
                               ("precision", "precision"), ("max_entries", "max_entries"), ("stacks", "stacks"))]
