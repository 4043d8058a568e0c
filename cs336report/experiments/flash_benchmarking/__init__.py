"""flash_benchmarking: FlashAttention-2 against PyTorch attention over a grid of shapes.

``flash_benchmarking``: one cell is one (implementation, dtype). It runs every
(sequence length, head dim) of the grid in one process, so process start-up, ``torch.compile``
and Triton compilation are paid once per cell. For each shape, q, k, v (batch, seq, d) and the
upstream gradient are drawn before any timing; then three passes are timed:

* ``forward``: ``o = attn(q, k, v)`` with gradients enabled (what a training step runs);
* ``backward``: ``o.backward(do, retain_graph=True)`` on one stored forward;
* ``forward_backward``: both, as one call.

On CUDA the timer is ``triton.testing.do_bench`` (CUDA events, L2 flushed before each call,
raw per-call times kept with ``return_mode="all"``); on a CPU the same warm-up/repetition rule
is applied with ``timeit.default_timer``. do_bench's events enclose the host's work of a call
too: at short sequences a call's kernels finish before the host has launched the next one, and
the time is the per-call host overhead (Python, autograd, the autotuner's cache lookup, kernel
launches), not the kernels. So on CUDA each pass is also run ``KERNEL_CALLS`` times under
torch.profiler (:func:`kernel_only`), which gives the GPU time of its kernels alone
(``kernel_s``), the overhead per call (``overhead_s``: do_bench's median less the kernels) and
the FLOP rate of both (``tflops``). torch.profiler is chosen over do_bench's CUDA-graph variant
because it times the calls as they run here: the backward pass through autograd and the
autotuned Triton launches cannot all be captured in a graph, and a graph would hide the very
overhead the comparison is meant to name. A pass is profiled for at most ``KERNEL_CALLS`` calls and
about ``KERNEL_BUDGET_S`` of its median time, at least once (:func:`profiled_calls`): one call of a
50 ms pass says as much as five, and five cost as much as its timing. After the timings, one instrumented forward and
backward reads the CUDA allocator's peak. A pass that runs out of memory, or a backend that
cannot run the shape, is recorded as such and the cell goes on with the next shape.

The package declares the cells here, without torch: flash_benchmarking's grid and
flash_leaderboard's one cell, the 2025 course leaderboard's harness with every implementation in
one process. The passes are timed in :mod:`.timing`, the attention function of each
implementation is :mod:`.functions`, the leaderboard row, which shares them and the timers, is
:mod:`.leaderboard`, and :mod:`.tune` checks and times the Triton paths for choosing their
defaults.

    python -m cs336report run flash_benchmarking --name triton-bf16 --cell '{...}' --out r.json
"""

from __future__ import annotations

from ...names.flash import STUDENT_ROWS

def cell_name(cell: dict) -> str:
    return f"{cell['implementation']}-{cell['dtype']}"


def cells(cfg) -> dict[str, dict]:
    """One cell per (implementation, dtype); each runs every (seq, d) of the grid."""
    grid = cfg.grid("flash_benchmarking")
    if not grid:
        return {}
    out = {}
    implementations = list(grid["implementations"])
    if cfg.student:  # the student's function beside each configured family of ours
        implementations = [i for i, ours in STUDENT_ROWS.items() if set(ours) & set(implementations)] + implementations
    for impl in implementations:
        for dtype in grid["dtypes"]:
            cell = {
                "device": cfg.device,
                "implementation": impl,
                "dtype": dtype,
                "seqs": sorted(grid["seqs"]),
                "d_heads": sorted(grid["d_heads"]),
                "batch": grid["batch"],
                "causal": True,
                "warmup_ms": grid["warmup_ms"],
                "rep_ms": grid["rep_ms"],
                "tf32": cfg.run["tf32"],
                "seed": cfg.run["seed"],
            }
            if impl in STUDENT_ROWS:  # the student's, through their adapters, within a time limit
                cell.update(student=cfg.student, timeout_s=cfg.data["student"]["flash_timeout_s"])
            if impl == "triton":  # the autotuner's timing of each candidate tile config
                cell.update(tune_warmup_ms=grid["tune_warmup_ms"], tune_rep_ms=grid["tune_rep_ms"])
            out[cell_name(cell)] = cell
    return out


def leaderboard_cells(cfg) -> dict[str, dict]:
    grid = cfg.grid("flash_leaderboard")
    if not grid:
        return {}
    cell = {"device": cfg.device, "seed": cfg.run["seed"], "tf32": cfg.run["tf32"], **grid}
    if cfg.student and {"triton", "triton_fixed"} & set(grid["implementations"]):
        # the student's Triton function is the entry; ours follow as reference rows
        cell.update(implementations=["student_triton", *grid["implementations"]], student=cfg.student)
    return {"leaderboard": cell}


EXPERIMENTS = {"flash_benchmarking": (cells, ".timing:run"),
               "flash_leaderboard": (leaderboard_cells, ".leaderboard:run_leaderboard")}
