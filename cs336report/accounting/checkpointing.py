"""Activation checkpointing of a stack of N Transformer blocks: peak memory against the grouping.

The model (gradient_checkpointing (a) and (b) of the 2026 handout): a block's input, the residual
stream, takes ``r`` bytes, and running one block keeps ``a`` bytes of tensors saved for its
backward. With one level of checkpoints of ``k`` blocks each, the forward pass keeps the N/k group
inputs, and the backward pass recomputes one group at a time, holding its k blocks' saved tensors:

    peak(k) = base + (N / k) r + k a,    best k* = sqrt(N r / a),    peak(k*) = base + 2 sqrt(N r a)

Nested checkpoints (each group itself checkpointed, recursively) trade compute for memory: halving
at every level keeps O(log N) inputs and recomputes each block O(log N) times, the memory-minimal
arrangement when compute is free. :func:`derivation` does the algebra with sympy;
:func:`fit_block_bytes` reads ``a`` off two measured peaks (no checkpoint at all has no group input
to keep beyond the blocks' own saves, so the fit uses one group of every block and groups of one).
"""

from __future__ import annotations

import math

import sympy as sp

N, k, r, a = sp.symbols("N k r a", positive=True)


def peak_expression() -> sp.Expr:
    """The peak above the base, in the group size ``k``: N/k group inputs and one group's saves."""
    return N / k * r + k * a


def derivation() -> dict:
    """The best single-level group size and its peak, and the nested arrangement's order of growth,
    each as sympy text and LaTeX."""
    peak = peak_expression()
    best = sp.solve(sp.diff(peak, k), k)
    (k_best,) = [s for s in best if s.is_positive is not False]
    at_best = sp.simplify(peak.subs(k, k_best))
    steps = [
        {"what": "peak above the base, one level of groups of k blocks", "expr": peak},
        {"what": "its derivative in k, zero at the best group size", "expr": sp.diff(peak, k)},
        {"what": "best group size", "expr": k_best},
        {"what": "peak at the best group size", "expr": at_best},
        {"what": "nested (recursive halving): group inputs kept", "expr": sp.log(N, 2) * r + a},
        {"what": "nested (recursive halving): block forwards run", "expr": N * sp.log(N, 2)},
    ]
    return {"steps": [{"what": s["what"], "sympy": sp.sstr(s["expr"]), "latex": sp.latex(s["expr"])}
                      for s in steps],
            "k_best": sp.sstr(k_best), "peak_best": sp.sstr(at_best)}


def residual_bytes(batch: int, context: int, d_model: int, bytes_per_value: int = 4) -> int:
    """``r``: one residual-stream activation, batch x context x d_model values."""
    return batch * context * d_model * bytes_per_value


def fit_block_bytes(peak_one_group: float, peak_groups_of_one: float, num_layers: int, r_bytes: float) -> float:
    """``a`` from the peaks with one group of every block (r + N a) and N groups of one (N r + a):
    their difference is (N - 1)(a - r)."""
    return r_bytes + (peak_one_group - peak_groups_of_one) / (num_layers - 1)


def best_group(num_layers: int, r_bytes: float, a_bytes: float) -> float:
    """k* = sqrt(N r / a), the best group size of the model (not rounded to a divisor)."""
    return math.sqrt(num_layers * r_bytes / a_bytes)


def modelled_peak(group: int, num_layers: int, r_bytes: float, a_bytes: float) -> float:
    """peak(k) above the base: ceil(N / k) group inputs and one group's saves."""
    return math.ceil(num_layers / group) * r_bytes + group * a_bytes


def groupings(num_layers: int) -> list[int]:
    """The single-level groupings that split N blocks evenly: the divisors of N."""
    return [g for g in range(1, num_layers + 1) if num_layers % g == 0]
