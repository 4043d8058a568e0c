"""Compile Triton FlashAttention-2 kernels ahead of their use, in a pool of processes.

The autotuner compiles each candidate configuration the first time it times it, one after
another in the tuning process: on an H100 that was most of a Triton ``flash_benchmarking`` job
(8 forward and 7 backward candidates at each of four head sizes, one to a few seconds each). A
compiled kernel lands in Triton's on-disk cache, keyed by its source, constants, argument
specialization and options; a later launch of the same kernel in another process loads it from
there. :func:`precompile` therefore launches every candidate once, on a small input of the shape
class the benchmark uses, in ``workers`` processes at once, before anything is timed; the tuning
that follows finds them compiled.

    summary = precompile(autotune_items("bfloat16", (16, 32, 64, 128), causal=True), workers=16)
    # {"kernels": 60, "workers": 16, "seconds": 21.3, "failed": []}

An item is ``(name, spec, shape, dtype, causal)``; ``spec`` is as :func:`variant_call` takes it
(None: the default forward and backward). The lengths of the small input are multiples of 16, as
every benchmarked length is, so that Triton specializes the launch as it will the timed ones.
"""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import torch

from ..machine.progress import progress

# The small input each compilation runs on: (batch, sequence); head size per item.
WARM_SHAPE = (1, 128)


def inputs(shape, dtype=torch.bfloat16, seed=0):
    """q, k, v, do: (batch, seq, d) on the GPU."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return tuple(torch.randn(*shape, device="cuda", dtype=dtype, generator=gen) for _ in range(4))


def variant_call(spec, q, k, v, do, o=None, lse=None, causal=True):
    """A no-argument call running one variant (the backward needs the forward's o and lse).

    ``spec``: pass ("fwd" | "bwd"), backward kind ("fused" | "two_pass"), tiles (Q tile, K tile,
    warps, stages; None: the defaults), tma and tma_reduce (None: as the autotuned launch decides)."""
    from . import triton_kernels as tk

    bq, bk, warps, stages = spec["tiles"] or (None, None, None, None)
    if spec["pass"] == "fwd":
        return lambda: tk.flash_forward_triton(q, k, v, causal, bq, bk, False, warps, stages, tma=spec.get("tma"))

    def backward():
        tk.set_triton_backward(spec["backward"])
        try:
            return tk.flash_backward_triton(q, k, v, o, do, lse, causal, bq, bk, False, warps, stages,
                                            tma=spec.get("tma"), tma_reduce=spec.get("tma_reduce"))
        finally:
            tk.set_triton_backward("fused")

    return backward


def autotune_items(dtype: str, d_heads, causal: bool, backward: str = "fused") -> list[tuple]:
    """One item per autotune candidate of the forward and of the ``backward`` kind's kernels, per head
    size: what a tuning of ``dtype`` at ``d_heads`` compiles."""
    from .triton_config import AUTOTUNE_TILES

    kernels = {"fused": ("bwd",), "two_pass": ("bwd_dkdv", "bwd_dq")}[backward]
    items = []
    for d in d_heads:
        shape = (*WARM_SHAPE, d)
        items.append((f"{dtype} d{d} defaults", None, shape, dtype, causal))
        items += [(f"{dtype} d{d} fwd {t}", {"pass": "fwd", "tiles": t}, shape, dtype, causal)
                  for t in AUTOTUNE_TILES["fwd"]]
        for kernel in kernels:  # a two-pass candidate runs both kernels with its tiles: each list once
            items += [(f"{dtype} d{d} {kernel} {t}", {"pass": "bwd", "backward": backward, "tiles": t},
                       shape, dtype, causal) for t in AUTOTUNE_TILES[kernel]]
    return items


def _compile(item) -> tuple[str, str, float]:
    """Pool worker: run one item once, compiling its kernels into the shared cache."""
    from . import triton_kernels as tk

    name, spec, shape, dtype, causal = item
    start = time.perf_counter()
    try:
        q, k, v, do = inputs(shape, getattr(torch, dtype))
        o, lse = tk.flash_forward_triton(q, k, v, causal)
        if spec is None:
            tk.flash_backward_triton(q, k, v, o, do, lse, causal)
        else:
            variant_call(spec, q, k, v, do, o, lse, causal)()
        torch.cuda.synchronize()
        return name, "ok", round(time.perf_counter() - start, 2)
    except Exception as exc:  # a candidate that fails here fails in the tuning too, which says why
        return name, f"{type(exc).__name__}: {str(exc)[:200]}", round(time.perf_counter() - start, 2)


def precompile(items: list[tuple], workers: int) -> dict | None:
    """Run ``items`` in ``workers`` fresh processes (spawned: each starts its own CUDA context and
    inherits the environment, Triton's cache folder included); None without CUDA or Triton, where
    there is nothing to compile ahead. Returns the number of items, the workers, the wall time, and
    the items that failed with why."""
    from . import triton_kernels as tk

    if not items or not torch.cuda.is_available() or not tk.triton_available():
        return None
    workers = max(1, min(int(workers), len(items)))
    progress(f"compiling {len(items)} Triton kernel configurations ahead, in {workers} processes")
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        done = list(pool.map(_compile, items))
    out = {"kernels": len(done), "workers": workers, "seconds": round(time.perf_counter() - start, 1),
           "failed": [[name, status] for name, status, _ in done if status != "ok"]}
    progress(f"compiled ahead in {out['seconds']} s ({len(out['failed'])} failed; the record says why)")
    return out
