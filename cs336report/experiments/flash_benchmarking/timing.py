"""flash_benchmarking's timed passes: each (sequence length, head dim) of a cell's grid, forward,
backward and both, timed and profiled, and its peak memory (the package's docstring:
:mod:`cs336report.experiments.flash_benchmarking`).

    python -m cs336report run flash_benchmarking --name triton-bf16 --cell '{...}' --out r.json
"""

from __future__ import annotations

import math
import os
import statistics
import timeit
import warnings
from contextlib import nullcontext
from typing import Callable

import torch

from ...machine.time_limit import TimeLimitExceeded, time_limit
from ...measure.timing import Spent, is_out_of_memory, release_memory, summarize, synchronize
from ...names.flash import IMPLEMENTATIONS, PASSES  # noqa: F401 (kept where the report reads them)
from .functions import (  # noqa: F401  (the leaderboard and tests reach them here)
    FLASH_PIECES,
    SDPA_BACKENDS,
    STUDENT_ROWS,
    attention_function,
    naive_attention,
)

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
UNSUPPORTED_MESSAGES = ("No available kernel", "No viable backend")
# A CPU timing keeps at least this many samples, however long one call takes.
CPU_MIN_SAMPLES = 5
# Calls of a pass profiled for its kernels' own GPU time (CUDA): at most KERNEL_CALLS, and no more
# than fill KERNEL_BUDGET_S at the pass's median time, but at least one.
KERNEL_CALLS = 5
KERNEL_BUDGET_S = 0.05
# FLOPs of a pass, in units of the forward's two matrix products (QK^T and PV): FlashAttention-2's
# backward runs five (it recomputes QK^T), so backward = 2.5 x forward.
PASS_FLOP_FACTOR = {"forward": 1.0, "backward": 2.5, "forward_backward": 3.5}


def attention_flops(batch: int, seq: int, d: int, causal: bool, pass_name: str) -> float:
    """Matmul FLOPs of one pass: 2 x 2·B·T²·d forward, halved when causal (the masked half is skipped)."""
    forward = 4 * batch * seq * seq * d * (0.5 if causal else 1.0)
    return forward * PASS_FLOP_FACTOR[pass_name]


def profiled_calls(median_s: float) -> int:
    """How many calls of a pass whose median time is ``median_s`` :func:`kernel_only` profiles."""
    if median_s <= 0:
        return KERNEL_CALLS
    return max(1, min(KERNEL_CALLS, math.ceil(KERNEL_BUDGET_S / median_s)))


def kernel_only(fn: Callable, device: str, times_s: list[float], flops: float) -> dict:
    """The kernels' own GPU time per call of ``fn`` (torch.profiler, :func:`profiled_calls` calls),
    beside the median of do_bench's ``times_s``: their difference is the per-call overhead, and the
    FLOP rate is given for both. Empty on a CPU (no device kernels to separate)."""
    if not device.startswith("cuda"):
        return {}
    from ...measure.kernel_times import kernel_total

    bench_s = statistics.median(times_s)
    profiled = profiled_calls(bench_s)
    kernel_s, calls = kernel_total(fn, profiled)
    return {"kernel_s": kernel_s, "kernel_calls": calls, "profiled_calls": profiled,
            "overhead_s": max(bench_s - kernel_s, 0.0), "flops": flops,
            "tflops": {"kernels": flops / kernel_s / 1e12 if kernel_s > 0 else None,
                       "do_bench": flops / bench_s / 1e12 if bench_s > 0 else None}}


# ----------------------------------------------------------------------------- timing


def timer_name(device: str) -> str:
    if device.startswith("cuda"):
        return "triton.testing.do_bench"
    return "timeit.default_timer (CPU)"


def bench(fn: Callable, device: str, warmup_ms: float, rep_ms: float, grad_to_none=None) -> list[float]:
    """Per-call times in seconds of ``fn`` after a warm-up, do_bench's rule on any device.

    CUDA: ``triton.testing.do_bench(..., return_mode="all")``. CPU: ``fn`` once, five calls to
    estimate its time, ``warmup_ms / estimate`` untimed calls (at least one), then
    ``rep_ms / estimate`` calls timed one by one (at least ``CPU_MIN_SAMPLES``), gradients reset
    before every call.
    """
    if device.startswith("cuda"):
        from triton.testing import do_bench

        times_ms = do_bench(fn, warmup=warmup_ms, rep=rep_ms, grad_to_none=grad_to_none, return_mode="all")
        return [t / 1e3 for t in times_ms]

    def reset():
        for t in grad_to_none or ():
            t.grad = None

    fn()
    start = timeit.default_timer()
    for _ in range(5):
        reset()
        fn()
    estimate_ms = max((timeit.default_timer() - start) / 5 * 1e3, 1e-6)
    for _ in range(max(1, int(warmup_ms / estimate_ms))):
        reset()
        fn()
    times = []
    for _ in range(max(CPU_MIN_SAMPLES, int(rep_ms / estimate_ms))):
        reset()
        start = timeit.default_timer()
        fn()
        times.append(timeit.default_timer() - start)
    return times


