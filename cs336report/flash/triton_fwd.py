"""FlashAttention-2 forward as a Triton kernel.

``flash_fwd_kernel``: grid (T_q, batch); one program owns a query tile and sweeps the key tiles,
keeping the running max/sum and the output accumulator in float32 registers. Scores are handled in
base 2 (``exp2``), which is the same softmax with ``scale * log2(e)`` folded into the scores.

The sweep runs in two parts: the key tiles every row of the program's tile sees whole, loaded
without bounds checks and used without a mask, then the few that straddle the causal diagonal or
the ragged end of the sequence, which are bounds-checked and masked. Key tiles entirely above the
diagonal are skipped by the loop bounds. Query tiles are taken last to first, so that under a
causal mask the longest programs start first. Tiles move through :mod:`.triton_tiles` (tensor
descriptors on Hopper, pointers elsewhere).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_tiles import _dot, _load, _matrix, _store


@triton.jit
def _fwd_tiles(
    acc, l_i, m_i, q, k_src, v_src, lo, hi, rows, qk_scale, N_KEYS, stride_kk, stride_vk,
    Q_TILE_SIZE: tl.constexpr, K_TILE_SIZE: tl.constexpr, D: tl.constexpr, MASKED: tl.constexpr,
    is_causal: tl.constexpr, USE_TMA: tl.constexpr,
):
    """Fold key tiles ``lo .. hi-1`` into one query tile's running max, sum and output.

    MASKED tiles (the causal diagonal, a ragged last tile) are bounds-checked and masked;
    the others are whole tiles that every query of the tile sees, used as loaded.
    """
    cols0 = tl.arange(0, K_TILE_SIZE)  # (Bk,)
    for j in range(lo, hi):
        k_start = j * K_TILE_SIZE
        k = _load(k_src, k_start, stride_kk, N_KEYS, K_TILE_SIZE, D, MASKED, USE_TMA)  # (Bk, D)
        v = _load(v_src, k_start, stride_vk, N_KEYS, K_TILE_SIZE, D, MASKED, USE_TMA)  # (Bk, D)
        # Unscaled scores: the scale goes into the max (one multiply per row) and into exp2's
        # argument as one fused multiply-add per score, instead of a multiply per score first.
        s = _dot(q, tl.trans(k), tl.zeros((Q_TILE_SIZE, K_TILE_SIZE), tl.float32))  # (Bq, Bk)
        if MASKED:
            cols = k_start + cols0  # (Bk,)
            valid = cols[None, :] < N_KEYS  # (1, Bk)
            if is_causal:
                valid = valid & (cols[None, :] <= rows[:, None])  # (Bq, Bk)
            # The handout's -1e6 for masked pairs: finite, so a row with no valid key never gives inf - inf.
            s = tl.where(valid, s, -1e6)
        m_new = tl.maximum(m_i, tl.max(s, axis=1) * qk_scale)  # (Bq,), base 2
        p = tl.exp2(s * qk_scale - m_new[:, None])  # (Bq, Bk)
        alpha = tl.exp2(m_i - m_new)  # (Bq,)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        acc = _dot(p.to(v.dtype), v, acc)  # (Bq, D)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def flash_fwd_kernel(
    Q_ptr, K_ptr, V_ptr,
    O_ptr, L_ptr,
    stride_qb, stride_qq,
    stride_kb, stride_kk,
    stride_vb, stride_vk,
    stride_ob, stride_oq,
    stride_lb,
    N_QUERIES, N_KEYS,
    scale,
    D: tl.constexpr,
    Q_TILE_SIZE: tl.constexpr,
    K_TILE_SIZE: tl.constexpr,
    is_causal: tl.constexpr,
    USE_TMA: tl.constexpr = False,
):
    """O (batch, N_QUERIES, D) and L (batch, N_QUERIES), L the natural-log logsumexp of each row."""
    # Query tiles are taken last to first: under a causal mask the last tiles see the most keys,
    # and starting them first leaves the short ones to fill the machine at the end.
    q_tile = tl.num_programs(0) - 1 - tl.program_id(0)
    b = tl.program_id(1)
    q_start = q_tile * Q_TILE_SIZE

    q_src = _matrix(Q_ptr + b * stride_qb, N_QUERIES, stride_qq, Q_TILE_SIZE, D, USE_TMA)
    k_src = _matrix(K_ptr + b * stride_kb, N_KEYS, stride_kk, K_TILE_SIZE, D, USE_TMA)
    v_src = _matrix(V_ptr + b * stride_vb, N_KEYS, stride_vk, K_TILE_SIZE, D, USE_TMA)
    o_dst = _matrix(O_ptr + b * stride_ob, N_QUERIES, stride_oq, Q_TILE_SIZE, D, USE_TMA)

    q = _load(q_src, q_start, stride_qq, N_QUERIES, Q_TILE_SIZE, D, True, USE_TMA)  # (Bq, D)
    rows = q_start + tl.arange(0, Q_TILE_SIZE)  # (Bq,)
    qk_scale = scale * 1.4426950408889634  # softmax in base 2

    m_i = tl.full((Q_TILE_SIZE,), float("-inf"), dtype=tl.float32)  # running max (base 2)
    l_i = tl.zeros((Q_TILE_SIZE,), dtype=tl.float32)  # running sum
    acc = tl.zeros((Q_TILE_SIZE, D), dtype=tl.float32)  # unnormalised output

    # Key tiles [0, n_full) are whole and seen by every query of the tile; those up to n_tiles
    # (the causal diagonal, a ragged last tile) need the mask.
    if is_causal:
        n_tiles = tl.cdiv(tl.minimum(N_KEYS, q_start + Q_TILE_SIZE), K_TILE_SIZE)
        n_full = tl.minimum((q_start + 1) // K_TILE_SIZE, N_KEYS // K_TILE_SIZE)
    else:
        n_tiles = tl.cdiv(N_KEYS, K_TILE_SIZE)
        n_full = N_KEYS // K_TILE_SIZE
    acc, l_i, m_i = _fwd_tiles(acc, l_i, m_i, q, k_src, v_src, 0, n_full, rows, qk_scale, N_KEYS, stride_kk,
                               stride_vk, Q_TILE_SIZE, K_TILE_SIZE, D, False, is_causal, USE_TMA)
    acc, l_i, m_i = _fwd_tiles(acc, l_i, m_i, q, k_src, v_src, n_full, n_tiles, rows, qk_scale, N_KEYS, stride_kk,
                               stride_vk, Q_TILE_SIZE, K_TILE_SIZE, D, True, is_causal, USE_TMA)

    o = acc / l_i[:, None]  # (Bq, D)
    lse = (m_i + tl.log2(l_i)) * 0.6931471805599453  # natural-log logsumexp, (Bq,)
    _store(o_dst, q_start, o, stride_oq, N_QUERIES, Q_TILE_SIZE, D, USE_TMA)
    tl.store(L_ptr + b * stride_lb + rows, lse, mask=rows < N_QUERIES)
