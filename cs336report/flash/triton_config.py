"""Launch configurations of the Triton FlashAttention-2 kernels: the defaults, the autotuner's
candidates and its timing budget, and the record of what each kernel last ran with.

Kernel names: "fwd" (forward), "bwd" (fused backward), "bwd_dkdv" and "bwd_dq" (two-pass backward).
A configuration is (Q_TILE_SIZE, K_TILE_SIZE, num_warps, num_stages).
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import torch

# Launch configurations: (Q_TILE_SIZE, K_TILE_SIZE, num_warps, num_stages). Without tile sizes
# from the caller a kernel runs the first entry of its DEFAULT_TILES whose bound (bytes of one row
# of Q: d elements) the row does not pass; None bounds nothing. Each entry fits in shared memory at
# its largest row; docs/flash.md gives the measurements and the compiler's resource reports.
DEFAULT_TILES = {
    "fwd": ((128, (128, 64, 8, 3)), (None, (64, 64, 4, 2))),
    "bwd": ((128, (64, 64, 4, 3)), (256, (64, 64, 8, 2)), (None, (32, 64, 8, 2))),
    "bwd_dkdv": ((128, (64, 64, 4, 3)), (None, (64, 64, 4, 2))),
    "bwd_dq": ((128, (64, 64, 4, 4)), (None, (64, 64, 4, 2))),
}
# Caller-given tile sizes run with these unless warps and stages are given too.
DEFAULT_NUM_WARPS = 4
DEFAULT_NUM_STAGES = 2

# The configs tried by the autotuner, per kernel. The forward and dQ kernels own a query tile and
# sweep key tiles; the dK/dV and fused kernels own a key tile and sweep query tiles, so their lists
# favour a large K tile and a small Q tile.
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
    "bwd": (
        (32, 64, 8, 2),
        (64, 64, 4, 2),
        (64, 64, 4, 3),
        (64, 64, 8, 2),
        (64, 128, 8, 2),
        (64, 128, 8, 3),
        (128, 64, 8, 2),
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
# Launch configuration of the most recent forward / backward, for reporting.
_last_config: dict[str, dict] = {}


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
    import triton.testing

    warmup, rep = _tune_ms or TRITON_TUNE_MS
    return triton.testing.do_bench(kernel_call, warmup=warmup, rep=rep, quantiles=quantiles)


def last_triton_config() -> dict[str, dict]:
    """Tile sizes / warps / stages used by the last launch of each kernel.

    Keys: "fwd" and, for the backward, "bwd" (fused) or "bwd_dkdv" and "bwd_dq" (two-pass). Each
    value has Q_TILE_SIZE, K_TILE_SIZE, num_warps, num_stages, ``tma`` (whether the tiles moved
    through tensor descriptors) and ``autotuned`` (whether the autotuner chose them); an
    autotuned launch also has ``candidates``, the times of every config tried for its shape (see
    ``_record_autotuned``).
    """
    return {name: dict(cfg) for name, cfg in _last_config.items()}


def _launch_config(q_tile: int, k_tile: int, num_warps: int, num_stages: int) -> dict:
    return {"Q_TILE_SIZE": int(q_tile), "K_TILE_SIZE": int(k_tile), "num_warps": int(num_warps),
            "num_stages": int(num_stages)}


def _record(name: str, q_tile: int, k_tile: int, num_warps: int, num_stages: int, autotuned: bool,
            tma: bool = False) -> None:
    _last_config[name] = {**_launch_config(q_tile, k_tile, num_warps, num_stages), "autotuned": bool(autotuned),
                          "tma": bool(tma)}


# Per (kernel, shape): the autotuner's timing table of the tuning for that shape, and the table
# object last seen (a new object means the tuner has just tuned).
_candidates: dict[tuple, list[dict]] = {}
_seen_timings: dict[str, object] = {}


def _shape_key(q: torch.Tensor, k: torch.Tensor, is_causal: bool) -> tuple:
    """What the autotuner tunes for (its key, plus the dtype it adds): one candidate table per value."""
    return (q.shape[1], k.shape[1], q.shape[-1], bool(is_causal), str(q.dtype))


def _record_autotuned(name: str, tuner, shape: tuple, tma: bool = False) -> None:
    """Record the autotuner's choice for ``shape`` and the candidates it timed for that shape.

    ``candidates``: each tried config with its median kernel time in ms (``None`` where it could
    not run, e.g. out of shared memory), fastest first, kept from the launch that tuned and
    repeated on later launches of the same shape (served from the tuner's cache).
    """
    cfg = tuner.best_config
    _record(name, cfg.kwargs["Q_TILE_SIZE"], cfg.kwargs["K_TILE_SIZE"], cfg.num_warps, cfg.num_stages, True, tma)
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


def default_tiles(kernel: str, row_bytes: int) -> tuple[int, int, int, int]:
    """The launch configuration ``kernel`` runs without tile sizes from the caller (DEFAULT_TILES)."""
    return next(cfg for bound, cfg in DEFAULT_TILES[kernel] if bound is None or row_bytes <= bound)


def _tile_args(kernel, q, q_tile_size, k_tile_size, num_warps, num_stages):
    """(Q tile, K tile, warps, stages) of ``kernel``: the caller's, else the default for q's rows."""
    bq, bk, warps, stages = default_tiles(kernel, q.shape[-1] * q.element_size())
    if q_tile_size is not None or k_tile_size is not None:
        bq, bk = int(q_tile_size or bq), int(k_tile_size or bk)
        warps, stages = DEFAULT_NUM_WARPS, DEFAULT_NUM_STAGES
    for name, size in (("q_tile_size", bq), ("k_tile_size", bk)):
        if size < 16 or size & (size - 1):
            raise ValueError(f"{name} must be a power of two >= 16, got {size}")
    return bq, bk, int(num_warps or warps), int(num_stages or stages)
