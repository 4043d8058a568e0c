"""FlashAttention-2 backward as Triton kernels.

* ``flash_bwd_delta_kernel``: Dl = rowsum(O * dO), float32, one value per query.
* ``flash_bwd_kernel`` (the fused backward): grid (T_k, batch); one program owns a key tile and
  sweeps the query tiles once. Per query tile it computes Sᵀ = K Qᵀ, Pᵀ, dPᵀ = V dOᵀ and dSᵀ, adds
  Pᵀ dO to dV and dSᵀ Q to dK in registers, and adds its share of dQ, dS K, to a float32 dQ
  buffer with atomic adds: 5 matrix products per tile pair.
* ``flash_bwd_dq_convert_kernel``: dQ = scale · (float32 buffer), in the dtype of Q.
* ``flash_bwd_dkdv_kernel`` and ``flash_bwd_dq_kernel`` (the two-pass backward): the same key-tile
  sweep without dQ, then a query-tile sweep that recomputes P and dP for dQ alone; 7 products per
  tile pair, no atomics, and dQ summed in the same order on every run.

With causal masking, query tiles entirely before a key tile (and, in the dQ pass, key tiles
entirely after the query tile) are skipped by the loop bounds. Each sweep runs in parts: the tiles
every row of the program's tile sees whole, loaded without bounds checks and used without a mask,
and the few that straddle the causal diagonal or a ragged end, which are checked and masked. A
program whose key tile passes the end of the keys masks every query tile, so that its padding keys
add nothing to dQ.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_tiles import _accumulate, _dot, _load, _load_rows, _matrix, _store

@triton.jit
def flash_bwd_delta_kernel(
    O_ptr, dO_ptr, Dl_ptr,
    stride_ob, stride_oq,
    stride_dob, stride_doq,
    stride_lb,
    N_QUERIES,
    D: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Dl = rowsum(O * dO) in float32; grid (cdiv(N_QUERIES, BLOCK), batch)."""
    start = tl.program_id(0) * BLOCK
    b = tl.program_id(1)
    o = _load(O_ptr + b * stride_ob, start, stride_oq, N_QUERIES, BLOCK, D, True, False).to(tl.float32)
    do = _load(dO_ptr + b * stride_dob, start, stride_doq, N_QUERIES, BLOCK, D, True, False).to(tl.float32)
    rows = start + tl.arange(0, BLOCK)
    tl.store(Dl_ptr + b * stride_lb + rows, tl.sum(o * do, axis=1), mask=rows < N_QUERIES)


