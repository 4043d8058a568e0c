"""benchmarking_mixed_precision (b): LayerNorm / RMSNorm statistics computed in a low-precision dtype,
against a float64 reference.

:func:`norm_sensitivity` is a plain function (CPU or CUDA, a JSON-serialisable dict back, like
:func:`cs336report.experiments.mixed_precision_accumulation.accumulation.accumulation`); the
workflow's ``norm_sensitivity`` experiment runs it, one cell per device of its grid.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..mixed_precision_accumulation.accumulation import DTYPES, _finite_or_none, _meta


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


def run_norm(cell: dict) -> dict:
    return norm_sensitivity(
        cell["device"], magnitudes=tuple(cell["magnitudes"]), hidden_sizes=tuple(cell["hidden_sizes"]),
        offsets=tuple(cell["offsets"]), rows_per_case=cell["rows_per_case"], seed=cell["seed"],
    )
