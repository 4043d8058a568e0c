"""FlashAttention-2 in Triton: the launchers, the autograd function and its custom operators.

Layout: Q is (batch, n_queries, d), K and V are (batch, n_keys, d), O is like Q and L (the
logsumexp of each query's scores) is (batch, n_queries), float32. ``d`` must be a power of two,
at least 16. The kernels live in :mod:`.triton_fwd` (forward) and :mod:`.triton_bwd` (backward),
their tile helpers in :mod:`.triton_tiles`.

The backward is fused by default (:func:`set_triton_backward`): one kernel sweeps the query tiles
once per key tile and adds each tile's share of dQ to a float32 buffer with atomic adds; the
two-pass backward (a dK/dV kernel, then a dQ kernel) is kept for a dQ that sums in the same order
on every run. On Hopper GPUs (compute capability 9.0) the kernels move their tiles with tensor
descriptors (TMA) when the strides allow (:func:`.triton_tiles.tma_usable`); elsewhere, and
under Triton's interpreter, with pointers.

Importing this module without Triton works; the Triton entry points then raise
``TritonUnavailableError``. With ``TRITON_INTERPRET=1`` set before Triton is imported the kernels
run on CPU tensors through Triton's interpreter.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from ..measure.compiling import pin_ptxas
from .triton_env import (  # noqa: F401  (re-exported: tests reach them here)
    _TRITON_IMPORT_ERROR,
    HAS_TRITON,
    INTERPRET,
    tl,
    triton,
)

if HAS_TRITON:
    from .triton_bwd import (
        flash_bwd_delta_kernel,
        flash_bwd_dkdv_kernel,
        flash_bwd_dq_convert_kernel,
        flash_bwd_dq_kernel,
        flash_bwd_kernel,
    )
    from .triton_fwd import flash_fwd_kernel
    from .triton_tiles import prepare_tma, tma_usable
from .triton_config import (  # noqa: F401  (re-exported: callers and tests reach them here)
    AUTOTUNE_TILES,
    DEFAULT_NUM_STAGES,
    DEFAULT_NUM_WARPS,
    DEFAULT_TILES,
    TRITON_TUNE_MS,
    _candidates,
    _last_config,
    _record,
    _record_autotuned,
    _seen_timings,
    _shape_key,
    _tile_args,
    _tuner_bench,
    default_tiles,
    last_triton_config,
    tuning_budget,
)

# Query rows per program of the Dl = rowsum(O * dO) and dQ conversion kernels.
DELTA_BLOCK = 64

BACKWARDS = ("fused", "two_pass")
_backward = "fused"


class TritonUnavailableError(RuntimeError):
    """Raised when a Triton code path is requested but cannot run here."""


def set_triton_backward(kind: str) -> None:
    """``"fused"`` (the default: one kernel, dQ by atomic adds) or ``"two_pass"`` (dK/dV, then dQ)."""
    global _backward
    if kind not in BACKWARDS:
        raise ValueError(f"backward must be one of {BACKWARDS}, got {kind!r}")
    _backward = kind


def triton_backward() -> str:
    """The backward :func:`flash_backward_triton` runs: ``"fused"`` or ``"two_pass"``."""
    return _backward


def triton_available() -> bool:
    """True when Triton imported successfully (kernels may still need a GPU or the interpreter)."""
    return HAS_TRITON


def _require_triton(*tensors: torch.Tensor) -> None:
    if not HAS_TRITON:
        raise TritonUnavailableError(
            f"Triton is not installed or failed to import ({_TRITON_IMPORT_ERROR}); "
            "use impl='pytorch' instead"
        )
    if not INTERPRET and not all(t.is_cuda for t in tensors):
        raise TritonUnavailableError(
            "the Triton kernels need CUDA tensors; to run them on CPU, set TRITON_INTERPRET=1 "
            "before Triton is imported"
        )
    if not INTERPRET:
        pin_ptxas()


def _check_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
        raise ValueError("expected q, k, v of shape (batch, seq, d)")
    d = q.shape[-1]
    if k.shape[-1] != d or v.shape[-1] != d or k.shape[1] != v.shape[1]:
        raise ValueError(f"incompatible shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if d < 16 or d & (d - 1):
        raise ValueError(f"head dim must be a power of two >= 16, got {d}")


def _rows_contiguous(t: torch.Tensor) -> torch.Tensor:
    """``t`` with unit stride along its last dimension, which the kernels assume."""
    return t if t.stride(-1) == 1 else t.contiguous()


if HAS_TRITON:
    def _zero_dq(nargs):
        """Before each launch of the autotuned fused backward (timed or not): a zeroed dQ buffer."""
        nargs["dQ_ptr"].zero_()

    def _configs(tiles, pre_hook=None):
        return [triton.Config({"Q_TILE_SIZE": bq, "K_TILE_SIZE": bk}, num_warps=w, num_stages=st, pre_hook=pre_hook)
                for (bq, bk, w, st) in tiles]

    _AUTOTUNE_KEY = ["N_QUERIES", "N_KEYS", "D", "is_causal"]
    flash_fwd_kernel_autotuned = triton.autotune(configs=_configs(AUTOTUNE_TILES["fwd"]), key=_AUTOTUNE_KEY,
                                                 do_bench=_tuner_bench)(flash_fwd_kernel)
    flash_bwd_kernel_autotuned = triton.autotune(configs=_configs(AUTOTUNE_TILES["bwd"], _zero_dq),
                                                 key=_AUTOTUNE_KEY, do_bench=_tuner_bench)(flash_bwd_kernel)
    flash_bwd_dkdv_kernel_autotuned = triton.autotune(configs=_configs(AUTOTUNE_TILES["bwd_dkdv"]),
                                                      key=_AUTOTUNE_KEY, do_bench=_tuner_bench)(flash_bwd_dkdv_kernel)
    flash_bwd_dq_kernel_autotuned = triton.autotune(configs=_configs(AUTOTUNE_TILES["bwd_dq"]),
                                                    key=_AUTOTUNE_KEY, do_bench=_tuner_bench)(flash_bwd_dq_kernel)


def _use_tma(tma: bool | None, *tensors: torch.Tensor) -> bool:
    """Tensor descriptors when asked (``tma``) or, with ``tma=None``, when :func:`tma_usable`; then
    Triton gets its allocator for them in this thread."""
    use = tma_usable(*tensors) if tma is None else bool(tma)
    if use:
        prepare_tma()
    return use


def flash_forward_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = False,
    q_tile_size: int | None = None,
    k_tile_size: int | None = None,
    autotune: bool = False,
    num_warps: int | None = None,
    num_stages: int | None = None,
    *,
    tma: bool | None = None,
):
    """Launch the forward kernel.

    q: (batch, n_q, d); k, v: (batch, n_k, d).  Returns o (batch, n_q, d) in
    q's dtype and L (batch, n_q) in float32.  With ``autotune`` the tile sizes
    are chosen by ``triton.autotune`` (see :func:`last_triton_config`). ``tma``: tensor
    descriptors (True), pointers (False), or whichever the device and strides allow (None).
    """
    _require_triton(q, k, v)
    _check_shapes(q, k, v)
    q, k, v = (_rows_contiguous(t) for t in (q, k, v))
    batch, n_q, d = q.shape
    n_k = k.shape[1]
    o = torch.empty_like(q)  # (batch, n_q, d)
    lse = torch.empty(batch, n_q, dtype=torch.float32, device=q.device)  # (batch, n_q)
    use_tma = _use_tma(tma, q, k, v, o)
    args = (
        q, k, v, o, lse,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), o.stride(0), o.stride(1),
        lse.stride(0),
        n_q, n_k, 1.0 / math.sqrt(d),
    )
    if autotune:
        grid = lambda meta: (triton.cdiv(n_q, meta["Q_TILE_SIZE"]), batch)  # noqa: E731
        flash_fwd_kernel_autotuned[grid](*args, D=d, is_causal=bool(is_causal), USE_TMA=use_tma)
        _record_autotuned("fwd", flash_fwd_kernel_autotuned, _shape_key(q, k, is_causal), use_tma)
    else:
        bq, bk, warps, stages = _tile_args("fwd", q, q_tile_size, k_tile_size, num_warps, num_stages)
        flash_fwd_kernel[(triton.cdiv(n_q, bq), batch)](
            *args, D=d, Q_TILE_SIZE=bq, K_TILE_SIZE=bk, is_causal=bool(is_causal), USE_TMA=use_tma,
            num_warps=warps, num_stages=stages,
        )
        _record("fwd", bq, bk, warps, stages, False, use_tma)
    return o, lse


def flash_backward_triton(
    q, k, v, o, do, lse,
    is_causal: bool = False,
    q_tile_size: int | None = None,
    k_tile_size: int | None = None,
    autotune: bool = False,
    num_warps: int | None = None,
    num_stages: int | None = None,
    *,
    tma: bool | None = None,
    tma_reduce: bool | None = None,
):
    """The backward of :func:`triton_backward`'s kind (fused unless set otherwise).

    q, o, do: (batch, n_q, d); k, v: (batch, n_k, d); lse: (batch, n_q) float32.
    Returns dq, dk, dv in the dtypes of q, k, v. ``tma`` as in :func:`flash_forward_triton`;
    ``tma_reduce`` (fused only): dQ's atomic adds as tensor-descriptor reductions (default: as ``tma``).
    """
    _require_triton(q, k, v, do)
    _check_shapes(q, k, v)
    q, k, v, o, do = (_rows_contiguous(t) for t in (q, k, v, o, do))
    batch, n_q, d = q.shape
    lse = lse.contiguous()
    delta = torch.empty_like(lse)  # (batch, n_q): rowsum(O * dO), same layout as lse
    flash_bwd_delta_kernel[(triton.cdiv(n_q, DELTA_BLOCK), batch)](
        o, do, delta, o.stride(0), o.stride(1), do.stride(0), do.stride(1), delta.stride(0), n_q,
        D=d, BLOCK=DELTA_BLOCK,
    )
    dq = torch.empty_like(q)  # (batch, n_q, d)
    dk = torch.empty_like(k)  # (batch, n_k, d)
    dv = torch.empty_like(v)  # (batch, n_k, d)
    use_tma = _use_tma(tma, q, k, v, do, dq, dk, dv)
    common = (q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
              do.stride(0), do.stride(1), lse.stride(0))
    tiles = (q_tile_size, k_tile_size, num_warps, num_stages)
    for name in ("bwd", "bwd_dkdv", "bwd_dq"):
        _last_config.pop(name, None)
    if _backward == "fused":
        _fused_backward(q, k, v, do, lse, delta, dq, dk, dv, common, bool(is_causal), tiles, autotune, use_tma,
                        use_tma if tma_reduce is None else bool(tma_reduce))
    else:
        _two_pass_backward(q, k, v, do, lse, delta, dq, dk, dv, common, bool(is_causal), tiles, autotune, use_tma)
    return dq, dk, dv


def _fused_backward(q, k, v, do, lse, delta, dq, dk, dv, common, causal, tiles, autotune, use_tma, tma_reduce):
    batch, n_q, d = q.shape
    n_k = k.shape[1]
    acc = torch.empty(q.shape, dtype=torch.float32, device=q.device)  # (batch, n_q, d): unscaled dQ
    args = (q, k, v, do, lse, delta, acc, dk, dv, *common, acc.stride(0), acc.stride(1),
            dk.stride(0), dk.stride(1), dv.stride(0), dv.stride(1), n_q, n_k, 1.0 / math.sqrt(d))
    if autotune:  # each config's pre-hook zeroes the buffer, before every timed launch and the last one
        grid = lambda meta: (triton.cdiv(n_k, meta["K_TILE_SIZE"]), batch)  # noqa: E731
        flash_bwd_kernel_autotuned[grid](*args, D=d, is_causal=causal, USE_TMA=use_tma, TMA_REDUCE=tma_reduce)
        _record_autotuned("bwd", flash_bwd_kernel_autotuned, _shape_key(q, k, causal), use_tma)
    else:
        bq, bk, warps, stages = _tile_args("bwd", q, *tiles)
        acc.zero_()
        flash_bwd_kernel[(triton.cdiv(n_k, bk), batch)](
            *args, D=d, Q_TILE_SIZE=bq, K_TILE_SIZE=bk, is_causal=causal, USE_TMA=use_tma, TMA_REDUCE=tma_reduce,
            num_warps=warps, num_stages=stages,
        )
        _record("bwd", bq, bk, warps, stages, False, use_tma)
    flash_bwd_dq_convert_kernel[(triton.cdiv(n_q, DELTA_BLOCK), batch)](
        acc, dq, acc.stride(0), acc.stride(1), dq.stride(0), dq.stride(1), n_q, 1.0 / math.sqrt(d),
        D=d, BLOCK=DELTA_BLOCK,
    )


def _two_pass_backward(q, k, v, do, lse, delta, dq, dk, dv, common, causal, tiles, autotune, use_tma):
    batch, n_q, d = q.shape
    n_k = k.shape[1]
    scale = 1.0 / math.sqrt(d)
    dkdv_args = (q, k, v, do, lse, delta, dk, dv, *common,
                 dk.stride(0), dk.stride(1), dv.stride(0), dv.stride(1), n_q, n_k, scale)
    dq_args = (q, k, v, do, lse, delta, dq, *common, dq.stride(0), dq.stride(1), n_q, n_k, scale)
    if autotune:
        shape = _shape_key(q, k, causal)
        grid_k = lambda meta: (triton.cdiv(n_k, meta["K_TILE_SIZE"]), batch)  # noqa: E731
        grid_q = lambda meta: (triton.cdiv(n_q, meta["Q_TILE_SIZE"]), batch)  # noqa: E731
        flash_bwd_dkdv_kernel_autotuned[grid_k](*dkdv_args, D=d, is_causal=causal, USE_TMA=use_tma)
        _record_autotuned("bwd_dkdv", flash_bwd_dkdv_kernel_autotuned, shape, use_tma)
        flash_bwd_dq_kernel_autotuned[grid_q](*dq_args, D=d, is_causal=causal, USE_TMA=use_tma)
        _record_autotuned("bwd_dq", flash_bwd_dq_kernel_autotuned, shape, use_tma)
        return
    bq, bk, warps, stages = _tile_args("bwd_dkdv", q, *tiles)
    flash_bwd_dkdv_kernel[(triton.cdiv(n_k, bk), batch)](
        *dkdv_args, D=d, Q_TILE_SIZE=bq, K_TILE_SIZE=bk, is_causal=causal, USE_TMA=use_tma,
        num_warps=warps, num_stages=stages,
    )
    _record("bwd_dkdv", bq, bk, warps, stages, False, use_tma)
    bq, bk, warps, stages = _tile_args("bwd_dq", q, *tiles)
    flash_bwd_dq_kernel[(triton.cdiv(n_q, bq), batch)](
        *dq_args, D=d, Q_TILE_SIZE=bq, K_TILE_SIZE=bk, is_causal=causal, USE_TMA=use_tma,
        num_warps=warps, num_stages=stages,
    )
    _record("bwd_dq", bq, bk, warps, stages, False, use_tma)


# The two passes as PyTorch custom operators: torch.compile (the leaderboard's harness compiles
# the whole attention call) treats them as opaque calls with known output shapes instead of
# tracing into the Triton launches, and the kernels run exactly as they do in eager mode.
@torch.library.custom_op("cs336report::flash_fwd", mutates_args=())
def _flash_fwd_op(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool,
    q_tile_size: Optional[int], k_tile_size: Optional[int], autotune: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    return flash_forward_triton(q, k, v, is_causal, q_tile_size, k_tile_size, autotune)


@_flash_fwd_op.register_fake
def _flash_fwd_shapes(q, k, v, is_causal, q_tile_size, k_tile_size, autotune):
    return torch.empty_like(q), q.new_empty(q.shape[:2], dtype=torch.float32)


@torch.library.custom_op("cs336report::flash_bwd", mutates_args=())
def _flash_bwd_op(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, do: torch.Tensor, lse: torch.Tensor,
    is_causal: bool, q_tile_size: Optional[int], k_tile_size: Optional[int], autotune: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return flash_backward_triton(q, k, v, o, do, lse, is_causal, q_tile_size, k_tile_size, autotune)


@_flash_bwd_op.register_fake
def _flash_bwd_shapes(q, k, v, o, do, lse, is_causal, q_tile_size, k_tile_size, autotune):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


class FlashAttention2Triton(torch.autograd.Function):
    """FlashAttention-2 with Triton forward and backward kernels.

    ``apply(Q, K, V, is_causal=False, q_tile_size=None, k_tile_size=None, autotune=False)``
    with Q: (..., n_q, d), K, V: (..., n_k, d); returns O shaped like Q.  Saved
    for backward: L (batch, n_q), Q, K, V, O (flattened to one batch dim).
    """

    @staticmethod
    def forward(ctx, Q, K, V, is_causal=False, q_tile_size=None, k_tile_size=None, autotune=False):
        lead = Q.shape[:-2]
        q = Q.reshape(-1, *Q.shape[-2:])  # (batch, n_q, d)
        k = K.reshape(-1, *K.shape[-2:])  # (batch, n_k, d)
        v = V.reshape(-1, *V.shape[-2:])  # (batch, n_k, d)
        o, lse = torch.ops.cs336report.flash_fwd(q, k, v, bool(is_causal), q_tile_size, k_tile_size, bool(autotune))
        ctx.save_for_backward(lse, q, k, v, o)
        ctx.is_causal = bool(is_causal)
        ctx.tiles = (q_tile_size, k_tile_size, autotune)
        ctx.lead = lead
        return o.reshape(*lead, *o.shape[-2:])

    @staticmethod
    def backward(ctx, dO):
        lse, q, k, v, o = ctx.saved_tensors
        do = dO.reshape(-1, *dO.shape[-2:])  # (batch, n_q, d)
        q_tile, k_tile, autotune = ctx.tiles
        dq, dk, dv = torch.ops.cs336report.flash_bwd(q, k, v, o, do, lse, ctx.is_causal, q_tile, k_tile, autotune)
        lead = ctx.lead
        return (
            dq.reshape(*lead, *dq.shape[-2:]),
            dk.reshape(*lead, *dk.shape[-2:]),
            dv.reshape(*lead, *dv.shape[-2:]),
            None,
            None,
            None,
            None,
        )