@triton.jit
def _key_tile_sweep(
    dk, dv, k, v, q_src, do_src, dq_dst, L_b, Dl_b, lo, hi, cols, qk_scale, N_QUERIES, N_KEYS,
    stride_qq, stride_doq, stride_dqq,
    Q_TILE_SIZE: tl.constexpr, K_TILE_SIZE: tl.constexpr, D: tl.constexpr, MASKED: tl.constexpr,
    is_causal: tl.constexpr, FUSED_DQ: tl.constexpr, USE_TMA: tl.constexpr, TMA_REDUCE: tl.constexpr,
):
    """Add query tiles ``lo .. hi-1`` to one key tile's dK and dV (and, FUSED_DQ, their dQ share).

    Computed transposed, keys along the rows, so that Pᵀ and dSᵀ feed dV and dK as they are.
    MASKED tiles (the causal diagonal, a ragged end of queries or keys) are bounds-checked and
    masked.
    """
    rows0 = tl.arange(0, Q_TILE_SIZE)  # (Bq,)
    for i in range(lo, hi):
        q_start = i * Q_TILE_SIZE
        rows = q_start + rows0  # (Bq,)
        q = _load(q_src, q_start, stride_qq, N_QUERIES, Q_TILE_SIZE, D, MASKED, USE_TMA)  # (Bq, D)
        do = _load(do_src, q_start, stride_doq, N_QUERIES, Q_TILE_SIZE, D, MASKED, USE_TMA)  # (Bq, D)
        lse2 = _load_rows(L_b, rows, N_QUERIES, MASKED) * 1.4426950408889634  # (Bq,), base 2
        delta = _load_rows(Dl_b, rows, N_QUERIES, MASKED)  # (Bq,)
        s_t = _dot(k, tl.trans(q), tl.zeros((K_TILE_SIZE, Q_TILE_SIZE), tl.float32))  # (Bk, Bq)
        p_t = tl.exp2(s_t * qk_scale - lse2[None, :])  # (Bk, Bq)
        if MASKED:
            valid = (rows[None, :] < N_QUERIES) & (cols[:, None] < N_KEYS)  # (Bk, Bq)
            if is_causal:
                valid = valid & (cols[:, None] <= rows[None, :])
            p_t = tl.where(valid, p_t, 0.0)
        dv = _dot(p_t.to(do.dtype), do, dv)  # (Bk, D)
        dp_t = _dot(v, tl.trans(do), tl.zeros((K_TILE_SIZE, Q_TILE_SIZE), tl.float32))  # (Bk, Bq)
        ds_t = (p_t * (dp_t - delta[None, :])).to(q.dtype)  # (Bk, Bq)
        dk = _dot(ds_t, q, dk)  # (Bk, D)
        if FUSED_DQ:
            dq = _dot(tl.trans(ds_t), k, tl.zeros((Q_TILE_SIZE, D), tl.float32))  # (Bq, D), unscaled
            _accumulate(dq_dst, q_start, dq, stride_dqq, N_QUERIES, Q_TILE_SIZE, D, MASKED, TMA_REDUCE)
    return dk, dv


