"""memory_profiling's tidy frame, one row per cell, and the formatting helpers its parts share."""

from __future__ import annotations

import math

import pandas as pd

from ....accounting import transformer as accounting
from ....names.spec import ModelSpec
from ...tables import sig

MODE_ORDER = ("forward_no_grad", "forward", "forward_backward", "train_step")
MODE_LABELS = {
    "forward": "forward (autograd on)",
    "forward_no_grad": "forward (no_grad)",
    "forward_backward": "forward + backward",
    "train_step": "train step (AdamW)",
}

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

MiB = 2**20
GiB = 2**30


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
            "capability": (r.get("provenance") or {}).get("gpu_capability"), "source": r["_path"],
        })
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    df["peak"] = [a if is_measured(a) else s for a, s in zip(df["peak_alloc"], df["snap_peak"])]
    df["peak_from"] = ["torch" if is_measured(a) else ("snapshot" if is_measured(s) else None)
                       for a, s in zip(df["peak_alloc"], df["snap_peak"])]
    df["mode_rank"] = [MODE_ORDER.index(m) if m in MODE_ORDER else 99 for m in df["label"]]
    return df.sort_values(["implementation", "precision", "context", "mode_rank"]).reset_index(drop=True)


def _nan(x) -> bool:
    return isinstance(x, float) and math.isnan(x)


def is_measured(x) -> bool:
    """A measured value (not None, not NaN)."""
    return x is not None and not _nan(x)


def byte_unit(values) -> tuple[str, int]:
    vals = [v for v in values if is_measured(v)]
    return ("GiB", GiB) if vals and max(vals) >= GiB else ("MiB", MiB)


def in_unit(x, scale: int) -> str:
    return sig(x / scale) if is_measured(x) else "–"


def model_spec(row) -> ModelSpec:
    return ModelSpec(**row["model"])
