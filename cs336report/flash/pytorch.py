"""FlashAttention-2 in plain PyTorch: a tiled forward and a recomputing backward.

Inputs are (batch, seq, d) (any number of leading dims is accepted and
flattened into one batch dim).  The forward follows Algorithm 1 of
FlashAttention-2: for each query tile it sweeps the key tiles while keeping a
running row maximum ``m``, a running row sum ``l`` and an unnormalised output
accumulator, then normalises once at the end and records the logsumexp
``L = m + log l``.  Tiles are processed in float32.

The backward recomputes the probabilities from ``L`` instead of storing them:

    D  = rowsum(O * dO)          P  = exp(S - L)
    dV = Pᵀ dO                   dP = dO Vᵀ
    dS = P * (dP - D)            dQ = dS K / sqrt(d),  dK = dSᵀ Q / sqrt(d)

By default it runs through ``torch.compile``; if compilation is unavailable or
fails, it falls back to eager execution (see :func:`set_backward_mode`).
"""

from __future__ import annotations

import math
import os
import warnings

import torch

from .reference import MASK_VALUE

DEFAULT_Q_TILE = 64
DEFAULT_K_TILE = 64
MIN_TILE = 16

_VALID_MODES = ("compile", "eager")
_backward_mode = os.environ.get("CS336_FLASH_BACKWARD", "compile")
_compiled_backward = None
_compile_failed = False


def _check_tile(name: str, size: int) -> int:
    size = int(size)
    if size < MIN_TILE:
        raise ValueError(f"{name} must be at least {MIN_TILE}, got {size}")
    return size


def _flatten(x: torch.Tensor) -> torch.Tensor:
    """(..., n, d) -> (batch, n, d)."""
    return x.reshape(-1, x.shape[-2], x.shape[-1])


def flash_forward_pytorch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = False,
    q_tile_size: int = DEFAULT_Q_TILE,
    k_tile_size: int = DEFAULT_K_TILE,
):
    """Tiled FlashAttention-2 forward.

    q: (batch, n_queries, d); k, v: (batch, n_keys, d).
    Returns o (batch, n_queries, d) in q's dtype and L (batch, n_queries) in float32.
    """
    bq = _check_tile("q_tile_size", q_tile_size)
    bk = _check_tile("k_tile_size", k_tile_size)
    batch, n_q, d = q.shape
    n_k = k.shape[1]
    scale = 1.0 / math.sqrt(d)

    o = torch.empty(batch, n_q, d, dtype=q.dtype, device=q.device)  # (batch, n_q, d)
    lse = torch.empty(batch, n_q, dtype=torch.float32, device=q.device)  # (batch, n_q)

    for q_start in range(0, n_q, bq):
        q_end = min(q_start + bq, n_q)
        q_i = q[:, q_start:q_end].float()  # (batch, bq, d)
        rows = torch.arange(q_start, q_end, device=q.device)  # (bq,)
        m_i = torch.full((batch, q_end - q_start), float("-inf"), device=q.device)  # (batch, bq)
        l_i = torch.zeros(batch, q_end - q_start, device=q.device)  # (batch, bq)
        acc = torch.zeros(batch, q_end - q_start, d, device=q.device)  # (batch, bq, d)

        # Causal: key tiles that start after the last query of this tile are fully masked.
        k_stop = min(n_k, q_end) if is_causal else n_k
        for k_start in range(0, k_stop, bk):
            k_end = min(k_start + bk, n_k)
            k_j = k[:, k_start:k_end].float()  # (batch, bk, d)
            v_j = v[:, k_start:k_end].float()  # (batch, bk, d)
            s = q_i @ k_j.transpose(1, 2) * scale  # (batch, bq, bk)
            if is_causal:
                cols = torch.arange(k_start, k_end, device=q.device)  # (bk,)
                masked = cols[None, :] > rows[:, None]  # (bq, bk)
                s = s + masked.to(s.dtype) * MASK_VALUE
            m_new = torch.maximum(m_i, s.amax(dim=-1))  # (batch, bq)
            p = torch.exp(s - m_new[..., None])  # (batch, bq, bk)
            alpha = torch.exp(m_i - m_new)  # (batch, bq)
            l_i = alpha * l_i + p.sum(dim=-1)
            acc = alpha[..., None] * acc + p @ v_j  # (batch, bq, d)
            m_i = m_new

        o[:, q_start:q_end] = (acc / l_i[..., None]).to(q.dtype)
        lse[:, q_start:q_end] = m_i + torch.log(l_i)
    return o, lse