@triton.jit
def _key_tile_program(
    Q_ptr, K_ptr, V_ptr, dO_ptr, L_ptr, Dl_ptr, dQ_ptr, dK_ptr, dV_ptr,
    stride_qb, stride_qq, stride_kb, stride_kk, stride_vb, stride_vk, stride_dob, stride_doq, stride_lb,
    stride_dqb, stride_dqq, stride_dkb, stride_dkk, stride_dvb, stride_dvk,
    N_QUERIES, N_KEYS, scale,
    D: tl.constexpr, Q_TILE_SIZE: tl.constexpr, K_TILE_SIZE: tl.constexpr, is_causal: tl.constexpr,
    FUSED_DQ: tl.constexpr, USE_TMA: tl.constexpr, TMA_REDUCE: tl.constexpr,
):
    """One key tile's dK and dV (and, FUSED_DQ, its share of dQ), for the two kernels below."""
    # Key tiles in order: under a causal mask the first ones see the most queries.
    k_tile = tl.program_id(0)
    b = tl.program_id(1)
    k_start = k_tile * K_TILE_SIZE

    k_src = _matrix(K_ptr + b * stride_kb, N_KEYS, stride_kk, K_TILE_SIZE, D, USE_TMA)
    v_src = _matrix(V_ptr + b * stride_vb, N_KEYS, stride_vk, K_TILE_SIZE, D, USE_TMA)
    q_src = _matrix(Q_ptr + b * stride_qb, N_QUERIES, stride_qq, Q_TILE_SIZE, D, USE_TMA)
    do_src = _matrix(dO_ptr + b * stride_dob, N_QUERIES, stride_doq, Q_TILE_SIZE, D, USE_TMA)
    if FUSED_DQ:
        dq_dst = _matrix(dQ_ptr + b * stride_dqb, N_QUERIES, stride_dqq, Q_TILE_SIZE, D, TMA_REDUCE)
    else:
        dq_dst = dQ_ptr
    k = _load(k_src, k_start, stride_kk, N_KEYS, K_TILE_SIZE, D, True, USE_TMA)  # (Bk, D)
    v = _load(v_src, k_start, stride_vk, N_KEYS, K_TILE_SIZE, D, True, USE_TMA)  # (Bk, D)
    cols = k_start + tl.arange(0, K_TILE_SIZE)  # (Bk,)
    qk_scale = scale * 1.4426950408889634
    L_b = L_ptr + b * stride_lb
    Dl_b = Dl_ptr + b * stride_lb  # L and Dl share one layout

    # Query tiles: [i_lo, i_full) straddle the causal diagonal, [i_full, n_whole) are whole and
    # see every key of the tile, and a ragged last tile (up to n_tiles) is bounds-checked. A key
    # tile that passes the end of the keys masks them all.
    n_tiles = tl.cdiv(N_QUERIES, Q_TILE_SIZE)
    n_whole = N_QUERIES // Q_TILE_SIZE
    if is_causal:
        i_lo = k_start // Q_TILE_SIZE  # earlier query tiles cannot see this key tile
        i_full = tl.cdiv(k_start + K_TILE_SIZE - 1, Q_TILE_SIZE)
    else:
        i_lo = 0
        i_full = 0
    i_full = tl.where(k_start + K_TILE_SIZE > N_KEYS, n_tiles, i_full)
    dk = tl.zeros((K_TILE_SIZE, D), dtype=tl.float32)
    dv = tl.zeros((K_TILE_SIZE, D), dtype=tl.float32)
    dk, dv = _key_tile_sweep(dk, dv, k, v, q_src, do_src, dq_dst, L_b, Dl_b, i_lo, tl.minimum(i_full, n_tiles), cols,
                             qk_scale, N_QUERIES, N_KEYS, stride_qq, stride_doq, stride_dqq, Q_TILE_SIZE, K_TILE_SIZE,
                             D, True, is_causal, FUSED_DQ, USE_TMA, TMA_REDUCE)
    dk, dv = _key_tile_sweep(dk, dv, k, v, q_src, do_src, dq_dst, L_b, Dl_b, i_full, n_whole, cols,
                             qk_scale, N_QUERIES, N_KEYS, stride_qq, stride_doq, stride_dqq, Q_TILE_SIZE, K_TILE_SIZE,
                             D, False, is_causal, FUSED_DQ, USE_TMA, TMA_REDUCE)
    dk, dv = _key_tile_sweep(dk, dv, k, v, q_src, do_src, dq_dst, L_b, Dl_b, tl.maximum(i_full, n_whole), n_tiles,
                             cols, qk_scale, N_QUERIES, N_KEYS, stride_qq, stride_doq, stride_dqq, Q_TILE_SIZE,
                             K_TILE_SIZE, D, True, is_causal, FUSED_DQ, USE_TMA, TMA_REDUCE)

    dk_dst = _matrix(dK_ptr + b * stride_dkb, N_KEYS, stride_dkk, K_TILE_SIZE, D, USE_TMA)
    dv_dst = _matrix(dV_ptr + b * stride_dvb, N_KEYS, stride_dvk, K_TILE_SIZE, D, USE_TMA)
    _store(dk_dst, k_start, dk * scale, stride_dkk, N_KEYS, K_TILE_SIZE, D, USE_TMA)
    _store(dv_dst, k_start, dv, stride_dvk, N_KEYS, K_TILE_SIZE, D, USE_TMA)


@triton.jit
def flash_bwd_kernel(
    Q_ptr, K_ptr, V_ptr, dO_ptr, L_ptr, Dl_ptr, dQ_ptr, dK_ptr, dV_ptr,
    stride_qb, stride_qq, stride_kb, stride_kk, stride_vb, stride_vk, stride_dob, stride_doq, stride_lb,
    stride_dqb, stride_dqq, stride_dkb, stride_dkk, stride_dvb, stride_dvk,
    N_QUERIES, N_KEYS, scale,
    D: tl.constexpr, Q_TILE_SIZE: tl.constexpr, K_TILE_SIZE: tl.constexpr, is_causal: tl.constexpr,
    USE_TMA: tl.constexpr = False, TMA_REDUCE: tl.constexpr = False,
):
    """Fused backward: dK, dV and the unscaled float32 dQ (added to a zeroed dQ_ptr); grid (T_k, batch)."""
    _key_tile_program(Q_ptr, K_ptr, V_ptr, dO_ptr, L_ptr, Dl_ptr, dQ_ptr, dK_ptr, dV_ptr,
                      stride_qb, stride_qq, stride_kb, stride_kk, stride_vb, stride_vk, stride_dob, stride_doq,
                      stride_lb, stride_dqb, stride_dqq, stride_dkb, stride_dkk, stride_dvb, stride_dvk,
                      N_QUERIES, N_KEYS, scale, D, Q_TILE_SIZE, K_TILE_SIZE, is_causal, True, USE_TMA, TMA_REDUCE)


