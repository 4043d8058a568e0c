"""Plain (materialised) scaled dot-product attention used as the ground truth.

Shapes: ``q`` is (..., n_queries, d), ``k`` and ``v`` are (..., n_keys, d).
Everything is computed in float32 regardless of the input dtype.
"""

from __future__ import annotations

import math

import torch

# Additive score for masked (query, key) pairs, as prescribed by the handout.
MASK_VALUE = -1e6


def causal_mask(n_queries: int, n_keys: int, device=None) -> torch.Tensor:
    """Boolean (n_queries, n_keys) matrix, True where query i may attend key j (j <= i)."""
    qi = torch.arange(n_queries, device=device)[:, None]  # (n_queries, 1)
    kj = torch.arange(n_keys, device=device)[None, :]  # (1, n_keys)
    return kj <= qi  # (n_queries, n_keys)


def attention_scores(q: torch.Tensor, k: torch.Tensor, is_causal: bool = False) -> torch.Tensor:
    """Scaled, masked scores S = q kᵀ / sqrt(d) (+ MASK_VALUE where masked), float32."""
    d = q.shape[-1]
    s = q.float() @ k.float().transpose(-1, -2) / math.sqrt(d)  # (..., n_queries, n_keys)
    if is_causal:
        keep = causal_mask(q.shape[-2], k.shape[-2], device=q.device)  # (n_queries, n_keys)
        s = torch.where(keep, s, s + MASK_VALUE)
    return s


def reference_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = False,
    return_lse: bool = False,
):
    """softmax(q kᵀ / sqrt(d) + mask) v in float32.

    Returns ``o`` of shape (..., n_queries, d) and, if ``return_lse``, also the
    row-wise logsumexp ``lse`` of the scores, shape (..., n_queries).
    """
    s = attention_scores(q, k, is_causal)  # (..., n_queries, n_keys)
    lse = torch.logsumexp(s, dim=-1)  # (..., n_queries)
    p = torch.exp(s - lse[..., None])  # (..., n_queries, n_keys)
    o = p @ v.float()  # (..., n_queries, d)
    if return_lse:
        return o, lse
    return o
