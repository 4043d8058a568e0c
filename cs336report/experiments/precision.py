"""Mixed-precision experiments, written as plain functions.

Each function takes ordinary arguments (including ``device``), runs on CPU or
CUDA, and returns a JSON-serialisable dict: row dicts plus metadata (device,
torch version, dtype names as strings).

* :func:`accumulation` -- repeatedly adding 0.01 with different accumulator and
  addend dtypes (the handout's four loops, plus bfloat16 variants).
* :func:`autocast_dtypes` -- the dtypes actually observed in a small model's
  forward and backward pass under ``torch.autocast``.

The third, norm statistics in low precision, is :mod:`.norm_sensitivity`.

Each is also an experiment of the workflow (``EXPERIMENTS`` at the end): one cell per
device listed in its grid (``grids.<gpu|cpu>.<experiment>.devices``, default the run's
device), and for autocast_dtypes one per device and autocast dtype.

    python -m cs336report run mixed_precision_accumulation --name cpu \
        --cell '{"device": "cpu", "n": 1000, "step": 0.01}' --out accumulation.json
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

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


# ---------------------------------------------------------------------------
# 2. Autocast dtypes
# ---------------------------------------------------------------------------


class ToyModel(nn.Module):
    """The handout's toy model: relu(fc1(x)) -> LayerNorm -> fc2."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc1 = nn.Linear(in_features, 10, bias=False)
        self.ln = nn.LayerNorm(10)
        self.fc2 = nn.Linear(10, out_features, bias=False)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.fc1(x))
        x = self.ln(x)
        return self.fc2(x)


def autocast_dtypes(
    device: str = "cpu",
    dtype: str = "float16",
    batch: int = 4,
    in_features: int = 20,
    out_features: int = 5,
    seed: int = 0,
) -> dict:
    """Observe the dtypes of a forward/backward pass of :class:`ToyModel` under autocast.

    Returns ``status`` ("ok", "disabled" when torch silently turned autocast
    off, or "unsupported" when it raised), ``autocast_enabled``,
    ``autocast_dtype`` (as reported inside the context), any ``warnings`` or
    ``error`` message, and rows of ``{"component", "kind", "dtype"}``.
    """
    device_type = torch.device(device).type
    result = {
        "experiment": "autocast_dtypes",
        **_meta(device),
        "requested_dtype": dtype,
        "batch": batch,
        "in_features": in_features,
        "out_features": out_features,
        "status": "ok",
        "autocast_enabled": None,
        "autocast_dtype": None,
        "warnings": [],
        "error": None,
        "rows": [],
    }

    torch.manual_seed(seed)
    model = ToyModel(in_features, out_features).to(device)
    x = torch.randn(batch, in_features, device=device)
    target = torch.randint(0, out_features, (batch,), device=device)

    rows = []

    def record(component: str, kind: str, tensor: torch.Tensor) -> None:
        rows.append({"component": component, "kind": kind, "dtype": _dtype_name(tensor.dtype)})

    def hook(name):
        def _hook(module, inputs, output):
            record(f"{name} input", "activation", inputs[0])
            record(f"{name} output", "activation", output)

        return _hook

    handles = [getattr(model, name).register_forward_hook(hook(name)) for name in ("fc1", "relu", "ln", "fc2")]
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch.autocast(device_type=device_type, dtype=DTYPES[dtype]):
                result["autocast_enabled"] = torch.is_autocast_enabled(device_type)
                result["autocast_dtype"] = _dtype_name(torch.get_autocast_dtype(device_type))
                for name, param in model.named_parameters():
                    record(f"{name} (stored, inside autocast)", "parameter", param)
                logits = model(x)
                record("logits", "activation", logits)
                loss = F.cross_entropy(logits, target)
                record("loss", "loss", loss)
            loss.backward()
        result["warnings"] = [str(w.message) for w in caught]
    except (RuntimeError, TypeError, ValueError) as exc:
        result["status"] = "unsupported"
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["rows"] = rows
        return result
    finally:
        for handle in handles:
            handle.remove()

    for name, param in model.named_parameters():
        record(f"{name}.grad", "gradient", param.grad)
    if not result["autocast_enabled"]:
        result["status"] = "disabled"
    result["rows"] = rows
    return result


# ---------------------------------------------------------------------------
# Workflow experiments
# ---------------------------------------------------------------------------

SHORT_DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


def _devices(cfg, grid: dict) -> list[str]:
    return grid.get("devices") or [cfg.device]


def accumulation_cells(cfg) -> dict[str, dict]:
    grid = cfg.grid("mixed_precision_accumulation")
    if grid is None:
        return {}
    return {d: {"device": d, "n": grid["n"], "step": grid["step"]} for d in _devices(cfg, grid)}


def run_accumulation(cell: dict) -> dict:
    return accumulation(cell["device"], cell["n"], cell["step"])


def autocast_cells(cfg) -> dict[str, dict]:
    grid = cfg.grid("autocast_dtypes")
    if grid is None:
        return {}
    return {
        f"{d}-{dtype}": {"device": d, "dtype": dtype, "batch": grid["batch"], "seed": cfg.run["seed"]}
        for d in _devices(cfg, grid)
        for dtype in grid["dtypes"]
    }


def run_autocast(cell: dict) -> dict:
    return autocast_dtypes(cell["device"], SHORT_DTYPES[cell["dtype"]], batch=cell["batch"], seed=cell["seed"])


EXPERIMENTS = {
    "mixed_precision_accumulation": (accumulation_cells, run_accumulation),
    "autocast_dtypes": (autocast_cells, run_autocast),
}