@triton.jit
def flash_bwd_dkdv_kernel(
    Q_ptr, K_ptr, V_ptr, dO_ptr, L_ptr, Dl_ptr, dK_ptr, dV_ptr,
    stride_qb, stride_qq, stride_kb, stride_kk, stride_vb, stride_vk, stride_dob, stride_doq, stride_lb,
    stride_dkb, stride_dkk, stride_dvb, stride_dvk,
    N_QUERIES, N_KEYS, scale,
    D: tl.constexpr, Q_TILE_SIZE: tl.constexpr, K_TILE_SIZE: tl.constexpr, is_causal: tl.constexpr,
    USE_TMA: tl.constexpr = False,
):
    """First pass of the two-pass backward: dK and dV alone; grid (T_k, batch)."""
    _key_tile_program(Q_ptr, K_ptr, V_ptr, dO_ptr, L_ptr, Dl_ptr, dK_ptr, dK_ptr, dV_ptr,
                      stride_qb, stride_qq, stride_kb, stride_kk, stride_vb, stride_vk, stride_dob, stride_doq,
                      stride_lb, 0, 0, stride_dkb, stride_dkk, stride_dvb, stride_dvk,
                      N_QUERIES, N_KEYS, scale, D, Q_TILE_SIZE, K_TILE_SIZE, is_causal, False, USE_TMA, False)


@triton.jit
def flash_bwd_dq_convert_kernel(
    Acc_ptr, dQ_ptr, stride_ab, stride_aq, stride_dqb, stride_dqq, N_QUERIES, scale,
    D: tl.constexpr, BLOCK: tl.constexpr,
):
    """dQ = scale * Acc in dQ's dtype, Acc the fused backward's float32 buffer; grid (cdiv(N_QUERIES, BLOCK), batch)."""
    start = tl.program_id(0) * BLOCK
    b = tl.program_id(1)
    acc = _load(Acc_ptr + b * stride_ab, start, stride_aq, N_QUERIES, BLOCK, D, True, False)
    _store(dQ_ptr + b * stride_dqb, start, acc * scale, stride_dqq, N_QUERIES, BLOCK, D, False)


@triton.jit
def _query_tile_sweep(
    dq, q, do, lse2, delta, k_src, v_src, lo, hi, rows, qk_scale, N_KEYS, stride_kk, stride_vk,
    Q_TILE_SIZE: tl.constexpr, K_TILE_SIZE: tl.constexpr, D: tl.constexpr, MASKED: tl.constexpr,
    is_causal: tl.constexpr, USE_TMA: tl.constexpr,
):
    """Add key tiles ``lo .. hi-1`` to one query tile's dQ (MASKED as in the forward)."""
    cols0 = tl.arange(0, K_TILE_SIZE)
    for j in range(lo, hi):
        k_start = j * K_TILE_SIZE
        k = _load(k_src, k_start, stride_kk, N_KEYS, K_TILE_SIZE, D, MASKED, USE_TMA)  # (Bk, D)
        v = _load(v_src, k_start, stride_vk, N_KEYS, K_TILE_SIZE, D, MASKED, USE_TMA)  # (Bk, D)
        s = _dot(q, tl.trans(k), tl.zeros((Q_TILE_SIZE, K_TILE_SIZE), tl.float32))  # (Bq, Bk)
        p = tl.exp2(s * qk_scale - lse2[:, None])  # (Bq, Bk)
        if MASKED:
            cols = k_start + cols0  # (Bk,)
            valid = cols[None, :] < N_KEYS  # (1, Bk)
            if is_causal:
                valid = valid & (cols[None, :] <= rows[:, None])  # (Bq, Bk)
            p = tl.where(valid, p, 0.0)
        dp = _dot(do, tl.trans(v), tl.zeros((Q_TILE_SIZE, K_TILE_SIZE), tl.float32))  # (Bq, Bk)
        ds = p * (dp - delta[:, None])  # (Bq, Bk)
        dq = _dot(ds.to(k.dtype), k, dq)  # (Bq, D)
    return dq


