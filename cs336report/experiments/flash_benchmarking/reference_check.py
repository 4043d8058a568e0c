"""The student's FlashAttention-2 against the float32 reference, once per cell before it is timed.

A timing of a function that computes something else compares nothing, so each cell of a student's
row first runs its forward on the cell's first (seq, d_head) in the cell's dtype and compares O with
:func:`cs336report.flash.reference_attention` of the same inputs. The verdict (``data.reference_check``):

* ``ok``: every value within ``TOLERANCE[dtype]`` (|o - ref| <= tol + tol * |ref|, the handout
  tests' form);
* ``not_causal``: a causal cell whose O matches the reference without the mask, not with it: the
  function ignores ``is_causal``;
* ``wrong``: it matches neither;
* ``error``: the forward raised (the timed passes then record their own failure).

The cell is timed whatever the verdict; the report marks the row of a function that is not ``ok``.
"""

from __future__ import annotations

from typing import Callable

import torch

TOLERANCE = {"fp32": 1e-2, "bf16": 5e-2}  # fp32: the handout tests' atol and rtol; bf16: its rounding on top


def _worst_ratio(o: torch.Tensor, ref: torch.Tensor, tol: float) -> float:
    return ((o.float() - ref).abs() / (tol + tol * ref.abs())).max().item()


def check_forward(attn: Callable, cell: dict, dtype: torch.dtype) -> dict:
    """The verdict of ``attn(q, k, v) -> o`` on the cell's first shape (see the module docstring)."""
    from ...flash import reference_attention

    seq, d, causal = cell["seqs"][0], cell["d_heads"][0], bool(cell.get("causal", True))
    tol = TOLERANCE.get(cell["dtype"], 1e-2)
    out = {"seq": seq, "d": d, "dtype": cell["dtype"], "causal": causal, "tolerance": tol}
    gen = torch.Generator().manual_seed(cell.get("seed", 0))
    q, k, v = (torch.randn(cell["batch"], seq, d, generator=gen).to(cell["device"], dtype) for _ in range(3))
    try:
        with torch.no_grad():
            o = attn(q, k, v)
        if not isinstance(o, torch.Tensor) or o.shape != q.shape:
            raise ValueError(f"returned {tuple(o.shape) if isinstance(o, torch.Tensor) else type(o).__name__} "
                             f"for q of shape {tuple(q.shape)}")
    except Exception as exc:  # the timed passes record their own failure
        return {**out, "status": "error", "message": f"{type(exc).__name__}: {str(exc).strip()[:300]}"}
    ref = reference_attention(q, k, v, is_causal=causal)
    out["max_abs_error"] = (o.float() - ref).abs().max().item()
    if _worst_ratio(o, ref, tol) <= 1.0:
        return {**out, "status": "ok"}
    if causal and _worst_ratio(o, reference_attention(q, k, v, is_causal=False), tol) <= 1.0:
        return {**out, "status": "not_causal"}
    return {**out, "status": "wrong"}
