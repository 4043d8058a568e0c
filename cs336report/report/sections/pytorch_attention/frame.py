"""pytorch_attention's tidy frame, one row per attention cell, its variants' labels and memory column."""

from __future__ import annotations

import math

import pandas as pd

from ....accounting import transformer as accounting
from ....records.store import other_processes_bytes, record_status

VARIANTS = ("naive", "compiled", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "sdpa_math")
LABELS = {
    "naive": "naive (hand-written)",
    "compiled": "naive, torch.compile",
    "sdpa_flash": "SDPA flash",
    "sdpa_efficient": "SDPA memory-efficient",
    "sdpa_cudnn": "SDPA cuDNN",
    "sdpa_math": "SDPA math",
}

FRAME_COLUMNS = [
    "variant", "dtype", "d", "seq", "batch", "causal", "status", "error", "oom_phase", "fwd_mean_s", "fwd_std_s",
    "fwd_median_s", "bwd_mean_s", "bwd_std_s", "bwd_median_s", "before_bwd_bytes", "activation_bytes", "peak_bytes",
    "fwd_peak_bytes",
    "saved_bytes", "matrix_bytes", "baseline_bytes", "others_bytes", "first_call_s", "setup_s", "cache_hits",
    "graph_breaks", "gpu_memory_bytes", "gpu", "source", "saved_matrices",
]


def _stat(data: dict, key: str, field: str) -> float:
    return (data.get(key) or {}).get(field, math.nan)


def _bytes(value) -> float:
    return math.nan if value is None else float(value)


def _own(value, baseline: float) -> float:
    """Allocator bytes less what the process held before the cell began."""
    return math.nan if value is None else float(value) - baseline


def frame(records: list[dict]) -> pd.DataFrame:
    """One row per attention result (pytorch_attention or compiled_attention). Memory in use and
    peak are the cell's own: less the bytes its process still held from earlier cells
    (``baseline_bytes``). An out-of-memory cell that ran while other processes held part of the
    card has status "oom_shared" (``others_bytes``: what they held)."""
    rows = []
    for r in records:
        c, d = r["config"], r["data"] or {}
        variant = c["implementation"] + (f"_{c['backend']}" if c.get("backend") else "")
        peak = d.get("peak") or {}
        compile_info = d.get("compile") or {}
        baseline = float(d.get("memory_baseline_bytes") or 0)
        rows.append({
            "variant": variant, "dtype": c["dtype"], "d": int(c["d_head"]), "seq": int(c["seq"]),
            "batch": int(c["batch_size"]), "causal": bool(c["causal"]), "status": record_status(r),
            "error": r.get("error"), "oom_phase": d.get("oom_phase"),
            "fwd_mean_s": _stat(d, "forward_stats_s", "mean"), "fwd_std_s": _stat(d, "forward_stats_s", "std"),
            "fwd_median_s": _stat(d, "forward_stats_s", "median"),
            "bwd_mean_s": _stat(d, "backward_stats_s", "mean"), "bwd_std_s": _stat(d, "backward_stats_s", "std"),
            "bwd_median_s": _stat(d, "backward_stats_s", "median"),
            "before_bwd_bytes": _own(d.get("memory_before_backward_bytes"), baseline),
            "saved_matrices": accounting.saved_matrices_of(d, r.get("provenance")),
            "activation_bytes": _bytes(d.get("activation_bytes_before_backward")),
            "peak_bytes": _own(peak.get("allocated_bytes"), baseline),
            "fwd_peak_bytes": _own((d.get("forward_peak") or {}).get("allocated_bytes"), baseline),
            "saved_bytes": _bytes(d.get("saved_activation_bytes")),
            "matrix_bytes": _bytes(d.get("matrix_bytes")),
            "baseline_bytes": baseline, "others_bytes": float(other_processes_bytes(r.get("error"))),
            "first_call_s": compile_info.get("first_call_s", math.nan),
            "setup_s": compile_info.get("setup_s", math.nan),
            "cache_hits": compile_info.get("inductor_cache_hits") or 0,
            "graph_breaks": compile_info.get("graph_breaks"),
            "gpu_memory_bytes": _bytes(r["provenance"].get("gpu_memory_bytes")),
            "gpu": r["provenance"].get("gpu"), "source": r["_path"],
        })
    df = pd.DataFrame(rows, columns=FRAME_COLUMNS)
    if df.empty:
        return df
    df["variant"] = pd.Categorical(df["variant"], categories=[v for v in VARIANTS], ordered=True)
    return df.sort_values(["variant", "dtype", "d", "seq"]).reset_index(drop=True)


def label(variant: str, dtype: str, reference_dtype: str = "fp32") -> str:
    text = LABELS.get(str(variant), str(variant))
    return text if dtype == reference_dtype else f"{text}, {dtype}"


def memory_column(df: pd.DataFrame) -> str:
    """The memory column the scaling and ratios use: allocator bytes when measured, else saved bytes."""
    return "activation_bytes" if df["activation_bytes"].notna().any() else "saved_bytes"
