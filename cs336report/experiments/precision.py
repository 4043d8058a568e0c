"""Mixed-precision experiments, written as plain functions.

Each function takes ordinary arguments (including ``device``), runs on CPU or
CUDA, and returns a JSON-serialisable dict: row dicts plus metadata (device,
torch version, dtype names as strings).

* :func:`accumulation` -- repeatedly adding 0.01 with different accumulator and
  addend dtypes (the handout's four loops, plus bfloat16 variants).
* :func:`autocast_dtypes` -- the dtypes actually observed in a small model's
  forward and backward pass under ``torch.autocast``.
* :func:`norm_sensitivity` -- LayerNorm / RMSNorm statistics computed in a low
  precision dtype, compared with a float64 reference.

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
# 3. Normalisation sensitivity
# ---------------------------------------------------------------------------

ACCUMULATIONS = ("backend", "pairwise", "sequential")
EPS = 1e-5


def _reduce_mean(terms: torch.Tensor, accumulate: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean over the last dim in ``terms.dtype``; returns (mean, sum).

    ``backend``: torch's own reduction (inputs and output in the dtype, the
    internal accumulator is whatever the kernel uses).  ``pairwise``: a tree of
    additions, every partial sum rounded to the dtype.  ``sequential``: a
    running sum, rounded to the dtype after every addition.
    """
    hidden = terms.shape[-1]
    if accumulate == "backend":
        return terms.mean(-1), terms.sum(-1)
    if accumulate == "pairwise":
        width = 1 << (hidden - 1).bit_length()
        partial = F.pad(terms, (0, width - hidden))
        while partial.shape[-1] > 1:
            half = partial.shape[-1] // 2
            partial = partial[..., :half] + partial[..., half:]
        total = partial[..., 0]
    elif accumulate == "sequential":
        total = torch.zeros(terms.shape[:-1], dtype=terms.dtype, device=terms.device)
        for j in range(hidden):
            total = total + terms[..., j]
    else:
        raise ValueError(f"unknown accumulation {accumulate!r}")
    return total / hidden, total



def _norm_statistics(x: torch.Tensor, accumulate: str) -> list[dict]:
    """LayerNorm and RMSNorm statistics of ``x`` over the last dim, all in ``x.dtype``.

    Returns one dict per statistic, each norm's statistics in dependency order:
    ``norm``, ``statistic``, ``value``, and for reductions the summed ``terms``
    and their ``sum``.
    """
    mean, mean_sum = _reduce_mean(x, accumulate)
    centred = x - mean.unsqueeze(-1)
    centred_sq = centred * centred
    var, var_sum = _reduce_mean(centred_sq, accumulate)
    rstd = torch.rsqrt(var + EPS)

    squares = x * x
    meansq, meansq_sum = _reduce_mean(squares, accumulate)
    rrms = torch.rsqrt(meansq + EPS)
    return [
        {"norm": "layernorm", "statistic": "mean", "value": mean, "terms": x, "sum": mean_sum},
        {"norm": "layernorm", "statistic": "var", "value": var, "terms": centred_sq, "sum": var_sum},
        {"norm": "layernorm", "statistic": "rstd", "value": rstd},
        {"norm": "layernorm", "statistic": "output", "value": centred * rstd.unsqueeze(-1)},
        {"norm": "rmsnorm", "statistic": "meansq", "value": meansq, "terms": squares, "sum": meansq_sum},
        {"norm": "rmsnorm", "statistic": "rrms", "value": rrms},
        {"norm": "rmsnorm", "statistic": "output", "value": x * rrms.unsqueeze(-1)},
    ]


def _per_case(mask: torch.Tensor) -> torch.Tensor:
    """Reduce a boolean tensor of shape (cases, ...) to one flag per case."""
    return mask.reshape(mask.shape[0], -1).any(-1)


def _rel_errors(stat: str, value: torch.Tensor, ref: torch.Tensor, x_ref: torch.Tensor) -> list[float | None]:
    """Worst relative error over the rows of each case (None where not finite).

    Per-row scalars use |v - r| / |r|, except the mean, whose error is taken
    relative to the row's root-mean-square (the mean itself may be ~0).
    The normalised output uses the ratio of 2-norms per row.
    """
    diff = value.double() - ref
    if stat == "output":
        err = torch.linalg.vector_norm(diff, dim=-1) / torch.linalg.vector_norm(ref, dim=-1)
    elif stat == "mean":
        err = diff.abs() / x_ref.pow(2).mean(-1).sqrt()
    else:
        err = diff.abs() / ref.abs()
    worst = err.amax(-1)
    worst = torch.where(torch.isfinite(err).all(-1), worst, torch.full_like(worst, math.nan))
    return [_finite_or_none(float(e)) for e in worst.tolist()]


