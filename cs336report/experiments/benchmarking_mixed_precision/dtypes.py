"""benchmarking_mixed_precision (a): the dtypes actually observed in the handout's toy model's forward
and backward pass under ``torch.autocast``, as a plain function (:func:`autocast_dtypes`: CPU or
CUDA, a JSON-serialisable dict back).
"""

from __future__ import annotations

import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..mixed_precision_accumulation.accumulation import DTYPES, _dtype_name, _meta


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


SHORT_DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


def run_autocast(cell: dict) -> dict:
    return autocast_dtypes(cell["device"], SHORT_DTYPES[cell["dtype"]], batch=cell["batch"], seed=cell["seed"])
