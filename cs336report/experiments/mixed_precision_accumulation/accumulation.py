"""mixed_precision_accumulation: 0.01 added up repeatedly with different accumulator and addend
dtypes (the handout's four loops, plus bfloat16 variants), as a plain function (:func:`accumulation`:
CPU or CUDA, a JSON-serialisable dict back: rows plus the device and torch version). The dtype
helpers here serve benchmarking_mixed_precision's measurements too.
"""

from __future__ import annotations

import math

import torch

DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _meta(device: str) -> dict:
    dev = torch.device(device)
    meta = {"device": str(dev), "device_type": dev.type, "torch_version": torch.__version__}
    if dev.type == "cuda":
        meta["device_name"] = torch.cuda.get_device_name(dev)
    return meta


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


# ---------------------------------------------------------------------------
# 1. Accumulation
# ---------------------------------------------------------------------------

# (label, description, accumulator dtype, addend dtype, cast addend to accumulator first)
ACCUMULATION_CASES = [
    ("a", "fp32 += fp32", torch.float32, torch.float32, False),
    ("b", "fp16 += fp16", torch.float16, torch.float16, False),
    ("c", "fp32 += fp16", torch.float32, torch.float16, False),
    ("d", "fp32 += fp16 cast to fp32", torch.float32, torch.float16, True),
    ("e", "bf16 += bf16", torch.bfloat16, torch.bfloat16, False),
    ("f", "fp32 += bf16", torch.float32, torch.bfloat16, False),
]


def ulp(value: float, dtype: torch.dtype) -> float:
    """Gap between ``value`` (a normal number of ``dtype``) and the next larger one."""
    if value == 0:
        return torch.finfo(dtype).tiny
    return 2.0 ** math.floor(math.log2(abs(value))) * torch.finfo(dtype).eps


def accumulation(device: str = "cpu", n: int = 1000, step: float = 0.01, points: int = 100) -> dict:
    """Add ``step`` to a zero accumulator ``n`` times for each dtype combination.

    Rows: label, description, accumulator_dtype, addend_dtype, cast_addend,
    addend_value (the addend as actually stored), result, expected,
    abs_error, rel_error, ulp_at_result (the spacing of the accumulator dtype
    at the result), stalled (one more addition leaves the accumulator
    unchanged), last_change (the last addition that changed the accumulator)
    and trajectory (the accumulator after every ``n // points`` additions, as
    ``[additions, value]`` pairs).
    """
    expected = n * step
    every = max(1, n // points)
    rows = []
    for label, description, acc_dtype, add_dtype, cast in ACCUMULATION_CASES:
        acc = torch.tensor(0.0, dtype=acc_dtype, device=device)
        addend = torch.tensor(step, dtype=add_dtype, device=device)
        if cast:
            addend_used = addend.to(acc_dtype)
        else:
            addend_used = addend
        trajectory, last_change, previous = [], 0, 0.0
        for i in range(1, n + 1):
            acc += addend_used
            value = float(acc.item())
            if value != previous:
                last_change, previous = i, value
            if i % every == 0 or i == n:
                trajectory.append([i, value])
        result = float(acc.item())
        stalled = bool((acc + addend_used == acc).item())
        rows.append(
            {
                "label": label,
                "description": description,
                "accumulator_dtype": _dtype_name(acc_dtype),
                "addend_dtype": _dtype_name(add_dtype),
                "cast_addend": cast,
                "addend_value": float(addend.item()),
                "result": result,
                "expected": expected,
                "abs_error": abs(result - expected),
                "rel_error": abs(result - expected) / abs(expected),
                "ulp_at_result": ulp(result, acc_dtype),
                "stalled": stalled,
                "last_change": last_change,
                "trajectory": trajectory,
            }
        )
    return {"experiment": "accumulation", **_meta(device), "n": n, "step": step, "rows": rows}


def run_accumulation(cell: dict) -> dict:
    return accumulation(cell["device"], cell["n"], cell["step"])