def _summarise(rows: list[dict]) -> list[dict]:
    """Per (norm, statistic, dtype, accumulate): where things first overflow, worst clean error."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        key = (row["norm"], row["statistic"], row["dtype"], row["accumulate"])
        groups.setdefault(key, []).append(row)

    summary = []
    for (norm, statistic, dtype, accumulate), group in groups.items():
        clean = [r for r in group if not r["overflow"] and r["rel_error"] is not None]
        worst = max(clean, key=lambda r: r["rel_error"], default=None)
        summary.append(
            {
                "norm": norm,
                "statistic": statistic,
                "dtype": dtype,
                "accumulate": accumulate,
                "first_inf_magnitude": min((r["magnitude"] for r in group if r["n_inf"]), default=None),
                "first_overflow_magnitude": min((r["magnitude"] for r in group if r["overflow"]), default=None),
                "first_sum_overflow_magnitude": min(
                    (r["magnitude"] for r in group if r["sum_overflow"]), default=None
                ),
                "max_rel_error": worst["rel_error"] if worst else None,
                "worst_magnitude": worst["magnitude"] if worst else None,
                "worst_hidden": worst["hidden"] if worst else None,
                "worst_offset": worst["offset"] if worst else None,
            }
        )
    return summary


def norm_sensitivity(
    device: str = "cpu",
    magnitudes=(1, 10, 100, 1e3, 1e4, 1e5),
    hidden_sizes=(64, 1024, 8192),
    dtypes=("float16", "bfloat16", "float32"),
    offsets=(0.0, 1.0),
    accumulations=ACCUMULATIONS,
    rows_per_case: int = 8,
    seed: int = 0,
) -> dict:
    """Compute LayerNorm/RMSNorm statistics in low precision and compare with float64.

    Inputs are ``x = magnitude * (offset + z)`` with ``z ~ N(0, 1)`` of shape
    (rows_per_case, hidden), so ``offset=1`` gives a mean as large as the
    spread.  ``x`` is rounded to each dtype and the float64 reference is
    computed from that rounded ``x``: errors measure the statistics, not the
    input rounding.  ``accumulate`` selects how sums are formed (see
    :func:`_reduce_mean`).

    Row keys: norm, statistic, dtype, accumulate, magnitude, hidden, offset,
    rel_error (None when not finite), n_inf, n_nan, n_input_inf (input entries
    that are inf after rounding), n_terms_inf (summed terms that are inf, e.g.
    x*x), sum_overflow (the sum rounded to the dtype is inf although no term
    is; the last two are None for non-reductions) and overflow (an inf/nan
    anywhere in this statistic or the ones it depends on, input included; for
    ``backend`` the separately taken sum is not part of that chain, since
    ``mean()`` does not go through it).  ``summary`` has one row per (norm,
    statistic, dtype, accumulate); its ``first_*_magnitude`` values are the
    smallest magnitude over all hidden sizes and offsets, ``max_rel_error``
    is over cases without overflow.  How ``rel_error`` is measured: see
    :func:`_rel_errors`.
    """
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for hidden in hidden_sizes:
        z = torch.randn(len(magnitudes), rows_per_case, hidden, generator=generator, dtype=torch.float64)
        scale = torch.tensor(magnitudes, dtype=torch.float64).view(-1, 1, 1)
        for offset in offsets:
            x64 = (scale * (offset + z)).to(device)
            for dtype in dtypes:
                x_low = x64.to(DTYPES[dtype])
                x_ref = x_low.double()
                input_inf = _per_case(torch.isinf(x_low))
                n_input_inf = torch.isinf(x_low).flatten(1).sum(1).tolist()
                reference = _norm_statistics(x_ref, "backend")
                for accumulate in accumulations:
                    broken = {"layernorm": input_inf, "rmsnorm": input_inf}
                    for stat, ref in zip(_norm_statistics(x_low, accumulate), reference):
                        norm, value = stat["norm"], stat["value"]
                        broken[norm] = broken[norm] | _per_case(~torch.isfinite(value))
                        if "terms" in stat:
                            terms_inf = torch.isinf(stat["terms"])
                            sum_inf = torch.isinf(stat["sum"]) & ~terms_inf.any(-1)
                            broken[norm] = broken[norm] | _per_case(terms_inf)
                            if accumulate != "backend":  # there the mean does not go through this sum
                                broken[norm] = broken[norm] | _per_case(sum_inf)
                            n_terms_inf = terms_inf.flatten(1).sum(1).tolist()
                            sum_overflow = _per_case(sum_inf).tolist()
                        else:
                            n_terms_inf = sum_overflow = [None] * len(magnitudes)
                        rel_errors = _rel_errors(stat["statistic"], value, ref["value"], x_ref)
                        n_inf = torch.isinf(value).flatten(1).sum(1).tolist()
                        n_nan = torch.isnan(value).flatten(1).sum(1).tolist()
                        for i, magnitude in enumerate(magnitudes):
                            rows.append(
                                {
                                    "norm": norm,
                                    "statistic": stat["statistic"],
                                    "dtype": dtype,
                                    "accumulate": accumulate,
                                    "magnitude": float(magnitude),
                                    "hidden": hidden,
                                    "offset": float(offset),
                                    "rel_error": rel_errors[i],
                                    "n_inf": n_inf[i],
                                    "n_nan": n_nan[i],
                                    "n_input_inf": n_input_inf[i],
                                    "n_terms_inf": n_terms_inf[i],
                                    "sum_overflow": sum_overflow[i],
                                    "overflow": bool(broken[norm][i]),
                                }
                            )
    return {
        "experiment": "norm_sensitivity",
        **_meta(device),
        "eps": EPS,
        "reference_dtype": "float64",
        "rows_per_case": rows_per_case,
        "seed": seed,
        "rows": rows,
        "summary": _summarise(rows),
    }


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


def norm_cells(cfg) -> dict[str, dict]:
    grid = cfg.grid("norm_sensitivity")
    if grid is None:
        return {}
    keys = ("magnitudes", "hidden_sizes", "offsets", "rows_per_case")
    return {d: {"device": d, **{k: grid[k] for k in keys}, "seed": cfg.run["seed"]} for d in _devices(cfg, grid)}


def run_norm(cell: dict) -> dict:
    return norm_sensitivity(
        cell["device"], magnitudes=tuple(cell["magnitudes"]), hidden_sizes=tuple(cell["hidden_sizes"]),
        offsets=tuple(cell["offsets"]), rows_per_case=cell["rows_per_case"], seed=cell["seed"],
    )


EXPERIMENTS = {
    "mixed_precision_accumulation": (accumulation_cells, run_accumulation),
    "autocast_dtypes": (autocast_cells, run_autocast),
    "norm_sensitivity": (norm_cells, run_norm),
}