def classify(exc: BaseException) -> str:
    """"oom", "unsupported" (backend cannot run this input, or Triton cannot run here), "not_implemented"
    (a student's adapter) or "error"."""
    from ...flash import TritonUnavailableError
    from ...student.resolve import AdapterNotImplemented

    if isinstance(exc, AdapterNotImplemented):
        return "not_implemented"

    seen = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    if any(is_out_of_memory(e) or "out of memory" in str(e).lower() for e in seen):
        return "oom"
    if any(isinstance(e, TritonUnavailableError) or any(m in str(e) for m in UNSUPPORTED_MESSAGES) for e in seen):
        return "unsupported"
    return "error"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _attempt(measure: Callable[[], dict], device: str) -> dict:
    """Run one measurement; a failure becomes a status and a message, never an exception."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return {"status": "ok", **measure()}
        except TimeLimitExceeded:  # the cell's time is up: no pass after it runs
            raise
        except Exception as exc:  # every failure of one pass is a result
            status, message = classify(exc), _first_line(exc)
    release_memory(device)
    out = {"status": status, "error": message}
    if status == "unsupported":
        # SDPA says why a backend refused the input in warnings; keep them with the status.
        reasons = list(dict.fromkeys(str(w.message).strip().splitlines()[0] for w in caught if str(w.message).strip()))
        if reasons:
            out["reasons"] = reasons[:4]
    return out


# ----------------------------------------------------------------------------- one shape


def make_inputs(batch: int, seq: int, d: int, dtype: torch.dtype, device: str, seed: int):
    """q, k, v (batch, seq, d) that require grad, and the upstream gradient do (batch, seq, d)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    q, k, v, do = (torch.randn(batch, seq, d, device=device, dtype=dtype, generator=gen) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(True)
    return q, k, v, do


def memory_profile(attn: Callable, q, k, v, do, device: str) -> dict | None:
    """Allocator bytes around one forward and one backward (CUDA only).

    ``baseline``: allocated before the forward (inputs and the process's own buffers);
    ``saved_for_backward``: allocated after the forward minus the baseline (output and what
    autograd keeps); ``forward_peak`` / ``backward_peak`` / ``peak``: the allocator's peaks.
    """
    if not device.startswith("cuda"):
        return None
    for t in (q, k, v):
        t.grad = None
    synchronize(device)
    baseline = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    o = attn(q, k, v)
    synchronize(device)
    forward_peak = torch.cuda.max_memory_allocated()
    saved = torch.cuda.memory_allocated() - baseline
    torch.cuda.reset_peak_memory_stats()
    o.backward(do)
    synchronize(device)
    backward_peak = torch.cuda.max_memory_allocated()
    del o
    for t in (q, k, v):
        t.grad = None
    return {
        "baseline_bytes": baseline,
        "inputs_bytes": sum(t.numel() * t.element_size() for t in (q, k, v, do)),
        "saved_for_backward_bytes": saved,
        "forward_peak_bytes": forward_peak,
        "backward_peak_bytes": backward_peak,
        "peak_bytes": max(forward_peak, backward_peak),
    }


def run_shape(attn: Callable, impl: str, seq: int, d: int, cell: dict, spent: Spent | None = None) -> dict:
    """Time the three passes of one (seq, d) and read its memory; failures are recorded per pass.
    ``spent`` sums the wall time of its parts (inputs, do_bench, the kernels' profile, memory)."""
    spent = spent or Spent()
    device, dtype = cell["device"], DTYPES[cell["dtype"]]
    warmup_ms, rep_ms = cell["warmup_ms"], cell["rep_ms"]
    entry: dict = {"seq": seq, "d": d, "passes": {}, "memory": None, "tiles": None}
    with spent("inputs"):
        inputs = _attempt(lambda: {"tensors": make_inputs(cell["batch"], seq, d, dtype, device, cell["seed"])}, device)
    if inputs["status"] != "ok":
        entry["passes"] = {p: {k: v for k, v in inputs.items()} for p in PASSES}
        return entry
    q, k, v, do = inputs["tensors"]
    grads = [q, k, v]

    def timed(fn, pass_name):
        def measure():
            with spent("do_bench"):
                times = bench(fn, device, warmup_ms, rep_ms, grad_to_none=grads)
            flops = attention_flops(cell["batch"], seq, d, cell.get("causal", True), pass_name)
            with spent("kernel_profile"):
                kernels = kernel_only(fn, device, times, flops)
            return {"times_s": times, "stats_s": summarize(times), **kernels}
        return measure

    entry["passes"]["forward"] = _attempt(timed(lambda: attn(q, k, v), "forward"), device)

    def backward_alone():
        o = attn(q, k, v)
        try:
            return timed(lambda: o.backward(do, retain_graph=True), "backward")()
        finally:
            del o

    entry["passes"]["backward"] = _attempt(backward_alone, device)
    entry["passes"]["forward_backward"] = _attempt(timed(lambda: attn(q, k, v).backward(do), "forward_backward"),
                                                   device)
    if device.startswith("cuda") and any(p["status"] == "ok" for p in entry["passes"].values()):
        with spent("memory"):
            memory = _attempt(lambda: {"bytes": memory_profile(attn, q, k, v, do, device)}, device)
        entry["memory"] = memory.get("bytes") if memory["status"] == "ok" else {"status": memory["status"]}
    if impl in ("triton", "triton_fixed") and entry["passes"]["forward_backward"]["status"] == "ok":
        from ...flash import last_triton_config

        entry["tiles"] = last_triton_config()
    del q, k, v, do, grads, inputs
    release_memory(device)
    return entry


def _set_tf32(enabled: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def _device_info(device: str) -> dict:
    if not device.startswith("cuda"):
        return {"device_memory_bytes": None, "cudnn_version": None}
    return {"device_memory_bytes": torch.cuda.get_device_properties(0).total_memory,
            "cudnn_version": torch.backends.cudnn.version()}


def precompile_candidates(dtype: str, d_heads, causal: bool) -> dict | None:
    """Compile every autotune candidate of the Triton kernels for ``dtype`` at ``d_heads`` at once,
    in as many processes as this job has cores, before anything is timed
    (:mod:`cs336report.flash.precompile`); the tuning then finds them compiled. None off CUDA."""
    from ...flash import precompile
    from ...flash.triton_kernels import triton_backward

    items = precompile.autotune_items(str(DTYPES[dtype]).removeprefix("torch."), d_heads, causal,
                                      triton_backward())
    return precompile.precompile(items, workers=len(os.sched_getaffinity(0)))


def first_compiled_call(attn: Callable, cell: dict) -> dict:
    """The first call of a ``torch.compile`` implementation, forward and backward on the grid's first
    shape, before anything is timed: it compiles the graphs (``dynamic=True``) that the later shapes
    reuse, so that the first shape's do_bench does not pay for the compilation and the cost appendix
    counts it as a first compiled call. A later shape whose guards fail compiles again in its own
    do_bench."""
    from ...measure.compiling import first_call

    seq, d, device = cell["seqs"][0], cell["d_heads"][0], cell["device"]

    def call():
        q, k, v, do = make_inputs(cell["batch"], seq, d, DTYPES[cell["dtype"]], device, cell["seed"])
        return {**first_call(lambda: attn(q, k, v).backward(do), device), "seq": seq, "d": d}

    out = _attempt(call, device)
    release_memory(device)
    return out


def run_shapes(attn: Callable, impl: str, cell: dict, spent: Spent) -> list[dict]:
    """:func:`run_shape` for every (seq, d) of the cell, within the cell's ``timeout_s`` where it has one
    (the student's rows): past it, :class:`TimeLimitExceeded` carries the shapes measured so far."""
    shapes: list[dict] = []
    try:
        with time_limit(cell.get("timeout_s"), f"the {impl} cell (student.flash_timeout_s)"):
            for d in cell["d_heads"]:
                for seq in cell["seqs"]:
                    shapes.append(run_shape(attn, impl, seq, d, cell, spent))
    except TimeLimitExceeded as exc:
        exc.partial_data = {"implementation": impl, "label": IMPLEMENTATIONS[impl], "shapes": shapes}
        raise
    return shapes


def run(cell: dict) -> dict:
    """Every (seq, d) of one implementation and dtype; returns the ``data`` of the result."""
    impl, device = cell["implementation"], cell["device"]
    if cell["dtype"] not in DTYPES:
        raise ValueError(f"cell field 'dtype' is {cell['dtype']!r}, expected one of {tuple(DTYPES)}")
    _set_tf32(cell["tf32"])
    student = {"student": cell["student"]} if cell.get("student") else {}  # the student's rows only
    attn, notes = attention_function(impl, cell["causal"], **student)
    checked = {}
    if notes.get("provenance", "built-in") != "built-in":  # a student's function: is it attention at all?
        from .reference_check import check_forward

        checked = {"reference_check": check_forward(attn, cell, DTYPES[cell["dtype"]])}
    tuning = nullcontext()
    spent = Spent()
    if notes.get("autotune"):
        from ...flash.triton_kernels import tuning_budget

        tuning = tuning_budget(cell.get("tune_warmup_ms"), cell.get("tune_rep_ms"))
        with spent("precompile"):
            notes["precompiled"] = precompile_candidates(cell["dtype"], cell["d_heads"], cell["causal"])
    first = None
    with tuning as tune_ms:
        if tune_ms:
            notes["tune_ms"] = {"warmup": tune_ms[0], "rep": tune_ms[1]}
        if notes.get("compile"):
            with spent("first_call"):
                first = first_compiled_call(attn, cell)
        shapes = run_shapes(attn, impl, cell, spent)
    if impl.startswith("flash_pytorch") and notes.get("provenance") == "built-in":
        from ...flash import backward_mode

        notes["backward_mode"] = backward_mode()
    return {
        "implementation": impl,
        "label": IMPLEMENTATIONS[impl],
        "provenance": notes.get("provenance", "built-in"),
        "timer": timer_name(device),
        "passes": list(PASSES),
        "notes": notes,
        "shapes": shapes,
        **checked,
        **({"first_call": first} if first else {}),
        "spent_s": spent.record(),
        **_device_info(device),
    }


