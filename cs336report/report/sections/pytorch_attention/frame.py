"""pytorch_attention's tidy frame, one row per attention cell, its variants' labels and memory column."""

from __future__ import annotations

import math

import pandas as pd

from ....accounting import transformer as accounting
from ....records.store import other_processes_bytes, record_status
from ...record_frame import record_frame

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


# The fields of an attention record a row holds: column -> dotted path (record_frame)
FIELDS = {
    "dtype": "config.dtype", "d": "config.d_head", "seq": "config.seq", "batch": "config.batch_size",
    "causal": "config.causal", "error": "error", "oom_phase": "data.oom_phase",
    "fwd_mean_s": "data.forward_stats_s.mean", "fwd_std_s": "data.forward_stats_s.std",
    "fwd_median_s": "data.forward_stats_s.median", "bwd_mean_s": "data.backward_stats_s.mean",
    "bwd_std_s": "data.backward_stats_s.std", "bwd_median_s": "data.backward_stats_s.median",
    "before_bwd_bytes": "data.memory_before_backward_bytes", "activation_bytes": "data.activation_bytes_before_backward",
    "peak_bytes": "data.peak.allocated_bytes", "fwd_peak_bytes": "data.forward_peak.allocated_bytes",
    "saved_bytes": "data.saved_activation_bytes", "matrix_bytes": "data.matrix_bytes",
    "baseline_bytes": "data.memory_baseline_bytes", "first_call_s": "data.compile.first_call_s",
    "setup_s": "data.compile.setup_s", "cache_hits": "data.compile.inductor_cache_hits",
    "graph_breaks": "data.compile.graph_breaks", "gpu_memory_bytes": "provenance.gpu_memory_bytes",
    "gpu": "provenance.gpu", "source": "_path",
}


def frame(records: list[dict]) -> pd.DataFrame:
    """One row per attention result (pytorch_attention or compiled_attention). Memory in use and
    peak are the cell's own: less the bytes its process still held from earlier cells
    (``baseline_bytes``). An out-of-memory cell that ran while other processes held part of the
    card has status "oom_shared" (``others_bytes``: what they held)."""
    if not records:
        return pd.DataFrame(columns=FRAME_COLUMNS)
    nan = dict.fromkeys(("fwd_mean_s", "fwd_std_s", "fwd_median_s", "bwd_mean_s", "bwd_std_s", "bwd_median_s",
                         "first_call_s", "setup_s"), math.nan)
    df = record_frame(records, FIELDS, defaults={**nan, "cache_hits": 0, "baseline_bytes": 0})
    baseline = df["baseline_bytes"].astype(float)
    for column in ("before_bwd_bytes", "peak_bytes", "fwd_peak_bytes"):  # the cell's own bytes
        df[column] = df[column].astype(float) - baseline
    for column in ("activation_bytes", "saved_bytes", "matrix_bytes", "gpu_memory_bytes"):
        df[column] = df[column].astype(float)
    df["baseline_bytes"] = baseline
    df["variant"] = [r["config"]["implementation"] + (f"_{r['config']['backend']}" if r["config"].get("backend") else "")
                     for r in records]
    df["status"] = [record_status(r) for r in records]
    df["others_bytes"] = [float(other_processes_bytes(r.get("error"))) for r in records]
    df["saved_matrices"] = [accounting.saved_matrices_of(r["data"], r["provenance"]) for r in records]
    df = df.astype({"d": int, "seq": int, "batch": int, "causal": bool})[FRAME_COLUMNS]
    df["variant"] = pd.Categorical(df["variant"], categories=[v for v in VARIANTS], ordered=True)
    return df.sort_values(["variant", "dtype", "d", "seq"]).reset_index(drop=True)


def label(variant: str, dtype: str, reference_dtype: str = "fp32") -> str:
    text = LABELS.get(str(variant), str(variant))
    return text if dtype == reference_dtype else f"{text}, {dtype}"


def memory_column(df: pd.DataFrame) -> str:
    """The memory column the scaling and ratios use: allocator bytes when measured, else saved bytes."""
    return "activation_bytes" if df["activation_bytes"].notna().any() else "saved_bytes"
