"""FlashAttention-2 (forward and backward) in PyTorch and Triton.

Public API (q: (batch, n_q, d), k, v: (batch, n_k, d)):

* ``flash_attention(q, k, v, is_causal=False, impl="triton" | "pytorch", **tiles)`` -> o (batch, n_q, d)
* ``FlashAttention2PyTorch.apply(Q, K, V, is_causal, q_tile_size, k_tile_size)``
* ``FlashAttention2Triton.apply(Q, K, V, is_causal, q_tile_size, k_tile_size, autotune)``
* ``reference_attention(q, k, v, is_causal, return_lse)`` -> o (and lse (batch, n_q)) in float32
* ``flash_forward_pytorch`` / ``flash_backward_pytorch`` and ``flash_forward_triton`` /
  ``flash_backward_triton``: the raw passes, forward returning (o, L)
* ``set_backward_mode("compile" | "eager")`` / ``backward_mode()``: the PyTorch backward
* ``triton_available()``, ``last_triton_config()``: Triton status and the tile sizes last used

Importing this package does not import Triton; the Triton names are loaded on
first use from :mod:`cs336report.flash.triton_kernels`.
"""

from __future__ import annotations

import importlib

from .pytorch import (
    FlashAttention2PyTorch,
    backward_mode,
    flash_backward_pytorch,
    flash_forward_pytorch,
    set_backward_mode,
)
from .reference import MASK_VALUE, reference_attention

_TRITON_NAMES = {
    "FlashAttention2Triton",
    "TritonUnavailableError",
    "flash_backward_triton",
    "flash_forward_triton",
    "last_triton_config",
    "triton_available",
}

IMPLS = ("triton", "pytorch")


def __getattr__(name):
    if name in _TRITON_NAMES:
        return getattr(importlib.import_module(".triton_kernels", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def flash_attention(
    q,
    k,
    v,
    is_causal: bool = False,
    impl: str = "triton",
    q_tile_size: int | None = None,
    k_tile_size: int | None = None,
    autotune: bool = False,
):
    """FlashAttention-2 with autograd support.

    q: (..., n_q, d); k, v: (..., n_k, d); returns o (..., n_q, d) in q's dtype.
    ``impl="triton"`` needs CUDA tensors (or ``TRITON_INTERPRET=1``);
    ``impl="pytorch"`` runs anywhere.  ``autotune`` only applies to Triton.
    """
    if impl == "pytorch":
        from .pytorch import DEFAULT_K_TILE, DEFAULT_Q_TILE

        return FlashAttention2PyTorch.apply(
            q, k, v, bool(is_causal), q_tile_size or DEFAULT_Q_TILE, k_tile_size or DEFAULT_K_TILE
        )
    if impl == "triton":
        from .triton_kernels import FlashAttention2Triton

        return FlashAttention2Triton.apply(q, k, v, bool(is_causal), q_tile_size, k_tile_size, bool(autotune))
    raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")


__all__ = [
    "IMPLS",
    "MASK_VALUE",
    "FlashAttention2PyTorch",
    "FlashAttention2Triton",
    "TritonUnavailableError",
    "backward_mode",
    "flash_attention",
    "flash_backward_pytorch",
    "flash_backward_triton",
    "flash_forward_pytorch",
    "flash_forward_triton",
    "last_triton_config",
    "reference_attention",
    "set_backward_mode",
    "triton_available",
]
