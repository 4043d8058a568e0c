"""flash_leaderboard: the 2025 course leaderboard's harness, every implementation in one process.

q, k, v = ``randn(3, 16, 16384, 64)`` (bf16, causal, heads as the batch): ``torch.compile`` of the
attention call, ``o.sum().backward()``, ``do_bench(fn, rep, warmup)``, after a correctness check of
the first heads against the float32 reference. The attention functions and the timer are those of
:mod:`cs336report.experiments.flash_benchmarking.timing`. On CUDA each row also keeps the GPU time of
every kernel of one call (:func:`cs336report.measure.kernel_times.kernel_times` over
``KERNEL_PROFILE_STEPS`` calls), each marked ``forward`` when the forward alone,
``flash(q, k, v, True).sum()``, runs it, else ``backward``.

    python -m cs336report run flash_leaderboard --name leaderboard --cell '{...}' --out r.json
"""

from __future__ import annotations

from typing import Callable

import torch

from ...measure.timing import release_memory, summarize, synchronize
from ...names.flash import KERNEL_PROFILE_STEPS  # noqa: F401
from . import timing as fb


def check_against_reference(o, grads, q, k, v, heads: int, tolerance: float) -> dict:
    """Compare output and gradients of ``o.sum()`` on the first ``heads`` heads with the float32 reference.

    o, q, k, v, grads[i]: (heads_total, seq, d). A value passes when |x - ref| <= tol + tol * |ref|.
    """
    from ...flash import reference_attention

    heads = min(heads, q.shape[0])
    leaves = [t[:heads].detach().float().requires_grad_(True) for t in (q, k, v)]
    ref = reference_attention(*leaves, is_causal=True)  # (heads, seq, d)
    ref.sum().backward()
    out = {"heads": heads, "tolerance": tolerance, "max_abs_error": {}, "worst_ratio": {}}
    pairs = {"o": (o[:heads], ref)} | {f"d{n}": (g[:heads], leaf.grad) for n, g, leaf in zip("qkv", grads, leaves)}
    for name, (got, want) in pairs.items():
        err = (got.detach().float() - want.detach()).abs()
        out["max_abs_error"][name] = err.max().item()
        out["worst_ratio"][name] = (err / (tolerance + tolerance * want.detach().abs())).max().item()
    out["passed"] = all(r <= 1.0 for r in out["worst_ratio"].values())
    del leaves, ref
    return out


def _leaderboard_row(impl: str, cell: dict, qkv: torch.Tensor) -> dict:
    device = cell["device"]
    q, k, v = qkv  # three (heads, seq, d) views of one leaf, as the harness unpacks them
    student = {"student": cell["student"]} if impl in fb.STUDENT_ROWS and cell.get("student") else {}
    attn, notes = fb.attention_function(impl, causal=bool(cell["causal"]), **student)
    if notes.get("autotune"):  # its candidates compiled at once, before the harness's first call tunes them
        notes["precompiled"] = fb.precompile_candidates(cell["dtype"], [cell["d"]], bool(cell["causal"]))

    def call(q, k, v, is_causal):
        return attn(q, k, v)

    row: dict = {"implementation": impl, "label": fb.IMPLEMENTATIONS[impl], "notes": notes, "compiled": False}
    flash = call
    if cell["compile"]:
        compiled = torch.compile(call)
        try:
            qkv.grad = None
            compiled(q, k, v, True).sum().backward()
            synchronize(device)
            flash, row["compiled"] = compiled, True
        except Exception as exc:  # compiled harness failed: the eager call is timed, and the reason kept
            if fb.classify(exc) == "oom":
                raise
            row["compile_error"] = fb._first_line(exc)
            release_memory(device)

    qkv.grad = None
    o = flash(q, k, v, True)
    o.sum().backward()
    grads = qkv.grad  # (3, heads, seq, d)
    row["check"] = check_against_reference(o, grads, q, k, v, cell["check_heads"], cell["tolerance"])
    del o, grads
    qkv.grad = None
    release_memory(device)

    def flash_forward_backward():
        o = flash(q, k, v, True)
        loss = o.sum()
        loss.backward()

    times = fb.bench(flash_forward_backward, device, cell["warmup_ms"], cell["rep_ms"])
    row["times_s"] = times
    row["stats_s"] = summarize(times)
    if impl in ("triton", "triton_fixed"):
        from ...flash import last_triton_config

        row["tiles"] = last_triton_config()
    qkv.grad = None
    if device.startswith("cuda"):
        row["kernels"] = harness_kernels(lambda: flash(q, k, v, True).sum(), flash_forward_backward)
        qkv.grad = None
        synchronize(device)
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        flash_forward_backward()
        synchronize(device)
        row["memory"] = {"baseline_bytes": base, "peak_bytes": torch.cuda.max_memory_allocated()}
    qkv.grad = None
    return row


def harness_kernels(forward: Callable, step: Callable) -> list[dict]:
    """Every kernel of one harness call: ms and launches per call, and the pass that runs it."""
    from ...measure.kernel_times import kernel_times

    in_forward = kernel_times(forward, KERNEL_PROFILE_STEPS)
    return [{"name": name, "ms": t["ms"], "calls": t["calls"], "pass": "forward" if name in in_forward else "backward"}
            for name, t in kernel_times(step, KERNEL_PROFILE_STEPS).items()]


def run_leaderboard(cell: dict) -> dict:
    """The leaderboard harness for every implementation of the cell, in one process."""
    device = cell["device"]
    fb._set_tf32(cell["tf32"])
    torch.manual_seed(cell["seed"])
    qkv = torch.randn(3, cell["heads"], cell["seq"], cell["d"], device=device, dtype=fb.DTYPES[cell["dtype"]],
                      requires_grad=True)  # (3, heads, seq, d)
    rows = []
    for impl in cell["implementations"]:
        attempt = fb._attempt(lambda: _leaderboard_row(impl, cell, qkv), device)
        rows.append({"implementation": impl, "label": fb.IMPLEMENTATIONS[impl], **attempt})
        qkv.grad = None
        release_memory(device)
    return {
        "timer": fb.timer_name(device),
        "harness": "o = flash(q, k, v, True); o.sum().backward(); flash = torch.compile(attention)"
        if cell["compile"] else "o = attention(q, k, v, True); o.sum().backward()",
        "rows": rows,
        **fb._device_info(device),
    }


