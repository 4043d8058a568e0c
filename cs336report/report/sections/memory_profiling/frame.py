"""memory_profiling's tidy frame, one row per cell, and the formatting helpers its parts share."""

from __future__ import annotations

import math

import pandas as pd

from ....accounting import transformer as accounting
from ....names.spec import ModelSpec
from ....records.shapes import StepConfig, read_as, typed
from ...record_frame import record_frame
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


# A memory cell's fields a row holds: column -> dotted path (record_frame); the capture's are under
# data.capture in a parse record, under data in a capture record
CELL_FIELDS = {
    "cell": "cell", "status": "status", "error": "error", "implementation": "config.implementation",
    "precision": "config.precision", "size": "config.size", "context": "config.context", "mode": "config.mode",
    "grad": "config.grad", "batch": "config.batch_size", "max_entries": "config.max_entries",
    "stacks": "config.stacks", "warmup": "config.warmup_steps", "steps": "config.measured_steps", "tf32": "config.tf32",
    "capability": "provenance.gpu_capability", "source": "_path",
}
CELL_DEFAULTS = {"implementation": "naive", "precision": "fp32", "size": "?", "context": 0, "mode": "forward",
                 "grad": "enabled"}
CAPTURE_FIELDS = {
    "peak_alloc": "peak_memory.allocated_bytes", "peak_reserved": "peak_memory.reserved_bytes",
    "before": "allocated_before_bytes", "device_bytes": "device_memory_bytes", "snapshot_file_bytes": "snapshot.bytes",
    "dump_s": "snapshot.dump_s",
}
PARSE_FIELDS = {"parse_file_bytes": "data.parse.file_bytes", "parse_s": "data.parse.seconds",
                "parse_rss": "data.parse.peak_rss_bytes"}
COLUMNS = [
    "cell", "status", "error", "implementation", "precision", "size", "context", "label", "mode", "grad", "batch",
    "model", "saved_matrices", "peak_alloc", "peak_reserved", "before", "device_bytes", "snap", "snap_peak",
    "snap_reserved", "snapshot_bytes", "dump_s", "max_entries", "stacks", "warmup", "steps", "tf32", "parse_s",
    "parse_rss", "capability", "source",
]


def _cells(records: list[dict], capture_at: str, parsed: bool) -> pd.DataFrame:
    """The rows of parse records (``parsed``) or of capture records, their capture's fields under
    ``capture_at``."""
    fields = {**CELL_FIELDS, **{k: f"{capture_at}.{path}" for k, path in CAPTURE_FIELDS.items()},
              **PARSE_FIELDS}
    df = record_frame(records, fields, defaults=CELL_DEFAULTS, exact=True)
    df["context"] = [int(c) for c in df["context"]]
    df["label"] = ["forward_no_grad" if g == "no_grad" else m for g, m in zip(df["grad"], df["mode"])]
    df["model"] = [read_as(StepConfig, r["config"]).model for r in records]
    captures = [typed(r).capture for r in records] if parsed else [{"status": r["status"], **r["data"]} for r in records]
    df["saved_matrices"] = [accounting.saved_matrices_of(c, r["provenance"]) for c, r in zip(captures, records)]
    df["snap"] = [typed(r).snapshot for r in records] if parsed else None
    df["snap_peak"] = [snap["peak"]["bytes"] if snap else None for snap in df["snap"]]
    df["snap_reserved"] = [snap["reserved"]["peak_bytes"] if snap else None for snap in df["snap"]]
    df["snapshot_bytes"] = [p or c for p, c in zip(df["parse_file_bytes"], df["snapshot_file_bytes"])]
    return df[COLUMNS]


def frame(parse_records: list[dict], capture_records: list[dict]) -> pd.DataFrame:
    """One row per cell: its status, peaks from torch's counters and from the snapshot, and the parse."""
    parsed_cells = {r["cell"] for r in parse_records}
    captures = [r for r in capture_records if r["cell"] not in parsed_cells]
    parts = [_cells(parse_records, "data.capture", True)] if parse_records else []
    parts += [_cells(captures, "data", False)] if captures else []
    rows = [row for part in parts for row in part.to_dict("records")]
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
