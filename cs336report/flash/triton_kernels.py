"""FlashAttention-2 forward and backward as Triton kernels.

Layout: Q is (batch, n_queries, d), K and V are (batch, n_keys, d), O is like
Q and L (the logsumexp of each query's scores) is (batch, n_queries), float32.
``d`` must be a power of two, at least 16.

* ``flash_fwd_kernel``: grid (T_q, batch); one program owns a query tile and
  sweeps the key tiles, keeping the running max/sum and the output accumulator
  in float32 registers.  Scores are handled in base 2 (``exp2``), which is the
  same softmax with ``scale * log2(e)`` folded into the scores.
* ``flash_bwd_delta_kernel``: D = rowsum(O * dO) for the two backward passes.
* ``flash_bwd_dkdv_kernel``: grid (T_k, batch); one program owns a key tile and
  sweeps the query tiles, accumulating dK and dV.
* ``flash_bwd_dq_kernel``: grid (T_q, batch); one program owns a query tile and
  sweeps the key tiles, accumulating dQ.
  Both backward kernels write disjoint outputs, so no atomics are needed.

With causal masking, key tiles entirely above the diagonal (and, in the dK/dV
pass, query tiles entirely before the key tile) are skipped by the loop bounds.
Each sweep runs in two parts: the tiles every row of the program's tile sees
whole, loaded without bounds checks and used without a mask, then the few that
straddle the causal diagonal or the ragged end of the sequence, which are
bounds-checked (``boundary_check``, zero padding) and masked. The forward and
dQ kernels take query tiles last to first, so that under a causal mask the
longest programs start first.

Importing this module without Triton works; the Triton entry points then raise
``TritonUnavailableError``.  With ``TRITON_INTERPRET=1`` set before Triton is
imported the kernels run on CPU tensors through Triton's interpreter.
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager
from typing import Optional

import torch

try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
    _TRITON_IMPORT_ERROR = None
except ImportError as _exc:  # pragma: no cover - exercised on machines without Triton
    triton = None
    tl = None
    HAS_TRITON = False
    _TRITON_IMPORT_ERROR = _exc

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


def _triton_version() -> tuple[int, int]:
    if not HAS_TRITON:
        return (0, 0)
    major, minor = triton.__version__.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


# The kernels use tl.make_block_ptr, which Triton 3.9 removed.
BLOCK_PTR_SUPPORTED = HAS_TRITON and _triton_version() < (3, 9)


def _fix_interpreter_index() -> None:
    """Let Triton's interpreter use scalar tensors as ``range`` bounds under NumPy >= 2.4.

    Triton < 3.8 converts a scalar (stored as a 1-element array) with
    ``int(array)``, which newer NumPy rejects for arrays with ndim > 0.
    """
    import numpy as np

    try:
        int(np.zeros(1, dtype=np.int32))
        return
    except TypeError:
        pass
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "_cs336_fixed", False):
        return

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patched._cs336_fixed = True
    interpreter._patch_lang_tensor = patched


if INTERPRET and BLOCK_PTR_SUPPORTED and _triton_version() < (3, 8):
    _fix_interpreter_index()

DEFAULT_Q_TILE = 64
DEFAULT_K_TILE = 64
DEFAULT_NUM_WARPS = 4
DEFAULT_NUM_STAGES = 2

# (Q_TILE_SIZE, K_TILE_SIZE, num_warps, num_stages) tried by the autotuner, per kernel. The
# forward and dQ kernels own a query tile and sweep key tiles; the dK/dV kernel owns a key tile
# and sweeps query tiles, so its lists favour a large K tile and a small Q tile.
AUTOTUNE_TILES = {
    "fwd": (
        (32, 32, 4, 2),
        (64, 32, 4, 3),
        (64, 64, 4, 3),
        (128, 32, 4, 3),
        (128, 64, 4, 3),
        (128, 64, 8, 3),
        (128, 64, 8, 4),
        (128, 128, 8, 2),
    ),
    "bwd_dkdv": (
        (32, 64, 4, 3),
        (64, 64, 4, 3),
        (64, 64, 4, 4),
        (64, 64, 8, 3),
        (32, 128, 4, 3),
        (32, 128, 4, 5),
        (64, 128, 8, 3),
    ),
    "bwd_dq": (
        (32, 32, 4, 2),
        (64, 32, 4, 3),
        (64, 64, 4, 3),
        (64, 64, 4, 4),
        (128, 32, 4, 3),
        (128, 64, 8, 3),
    ),
}
# The autotuner times each candidate config with triton.testing.do_bench, for this warm-up and
# repetition time (ms); Triton's own defaults unless a caller sets a budget (:func:`tuning_budget`).
TRITON_TUNE_MS = (25.0, 100.0)
_tune_ms: tuple[float, float] | None = None
# Query rows per program of the Dl = rowsum(O * dO) kernel.
DELTA_BLOCK = 64

# Launch configuration of the most recent forward / backward, for reporting.
_last_config: dict[str, dict] = {}


class TritonUnavailableError(RuntimeError):
    """Raised when a Triton code path is requested but cannot run here."""


@contextmanager
def tuning_budget(warmup_ms: float | None, rep_ms: float | None):
    """Within the block, the autotuner times each candidate for ``warmup_ms`` + ``rep_ms``
    (either None: Triton's default). Choices already made are kept: the tuner tunes a shape once."""
    global _tune_ms
    before = _tune_ms
    _tune_ms = (float(warmup_ms or TRITON_TUNE_MS[0]), float(rep_ms or TRITON_TUNE_MS[1]))
    try:
        yield _tune_ms
    finally:
        _tune_ms = before


def _tuner_bench(kernel_call, quantiles):
    warmup, rep = _tune_ms or TRITON_TUNE_MS
    return triton.testing.do_bench(kernel_call, warmup=warmup, rep=rep, quantiles=quantiles)


def triton_available() -> bool:
    """True when Triton imported successfully (kernels may still need a GPU or the interpreter)."""
    return HAS_TRITON


def last_triton_config() -> dict[str, dict]:
    """Tile sizes / warps / stages used by the last launch of each kernel.

    Keys: "fwd", "bwd_dkdv", "bwd_dq".  Each value has Q_TILE_SIZE, K_TILE_SIZE,
    num_warps, num_stages and ``autotuned`` (whether the autotuner chose it); an
    autotuned launch also has ``candidates``, the times of every config tried for its shape
    (see ``_record_autotuned``).
    """
    return {name: dict(cfg) for name, cfg in _last_config.items()}


def _require_triton(*tensors: torch.Tensor) -> None:
    if not HAS_TRITON:
        raise TritonUnavailableError(
            f"Triton is not installed or failed to import ({_TRITON_IMPORT_ERROR}); "
            "use impl='pytorch' instead"
        )
    if not BLOCK_PTR_SUPPORTED:
        raise TritonUnavailableError(
            f"Triton {triton.__version__} removed tl.make_block_ptr, which these kernels use; "
            "install triton<3.9 (e.g. the version paired with your torch)"
        )
    if not INTERPRET and not all(t.is_cuda for t in tensors):
        raise TritonUnavailableError(
            "the Triton kernels need CUDA tensors; to run them on CPU, set TRITON_INTERPRET=1 "
            "before Triton is imported"
        )


def _check_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
        raise ValueError("expected q, k, v of shape (batch, seq, d)")
    d = q.shape[-1]
    if k.shape[-1] != d or v.shape[-1] != d or k.shape[1] != v.shape[1]:
        raise ValueError(f"incompatible shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if d < 16 or d & (d - 1):
        raise ValueError(f"head dim must be a power of two >= 16, got {d}")


def _launch_config(q_tile: int, k_tile: int, num_warps: int, num_stages: int) -> dict:
    return {"Q_TILE_SIZE": int(q_tile), "K_TILE_SIZE": int(k_tile), "num_warps": int(num_warps),
            "num_stages": int(num_stages)}


def _record(name: str, q_tile: int, k_tile: int, num_warps: int, num_stages: int, autotuned: bool) -> None:
    _last_config[name] = {**_launch_config(q_tile, k_tile, num_warps, num_stages), "autotuned": bool(autotuned)}


# Per (kernel, shape): the autotuner's timing table of the tuning for that shape, and the table
# object last seen (a new object means the tuner has just tuned).
_candidates: dict[tuple, list[dict]] = {}
_seen_timings: dict[str, object] = {}


def _shape_key(q: torch.Tensor, k: torch.Tensor, is_causal: bool) -> tuple:
    """What the autotuner tunes for (its key, plus the dtype it adds): one candidate table per value."""
    return (q.shape[1], k.shape[1], q.shape[-1], bool(is_causal), str(q.dtype))


def _record_autotuned(name: str, tuner, shape: tuple) -> None:
    """Record the autotuner's choice for ``shape`` and the candidates it timed for that shape.

    ``candidates``: each tried config with its median kernel time in ms (``None`` where it could
    not run, e.g. out of shared memory), fastest first, kept from the launch that tuned and
    repeated on later launches of the same shape (served from the tuner's cache).
    """
    cfg = tuner.best_config
    _record(name, cfg.kwargs["Q_TILE_SIZE"], cfg.kwargs["K_TILE_SIZE"], cfg.num_warps, cfg.num_stages, True)
    timings = getattr(tuner, "configs_timings", None)
    if timings and _seen_timings.get(name) is not timings:
        _seen_timings[name] = timings
        rows = []
        for c, t in timings.items():
            ms = t[0] if isinstance(t, (list, tuple)) else t
            rows.append({**_launch_config(c.kwargs["Q_TILE_SIZE"], c.kwargs["K_TILE_SIZE"], c.num_warps, c.num_stages),
                         "ms": float(ms) if ms is not None and math.isfinite(ms) else None})
        rows.sort(key=lambda r: (r["ms"] is None, r["ms"] or 0.0))
        _candidates[(name, shape)] = rows
    if (name, shape) in _candidates:
        _last_config[name]["candidates"] = [dict(r) for r in _candidates[(name, shape)]]


if HAS_TRITON:
    # Triton's interpreter multiplies bf16/fp16 operands of tl.dot as raw bits, so
    # under the interpreter the operands are widened to float32 first; compiled
    # kernels keep the narrow operands (tensor cores) with a float32 accumulator.
    _WIDEN_DOT_OPERANDS = tl.constexpr(INTERPRET)

    @triton.jit
    def _dot(a, b, acc):
        """acc + a @ b with a float32 accumulator."""
        if _WIDEN_DOT_OPERANDS:
            return tl.dot(a.to(tl.float32), b.to(tl.float32), acc=acc)
        else:
            return tl.dot(a, b, acc=acc)

    @triton.jit
    def _fwd_tiles(
        acc, l_i, m_i, q, K_blk, V_blk, lo, hi, rows, cols0, qk_scale, N_KEYS,
        Q_TILE_SIZE: tl.constexpr, K_TILE_SIZE: tl.constexpr, MASKED: tl.constexpr, is_causal: tl.constexpr,
    ):
        """Fold key tiles ``lo .. hi-1`` into one query tile's running max, sum and output.

        MASKED tiles (the causal diagonal, a ragged last tile) are bounds-checked and masked;
        the others are whole tiles that every query of the tile sees, used as loaded.
        """
        K_blk = tl.advance(K_blk, (lo * K_TILE_SIZE, 0))
        V_blk = tl.advance(V_blk, (lo * K_TILE_SIZE, 0))
        for j in range(lo, hi):
            if MASKED:
                k = tl.load(K_blk, boundary_check=(0,), padding_option="zero")  # (Bk, D)
                v = tl.load(V_blk, boundary_check=(0,), padding_option="zero")  # (Bk, D)
            else:
                k = tl.load(K_blk)
                v = tl.load(V_blk)
            # Unscaled scores: the scale goes into the max (one multiply per row) and into exp2's
            # argument as one fused multiply-add per score, instead of a multiply per score first.
            s = _dot(q, tl.trans(k), tl.zeros((Q_TILE_SIZE, K_TILE_SIZE), tl.float32))  # (Bq, Bk)
            if MASKED:
                cols = j * K_TILE_SIZE + cols0  # (Bk,)
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
            K_blk = tl.advance(K_blk, (K_TILE_SIZE, 0))
            V_blk = tl.advance(V_blk, (K_TILE_SIZE, 0))
        return acc, l_i, m_i

    @triton.jit
    def flash_fwd_kernel(
        Q_ptr, K_ptr, V_ptr,
        O_ptr, L_ptr,
        stride_qb, stride_qq, stride_qd,
        stride_kb, stride_kk, stride_kd,
        stride_vb, stride_vk, stride_vd,
        stride_ob, stride_oq, stride_od,
        stride_lb, stride_lq,
        N_QUERIES, N_KEYS,
        scale,
        D: tl.constexpr,
        Q_TILE_SIZE: tl.constexpr,
        K_TILE_SIZE: tl.constexpr,
        is_causal: tl.constexpr,
    ):
        # Query tiles are taken last to first: under a causal mask the last tiles see the most
        # keys, and starting them first leaves the short ones to fill the machine at the end.
        q_tile = tl.num_programs(0) - 1 - tl.program_id(0)
        b = tl.program_id(1)
        q_start = q_tile * Q_TILE_SIZE

        Q_blk = tl.make_block_ptr(
            Q_ptr + b * stride_qb, shape=(N_QUERIES, D), strides=(stride_qq, stride_qd),
            offsets=(q_start, 0), block_shape=(Q_TILE_SIZE, D), order=(1, 0),
        )
        K_blk = tl.make_block_ptr(
            K_ptr + b * stride_kb, shape=(N_KEYS, D), strides=(stride_kk, stride_kd),
            offsets=(0, 0), block_shape=(K_TILE_SIZE, D), order=(1, 0),
        )
        V_blk = tl.make_block_ptr(
            V_ptr + b * stride_vb, shape=(N_KEYS, D), strides=(stride_vk, stride_vd),
            offsets=(0, 0), block_shape=(K_TILE_SIZE, D), order=(1, 0),
        )
        O_blk = tl.make_block_ptr(
            O_ptr + b * stride_ob, shape=(N_QUERIES, D), strides=(stride_oq, stride_od),
            offsets=(q_start, 0), block_shape=(Q_TILE_SIZE, D), order=(1, 0),
        )
        L_blk = tl.make_block_ptr(
            L_ptr + b * stride_lb, shape=(N_QUERIES,), strides=(stride_lq,),
            offsets=(q_start,), block_shape=(Q_TILE_SIZE,), order=(0,),
        )

        q = tl.load(Q_blk, boundary_check=(0,), padding_option="zero")  # (Bq, D)
        rows = q_start + tl.arange(0, Q_TILE_SIZE)  # (Bq,)
        cols0 = tl.arange(0, K_TILE_SIZE)  # (Bk,)
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
        acc, l_i, m_i = _fwd_tiles(acc, l_i, m_i, q, K_blk, V_blk, 0, n_full, rows, cols0, qk_scale, N_KEYS,
                                   Q_TILE_SIZE, K_TILE_SIZE, False, is_causal)
        acc, l_i, m_i = _fwd_tiles(acc, l_i, m_i, q, K_blk, V_blk, n_full, n_tiles, rows, cols0, qk_scale,
                                   N_KEYS, Q_TILE_SIZE, K_TILE_SIZE, True, is_causal)

        o = acc / l_i[:, None]  # (Bq, D)
        lse = (m_i + tl.log2(l_i)) * 0.6931471805599453  # natural-log logsumexp, (Bq,)
        tl.store(O_blk, o.to(O_ptr.dtype.element_ty), boundary_check=(0,))
        tl.store(L_blk, lse, boundary_check=(0,))

    @triton.jit
    def flash_bwd_delta_kernel(
        O_ptr, dO_ptr, Dl_ptr,
        stride_ob, stride_oq, stride_od,
        stride_dob, stride_doq, stride_dod,
        stride_lb, stride_lq,
        N_QUERIES,
        D: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        """Dl = rowsum(O * dO) in float32; grid (cdiv(N_QUERIES, BLOCK), batch)."""
        start = tl.program_id(0) * BLOCK
        b = tl.program_id(1)
        O_blk = tl.make_block_ptr(
            O_ptr + b * stride_ob, shape=(N_QUERIES, D), strides=(stride_oq, stride_od),
            offsets=(start, 0), block_shape=(BLOCK, D), order=(1, 0),
        )
        dO_blk = tl.make_block_ptr(
            dO_ptr + b * stride_dob, shape=(N_QUERIES, D), strides=(stride_doq, stride_dod),
            offsets=(start, 0), block_shape=(BLOCK, D), order=(1, 0),
        )
        Dl_blk = tl.make_block_ptr(
            Dl_ptr + b * stride_lb, shape=(N_QUERIES,), strides=(stride_lq,),
            offsets=(start,), block_shape=(BLOCK,), order=(0,),
        )
        o = tl.load(O_blk, boundary_check=(0,), padding_option="zero").to(tl.float32)  # (BLOCK, D)
        do = tl.load(dO_blk, boundary_check=(0,), padding_option="zero").to(tl.float32)  # (BLOCK, D)
        tl.store(Dl_blk, tl.sum(o * do, axis=1), boundary_check=(0,))

    @triton.jit
    def _dkdv_tiles(
        dk, dv, k, v, Q_blk, dO_blk, L_blk, Dl_blk, lo, hi, cols, rows0, qk_scale, N_QUERIES,
        Q_TILE_SIZE: tl.constexpr, K_TILE_SIZE: tl.constexpr, MASKED: tl.constexpr, is_causal: tl.constexpr,
    ):
        """Add query tiles ``lo .. hi-1`` to one key tile's dK and dV.

        MASKED tiles (the causal diagonal, a ragged last query tile) are bounds-checked and
        masked. Keys past the end need no mask: their rows of dK and dV are never stored.
        """
        Q_blk = tl.advance(Q_blk, (lo * Q_TILE_SIZE, 0))
        dO_blk = tl.advance(dO_blk, (lo * Q_TILE_SIZE, 0))
        L_blk = tl.advance(L_blk, (lo * Q_TILE_SIZE,))
        Dl_blk = tl.advance(Dl_blk, (lo * Q_TILE_SIZE,))
        for i in range(lo, hi):
            if MASKED:
                q = tl.load(Q_blk, boundary_check=(0,), padding_option="zero")  # (Bq, D)
                do = tl.load(dO_blk, boundary_check=(0,), padding_option="zero")  # (Bq, D)
                lse = tl.load(L_blk, boundary_check=(0,), padding_option="zero")  # (Bq,)
                delta = tl.load(Dl_blk, boundary_check=(0,), padding_option="zero")  # (Bq,)
            else:
                q = tl.load(Q_blk)
                do = tl.load(dO_blk)
                lse = tl.load(L_blk)
                delta = tl.load(Dl_blk)
            # Computed transposed, keys along the rows, so P^T and dS^T feed dV and dK as they are.
            s_t = _dot(k, tl.trans(q), tl.zeros((K_TILE_SIZE, Q_TILE_SIZE), tl.float32)) * qk_scale  # (Bk, Bq), base 2
            p_t = tl.exp2(s_t - (lse * 1.4426950408889634)[None, :])  # (Bk, Bq)
            if MASKED:
                rows = i * Q_TILE_SIZE + rows0  # (Bq,)
                valid = rows[None, :] < N_QUERIES  # (1, Bq)
                if is_causal:
                    valid = valid & (cols[:, None] <= rows[None, :])  # (Bk, Bq)
                p_t = tl.where(valid, p_t, 0.0)
            dv = _dot(p_t.to(do.dtype), do, dv)  # (Bk, D)
            dp_t = _dot(v, tl.trans(do), tl.zeros((K_TILE_SIZE, Q_TILE_SIZE), tl.float32))  # (Bk, Bq)
            ds_t = p_t * (dp_t - delta[None, :])  # (Bk, Bq)
            dk = _dot(ds_t.to(q.dtype), q, dk)  # (Bk, D)
            Q_blk = tl.advance(Q_blk, (Q_TILE_SIZE, 0))
            dO_blk = tl.advance(dO_blk, (Q_TILE_SIZE, 0))
            L_blk = tl.advance(L_blk, (Q_TILE_SIZE,))
            Dl_blk = tl.advance(Dl_blk, (Q_TILE_SIZE,))
        return dk, dv

    @triton.jit
    def flash_bwd_dkdv_kernel(
        Q_ptr, K_ptr, V_ptr, dO_ptr, L_ptr, Dl_ptr,
        dK_ptr, dV_ptr,
        stride_qb, stride_qq, stride_qd,
        stride_kb, stride_kk, stride_kd,
        stride_vb, stride_vk, stride_vd,
        stride_dob, stride_doq, stride_dod,
        stride_lb, stride_lq,
        stride_dkb, stride_dkk, stride_dkd,
        stride_dvb, stride_dvk, stride_dvd,
        N_QUERIES, N_KEYS,
        scale,
        D: tl.constexpr,
        Q_TILE_SIZE: tl.constexpr,
        K_TILE_SIZE: tl.constexpr,
        is_causal: tl.constexpr,
    ):
        # L and Dl (= rowsum(O * dO)) share one layout: (batch, N_QUERIES), strides (stride_lb, stride_lq).
        # Key tiles in order: under a causal mask the first ones see the most queries.
        k_tile = tl.program_id(0)
        b = tl.program_id(1)
        k_start = k_tile * K_TILE_SIZE

        K_blk = tl.make_block_ptr(
            K_ptr + b * stride_kb, shape=(N_KEYS, D), strides=(stride_kk, stride_kd),
            offsets=(k_start, 0), block_shape=(K_TILE_SIZE, D), order=(1, 0),
        )
        V_blk = tl.make_block_ptr(
            V_ptr + b * stride_vb, shape=(N_KEYS, D), strides=(stride_vk, stride_vd),
            offsets=(k_start, 0), block_shape=(K_TILE_SIZE, D), order=(1, 0),
        )
        Q_blk = tl.make_block_ptr(
            Q_ptr + b * stride_qb, shape=(N_QUERIES, D), strides=(stride_qq, stride_qd),
            offsets=(0, 0), block_shape=(Q_TILE_SIZE, D), order=(1, 0),
        )
        dO_blk = tl.make_block_ptr(
            dO_ptr + b * stride_dob, shape=(N_QUERIES, D), strides=(stride_doq, stride_dod),
            offsets=(0, 0), block_shape=(Q_TILE_SIZE, D), order=(1, 0),
        )
        L_blk = tl.make_block_ptr(
            L_ptr + b * stride_lb, shape=(N_QUERIES,), strides=(stride_lq,),
            offsets=(0,), block_shape=(Q_TILE_SIZE,), order=(0,),
        )
        Dl_blk = tl.make_block_ptr(
            Dl_ptr + b * stride_lb, shape=(N_QUERIES,), strides=(stride_lq,),
            offsets=(0,), block_shape=(Q_TILE_SIZE,), order=(0,),
        )

        k = tl.load(K_blk, boundary_check=(0,), padding_option="zero")  # (Bk, D)
        v = tl.load(V_blk, boundary_check=(0,), padding_option="zero")  # (Bk, D)
        cols = k_start + tl.arange(0, K_TILE_SIZE)  # (Bk,)
        rows0 = tl.arange(0, Q_TILE_SIZE)  # (Bq,)
        qk_scale = scale * 1.4426950408889634

        # Query tiles: [i_lo, i_full) straddle the causal diagonal, [i_full, n_whole) are whole and
        # see every key of the tile, and a ragged last tile (up to n_tiles) is bounds-checked.
        n_tiles = tl.cdiv(N_QUERIES, Q_TILE_SIZE)
        n_whole = N_QUERIES // Q_TILE_SIZE
        if is_causal:
            i_lo = k_start // Q_TILE_SIZE  # earlier query tiles cannot see this key tile
            i_full = tl.cdiv(k_start + K_TILE_SIZE - 1, Q_TILE_SIZE)
        else:
            i_lo = 0
            i_full = 0
        dk = tl.zeros((K_TILE_SIZE, D), dtype=tl.float32)
        dv = tl.zeros((K_TILE_SIZE, D), dtype=tl.float32)
        dk, dv = _dkdv_tiles(dk, dv, k, v, Q_blk, dO_blk, L_blk, Dl_blk, i_lo, tl.minimum(i_full, n_tiles),
                             cols, rows0, qk_scale, N_QUERIES, Q_TILE_SIZE, K_TILE_SIZE, True, is_causal)
        dk, dv = _dkdv_tiles(dk, dv, k, v, Q_blk, dO_blk, L_blk, Dl_blk, i_full, n_whole,
                             cols, rows0, qk_scale, N_QUERIES, Q_TILE_SIZE, K_TILE_SIZE, False, is_causal)
        dk, dv = _dkdv_tiles(dk, dv, k, v, Q_blk, dO_blk, L_blk, Dl_blk, tl.maximum(i_full, n_whole), n_tiles,
                             cols, rows0, qk_scale, N_QUERIES, Q_TILE_SIZE, K_TILE_SIZE, True, is_causal)

        dK_blk = tl.make_block_ptr(
            dK_ptr + b * stride_dkb, shape=(N_KEYS, D), strides=(stride_dkk, stride_dkd),
            offsets=(k_start, 0), block_shape=(K_TILE_SIZE, D), order=(1, 0),
        )
        dV_blk = tl.make_block_ptr(
            dV_ptr + b * stride_dvb, shape=(N_KEYS, D), strides=(stride_dvk, stride_dvd),
            offsets=(k_start, 0), block_shape=(K_TILE_SIZE, D), order=(1, 0),
        )
        tl.store(dK_blk, (dk * scale).to(dK_ptr.dtype.element_ty), boundary_check=(0,))
        tl.store(dV_blk, dv.to(dV_ptr.dtype.element_ty), boundary_check=(0,))

    @triton.jit
    def _dq_tiles(
        dq, q, do, lse2, delta, K_blk, V_blk, lo, hi, rows, cols0, qk_scale, N_KEYS,
        Q_TILE_SIZE: tl.constexpr, K_TILE_SIZE: tl.constexpr, MASKED: tl.constexpr, is_causal: tl.constexpr,
    ):
        """Add key tiles ``lo .. hi-1`` to one query tile's dQ (MASKED as in ``_fwd_tiles``)."""
        K_blk = tl.advance(K_blk, (lo * K_TILE_SIZE, 0))
        V_blk = tl.advance(V_blk, (lo * K_TILE_SIZE, 0))
        for j in range(lo, hi):
            if MASKED:
                k = tl.load(K_blk, boundary_check=(0,), padding_option="zero")  # (Bk, D)
                v = tl.load(V_blk, boundary_check=(0,), padding_option="zero")  # (Bk, D)
            else:
                k = tl.load(K_blk)
                v = tl.load(V_blk)
            s = _dot(q, tl.trans(k), tl.zeros((Q_TILE_SIZE, K_TILE_SIZE), tl.float32)) * qk_scale  # (Bq, Bk), base 2
            p = tl.exp2(s - lse2[:, None])  # (Bq, Bk)
            if MASKED:
                cols = j * K_TILE_SIZE + cols0  # (Bk,)
                valid = cols[None, :] < N_KEYS  # (1, Bk)
                if is_causal:
                    valid = valid & (cols[None, :] <= rows[:, None])  # (Bq, Bk)
                p = tl.where(valid, p, 0.0)
            dp = _dot(do, tl.trans(v), tl.zeros((Q_TILE_SIZE, K_TILE_SIZE), tl.float32))  # (Bq, Bk)
            ds = p * (dp - delta[:, None])  # (Bq, Bk)
            dq = _dot(ds.to(k.dtype), k, dq)  # (Bq, D)
            K_blk = tl.advance(K_blk, (K_TILE_SIZE, 0))
            V_blk = tl.advance(V_blk, (K_TILE_SIZE, 0))
        return dq

    @triton.jit
    def flash_bwd_dq_kernel(
        Q_ptr, K_ptr, V_ptr, dO_ptr, L_ptr, Dl_ptr,
        dQ_ptr,
        stride_qb, stride_qq, stride_qd,
        stride_kb, stride_kk, stride_kd,
        stride_vb, stride_vk, stride_vd,
        stride_dob, stride_doq, stride_dod,
        stride_lb, stride_lq,
        stride_dqb, stride_dqq, stride_dqd,
        N_QUERIES, N_KEYS,
        scale,
        D: tl.constexpr,
        Q_TILE_SIZE: tl.constexpr,
        K_TILE_SIZE: tl.constexpr,
        is_causal: tl.constexpr,
    ):
        q_tile = tl.num_programs(0) - 1 - tl.program_id(0)  # longest (causal) tiles first, as in the forward
        b = tl.program_id(1)
        q_start = q_tile * Q_TILE_SIZE

        Q_blk = tl.make_block_ptr(
            Q_ptr + b * stride_qb, shape=(N_QUERIES, D), strides=(stride_qq, stride_qd),
            offsets=(q_start, 0), block_shape=(Q_TILE_SIZE, D), order=(1, 0),
        )
        dO_blk = tl.make_block_ptr(
            dO_ptr + b * stride_dob, shape=(N_QUERIES, D), strides=(stride_doq, stride_dod),
            offsets=(q_start, 0), block_shape=(Q_TILE_SIZE, D), order=(1, 0),
        )
        L_blk = tl.make_block_ptr(
            L_ptr + b * stride_lb, shape=(N_QUERIES,), strides=(stride_lq,),
            offsets=(q_start,), block_shape=(Q_TILE_SIZE,), order=(0,),
        )
        Dl_blk = tl.make_block_ptr(
            Dl_ptr + b * stride_lb, shape=(N_QUERIES,), strides=(stride_lq,),
            offsets=(q_start,), block_shape=(Q_TILE_SIZE,), order=(0,),
        )
        K_blk = tl.make_block_ptr(
            K_ptr + b * stride_kb, shape=(N_KEYS, D), strides=(stride_kk, stride_kd),
            offsets=(0, 0), block_shape=(K_TILE_SIZE, D), order=(1, 0),
        )
        V_blk = tl.make_block_ptr(
            V_ptr + b * stride_vb, shape=(N_KEYS, D), strides=(stride_vk, stride_vd),
            offsets=(0, 0), block_shape=(K_TILE_SIZE, D), order=(1, 0),
        )

        q = tl.load(Q_blk, boundary_check=(0,), padding_option="zero")  # (Bq, D)
        do = tl.load(dO_blk, boundary_check=(0,), padding_option="zero")  # (Bq, D)
        lse2 = tl.load(L_blk, boundary_check=(0,), padding_option="zero") * 1.4426950408889634  # (Bq,)
        delta = tl.load(Dl_blk, boundary_check=(0,), padding_option="zero")  # (Bq,)
        rows = q_start + tl.arange(0, Q_TILE_SIZE)  # (Bq,)
        cols0 = tl.arange(0, K_TILE_SIZE)  # (Bk,)
        qk_scale = scale * 1.4426950408889634

        if is_causal:
            n_tiles = tl.cdiv(tl.minimum(N_KEYS, q_start + Q_TILE_SIZE), K_TILE_SIZE)
            n_full = tl.minimum((q_start + 1) // K_TILE_SIZE, N_KEYS // K_TILE_SIZE)
        else:
            n_tiles = tl.cdiv(N_KEYS, K_TILE_SIZE)
            n_full = N_KEYS // K_TILE_SIZE
        dq = tl.zeros((Q_TILE_SIZE, D), dtype=tl.float32)
        dq = _dq_tiles(dq, q, do, lse2, delta, K_blk, V_blk, 0, n_full, rows, cols0, qk_scale, N_KEYS,
                       Q_TILE_SIZE, K_TILE_SIZE, False, is_causal)
        dq = _dq_tiles(dq, q, do, lse2, delta, K_blk, V_blk, n_full, n_tiles, rows, cols0, qk_scale, N_KEYS,
                       Q_TILE_SIZE, K_TILE_SIZE, True, is_causal)

        dQ_blk = tl.make_block_ptr(
            dQ_ptr + b * stride_dqb, shape=(N_QUERIES, D), strides=(stride_dqq, stride_dqd),
            offsets=(q_start, 0), block_shape=(Q_TILE_SIZE, D), order=(1, 0),
        )
        tl.store(dQ_blk, (dq * scale).to(dQ_ptr.dtype.element_ty), boundary_check=(0,))

    def _configs(tiles):
        return [triton.Config({"Q_TILE_SIZE": bq, "K_TILE_SIZE": bk}, num_warps=w, num_stages=st)
                for (bq, bk, w, st) in tiles]

    _AUTOTUNE_KEY = ["N_QUERIES", "N_KEYS", "D", "is_causal"]
    flash_fwd_kernel_autotuned = triton.autotune(configs=_configs(AUTOTUNE_TILES["fwd"]), key=_AUTOTUNE_KEY,
                                                 do_bench=_tuner_bench)(flash_fwd_kernel)
    flash_bwd_dkdv_kernel_autotuned = triton.autotune(configs=_configs(AUTOTUNE_TILES["bwd_dkdv"]),
                                                      key=_AUTOTUNE_KEY, do_bench=_tuner_bench)(flash_bwd_dkdv_kernel)
    flash_bwd_dq_kernel_autotuned = triton.autotune(configs=_configs(AUTOTUNE_TILES["bwd_dq"]),
                                                    key=_AUTOTUNE_KEY, do_bench=_tuner_bench)(flash_bwd_dq_kernel)


def _tile_args(q_tile_size, k_tile_size, num_warps, num_stages):
    bq = int(q_tile_size or DEFAULT_Q_TILE)
    bk = int(k_tile_size or DEFAULT_K_TILE)
    for name, size in (("q_tile_size", bq), ("k_tile_size", bk)):
        if size < 16 or size & (size - 1):
            raise ValueError(f"{name} must be a power of two >= 16, got {size}")
    return bq, bk, int(num_warps or DEFAULT_NUM_WARPS), int(num_stages or DEFAULT_NUM_STAGES)


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
):
    """Launch the forward kernel.

    q: (batch, n_q, d); k, v: (batch, n_k, d).  Returns o (batch, n_q, d) in
    q's dtype and L (batch, n_q) in float32.  With ``autotune`` the tile sizes
    are chosen by ``triton.autotune`` (see :func:`last_triton_config`).
    """
    _require_triton(q, k, v)
    _check_shapes(q, k, v)
    batch, n_q, d = q.shape
    n_k = k.shape[1]
    o = torch.empty_like(q)  # (batch, n_q, d)
    lse = torch.empty(batch, n_q, dtype=torch.float32, device=q.device)  # (batch, n_q)
    args = (
        q, k, v, o, lse,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        o.stride(0), o.stride(1), o.stride(2),
        lse.stride(0), lse.stride(1),
        n_q, n_k, 1.0 / math.sqrt(d),
    )
    if autotune:
        grid = lambda meta: (triton.cdiv(n_q, meta["Q_TILE_SIZE"]), batch)  # noqa: E731
        flash_fwd_kernel_autotuned[grid](*args, D=d, is_causal=bool(is_causal))
        _record_autotuned("fwd", flash_fwd_kernel_autotuned, _shape_key(q, k, is_causal))
    else:
        bq, bk, warps, stages = _tile_args(q_tile_size, k_tile_size, num_warps, num_stages)
        flash_fwd_kernel[(triton.cdiv(n_q, bq), batch)](
            *args, D=d, Q_TILE_SIZE=bq, K_TILE_SIZE=bk, is_causal=bool(is_causal),
            num_warps=warps, num_stages=stages,
        )
        _record("fwd", bq, bk, warps, stages, False)
    return o, lse


def flash_backward_triton(
    q, k, v, o, do, lse,
    is_causal: bool = False,
    q_tile_size: int | None = None,
    k_tile_size: int | None = None,
    autotune: bool = False,
    num_warps: int | None = None,
    num_stages: int | None = None,
):
    """Two-pass backward (dK/dV kernel, then dQ kernel); no atomics.

    q, o, do: (batch, n_q, d); k, v: (batch, n_k, d); lse: (batch, n_q) float32.
    Returns dq, dk, dv in the dtypes of q, k, v.
    """
    _require_triton(q, k, v, do)
    _check_shapes(q, k, v)
    batch, n_q, d = q.shape
    n_k = k.shape[1]
    do = do.contiguous()
    lse = lse.contiguous()
    delta = torch.empty_like(lse)  # (batch, n_q): rowsum(O * dO), same layout as lse
    flash_bwd_delta_kernel[(triton.cdiv(n_q, DELTA_BLOCK), batch)](
        o, do, delta,
        o.stride(0), o.stride(1), o.stride(2),
        do.stride(0), do.stride(1), do.stride(2),
        delta.stride(0), delta.stride(1),
        n_q, D=d, BLOCK=DELTA_BLOCK,
    )
    dq = torch.empty_like(q)  # (batch, n_q, d)
    dk = torch.empty_like(k)  # (batch, n_k, d)
    dv = torch.empty_like(v)  # (batch, n_k, d)
    scale = 1.0 / math.sqrt(d)
    common = (
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        do.stride(0), do.stride(1), do.stride(2),
        lse.stride(0), lse.stride(1),
    )
    dkdv_args = (q, k, v, do, lse, delta, dk, dv, *common,
                 dk.stride(0), dk.stride(1), dk.stride(2),
                 dv.stride(0), dv.stride(1), dv.stride(2),
                 n_q, n_k, scale)
    dq_args = (q, k, v, do, lse, delta, dq, *common,
               dq.stride(0), dq.stride(1), dq.stride(2),
               n_q, n_k, scale)
    causal = bool(is_causal)
    if autotune:
        shape = _shape_key(q, k, causal)
        grid_k = lambda meta: (triton.cdiv(n_k, meta["K_TILE_SIZE"]), batch)  # noqa: E731
        grid_q = lambda meta: (triton.cdiv(n_q, meta["Q_TILE_SIZE"]), batch)  # noqa: E731
        flash_bwd_dkdv_kernel_autotuned[grid_k](*dkdv_args, D=d, is_causal=causal)
        _record_autotuned("bwd_dkdv", flash_bwd_dkdv_kernel_autotuned, shape)
        flash_bwd_dq_kernel_autotuned[grid_q](*dq_args, D=d, is_causal=causal)
        _record_autotuned("bwd_dq", flash_bwd_dq_kernel_autotuned, shape)
    else:
        bq, bk, warps, stages = _tile_args(q_tile_size, k_tile_size, num_warps, num_stages)
        flash_bwd_dkdv_kernel[(triton.cdiv(n_k, bk), batch)](
            *dkdv_args, D=d, Q_TILE_SIZE=bq, K_TILE_SIZE=bk, is_causal=causal,
            num_warps=warps, num_stages=stages,
        )
        _record("bwd_dkdv", bq, bk, warps, stages, False)
        flash_bwd_dq_kernel[(triton.cdiv(n_q, bq), batch)](
            *dq_args, D=d, Q_TILE_SIZE=bq, K_TILE_SIZE=bk, is_causal=causal,
            num_warps=warps, num_stages=stages,
        )
        _record("bwd_dq", bq, bk, warps, stages, False)
    return dq, dk, dv


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