def flash_backward_pytorch(q, k, v, o, do, lse, is_causal: bool = False):
    """Recomputing FlashAttention-2 backward (whole matrices, no tiling).

    q, o, do: (batch, n_q, d); k, v: (batch, n_k, d); lse: (batch, n_q).
    Returns dq, dk, dv in the dtypes of q, k, v.
    """
    d = q.shape[-1]
    scale = 1.0 / math.sqrt(d)
    qf, kf, vf, of, dof = q.float(), k.float(), v.float(), o.float(), do.float()
    delta = (of * dof).sum(dim=-1)  # (batch, n_q)
    s = qf @ kf.transpose(-1, -2) * scale  # (batch, n_q, n_k)
    if is_causal:
        n_q, n_k = q.shape[-2], k.shape[-2]
        rows = torch.arange(n_q, device=q.device)[:, None]  # (n_q, 1)
        cols = torch.arange(n_k, device=q.device)[None, :]  # (1, n_k)
        s = torch.where(cols > rows, s + MASK_VALUE, s)
    p = torch.exp(s - lse[..., None])  # (batch, n_q, n_k)
    dv = p.transpose(-1, -2) @ dof  # (batch, n_k, d)
    dp = dof @ vf.transpose(-1, -2)  # (batch, n_q, n_k)
    ds = p * (dp - delta[..., None])  # (batch, n_q, n_k)
    dq = ds @ kf * scale  # (batch, n_q, d)
    dk = ds.transpose(-1, -2) @ qf * scale  # (batch, n_k, d)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def set_backward_mode(mode: str) -> None:
    """Choose how FlashAttention2PyTorch runs its backward: "compile" or "eager"."""
    global _backward_mode, _compile_failed
    if mode not in _VALID_MODES:
        raise ValueError(f"mode must be one of {_VALID_MODES}, got {mode!r}")
    _backward_mode = mode
    _compile_failed = False


def backward_mode() -> str:
    """The backward actually in use: "compile", or "eager" (chosen, or after a failed compile)."""
    if _backward_mode == "compile" and not _compile_failed:
        return "compile"
    return "eager"


def _run_backward(*args):
    global _compiled_backward, _compile_failed
    if backward_mode() == "compile":
        try:
            if _compiled_backward is None:
                _compiled_backward = torch.compile(flash_backward_pytorch, dynamic=None)
            return _compiled_backward(*args)
        except Exception as exc:  # no C++/Triton toolchain, unsupported backend, ...
            _compile_failed = True
            warnings.warn(
                f"torch.compile of the FlashAttention backward failed ({type(exc).__name__}: {exc}); "
                "using the eager backward instead",
                RuntimeWarning,
                stacklevel=3,
            )
    return flash_backward_pytorch(*args)


class FlashAttention2PyTorch(torch.autograd.Function):
    """FlashAttention-2 with a tiled PyTorch forward and a recomputing backward.

    ``apply(Q, K, V, is_causal=False, q_tile_size=64, k_tile_size=64)`` with
    Q: (..., n_q, d), K, V: (..., n_k, d).  Returns O shaped like Q.  Saved for
    backward: L (batch, n_q), Q, K, V, O (flattened to one batch dim).
    """

    @staticmethod
    def forward(ctx, Q, K, V, is_causal=False, q_tile_size=DEFAULT_Q_TILE, k_tile_size=DEFAULT_K_TILE):
        lead = Q.shape[:-2]
        q, k, v = _flatten(Q), _flatten(K), _flatten(V)  # (batch, n, d)
        o, lse = flash_forward_pytorch(q, k, v, bool(is_causal), q_tile_size, k_tile_size)
        ctx.save_for_backward(lse, q, k, v, o)
        ctx.is_causal = bool(is_causal)
        ctx.lead = lead
        return o.reshape(*lead, *o.shape[-2:])

    @staticmethod
    def backward(ctx, dO):
        lse, q, k, v, o = ctx.saved_tensors
        do = _flatten(dO).contiguous()  # (batch, n_q, d)
        dq, dk, dv = _run_backward(q, k, v, o, do, lse, ctx.is_causal)
        lead = ctx.lead
        return (
            dq.reshape(*lead, *dq.shape[-2:]),
            dk.reshape(*lead, *dk.shape[-2:]),
            dv.reshape(*lead, *dv.shape[-2:]),
            None,
            None,
            None,
        )