@triton.jit
def flash_bwd_dq_kernel(
    Q_ptr, K_ptr, V_ptr, dO_ptr, L_ptr, Dl_ptr, dQ_ptr,
    stride_qb, stride_qq, stride_kb, stride_kk, stride_vb, stride_vk, stride_dob, stride_doq, stride_lb,
    stride_dqb, stride_dqq,
    N_QUERIES, N_KEYS, scale,
    D: tl.constexpr, Q_TILE_SIZE: tl.constexpr, K_TILE_SIZE: tl.constexpr, is_causal: tl.constexpr,
    USE_TMA: tl.constexpr = False,
):
    """Second pass of the two-pass backward: dQ; grid (T_q, batch), longest (causal) tiles first."""
    q_tile = tl.num_programs(0) - 1 - tl.program_id(0)
    b = tl.program_id(1)
    q_start = q_tile * Q_TILE_SIZE
    rows = q_start + tl.arange(0, Q_TILE_SIZE)  # (Bq,)

    q_src = _matrix(Q_ptr + b * stride_qb, N_QUERIES, stride_qq, Q_TILE_SIZE, D, USE_TMA)
    do_src = _matrix(dO_ptr + b * stride_dob, N_QUERIES, stride_doq, Q_TILE_SIZE, D, USE_TMA)
    k_src = _matrix(K_ptr + b * stride_kb, N_KEYS, stride_kk, K_TILE_SIZE, D, USE_TMA)
    v_src = _matrix(V_ptr + b * stride_vb, N_KEYS, stride_vk, K_TILE_SIZE, D, USE_TMA)
    q = _load(q_src, q_start, stride_qq, N_QUERIES, Q_TILE_SIZE, D, True, USE_TMA)  # (Bq, D)
    do = _load(do_src, q_start, stride_doq, N_QUERIES, Q_TILE_SIZE, D, True, USE_TMA)  # (Bq, D)
    lse2 = _load_rows(L_ptr + b * stride_lb, rows, N_QUERIES, True) * 1.4426950408889634  # (Bq,)
    delta = _load_rows(Dl_ptr + b * stride_lb, rows, N_QUERIES, True)  # (Bq,)
    qk_scale = scale * 1.4426950408889634

    if is_causal:
        n_tiles = tl.cdiv(tl.minimum(N_KEYS, q_start + Q_TILE_SIZE), K_TILE_SIZE)
        n_full = tl.minimum((q_start + 1) // K_TILE_SIZE, N_KEYS // K_TILE_SIZE)
    else:
        n_tiles = tl.cdiv(N_KEYS, K_TILE_SIZE)
        n_full = N_KEYS // K_TILE_SIZE
    dq = tl.zeros((Q_TILE_SIZE, D), dtype=tl.float32)
    dq = _query_tile_sweep(dq, q, do, lse2, delta, k_src, v_src, 0, n_full, rows, qk_scale, N_KEYS, stride_kk,
                           stride_vk, Q_TILE_SIZE, K_TILE_SIZE, D, False, is_causal, USE_TMA)
    dq = _query_tile_sweep(dq, q, do, lse2, delta, k_src, v_src, n_full, n_tiles, rows, qk_scale, N_KEYS, stride_kk,
                           stride_vk, Q_TILE_SIZE, K_TILE_SIZE, D, True, is_causal, USE_TMA)
    dq_dst = _matrix(dQ_ptr + b * stride_dqb, N_QUERIES, stride_dqq, Q_TILE_SIZE, D, USE_TMA)
    _store(dq_dst, q_start, dq * scale, stride_dqq, N_QUERIES, Q_TILE_SIZE, D, USE_TMA)
