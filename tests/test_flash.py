"""Tests for cs336report.flash: FlashAttention-2 in PyTorch and Triton vs. reference attention.

Shapes: q is (batch, n_queries, d), k and v are (batch, n_keys, d).

* PyTorch implementation: runs in this process on CPU (eager backward, plus one
  test of the torch.compile backward).
* Triton kernels on CPU: Triton's interpreter is only used when TRITON_INTERPRET=1
  is set before Triton is imported, so all interpreter cases run in one child
  process started with that variable (``python tests/test_flash.py`` with
  TRITON_INTERPRET=1 runs them and prints a JSON report); each case is then
  checked by its own parametrised test here.
* ``@pytest.mark.gpu`` tests run the compiled kernels at full size on CUDA.

Tolerances: float32 uses rtol = atol = 1e-2, as the assignment's tests do.
bfloat16 keeps 8 significant bits, so every stored input, output and gradient
carries up to ~4e-3 relative rounding, and probabilities are rounded to bf16
before the P V and dSᵀ Q products; it is compared against the float32
reference computed from the same bf16 inputs with rtol = atol = 3e-2.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

from cs336report.flash import (
    FlashAttention2PyTorch,
    backward_mode,
    flash_attention,
    flash_forward_pytorch,
    reference_attention,
    set_backward_mode,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
FP32_TOL = {"rtol": 1e-2, "atol": 1e-2}
BF16_TOL = {"rtol": 3e-2, "atol": 3e-2}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


# ----------------------------------------------------------------------------- helpers


def make_inputs(batch, n_q, d, dtype=torch.float32, device="cpu", seed=0, n_k=None):
    """q (batch, n_q, d), k and v (batch, n_k, d), upstream gradient do (batch, n_q, d)."""
    n_k = n_q if n_k is None else n_k
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, n_q, d, generator=gen)
    k = torch.randn(batch, n_k, d, generator=gen)
    v = torch.randn(batch, n_k, d, generator=gen)
    do = torch.randn(batch, n_q, d, generator=gen)
    return [t.to(device=device, dtype=dtype) for t in (q, k, v, do)]


def run_attention(fn, q, k, v, do, is_causal):
    """Forward + backward through ``fn(q, k, v, is_causal)``.

    Returns o, L (or None if not saved by fn), dq, dk, dv.
    """
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    o = fn(q, k, v, is_causal)
    lse = None
    if o.grad_fn is not None and hasattr(o.grad_fn, "saved_tensors"):
        batch, n_q = q.shape[0], q.shape[1]
        found = [t for t in o.grad_fn.saved_tensors if t.shape == (batch, n_q)]
        lse = found[0] if found else None
    o.backward(do)
    return o.detach(), lse, q.grad, k.grad, v.grad


def reference_results(q, k, v, do, is_causal):
    """Reference o, L, dq, dk, dv in float32 (computed from the given, possibly bf16, inputs)."""
    qf, kf, vf = (t.detach().float().requires_grad_(True) for t in (q, k, v))
    o, lse = reference_attention(qf, kf, vf, is_causal, return_lse=True)
    o.backward(do.float())
    return o.detach(), lse.detach(), qf.grad, kf.grad, vf.grad


def compare(got, want, tol, check_lse=True):
    names = ("o", "L", "dq", "dk", "dv")
    for name, a, b in zip(names, got, want):
        if name == "L":
            if not check_lse:
                continue
            assert a is not None, "L (batch, n_queries) was not saved for backward"
            torch.testing.assert_close(a.float(), b, rtol=FP32_TOL["rtol"], atol=FP32_TOL["atol"], msg=name)
            continue
        assert a.shape == b.shape, (name, a.shape, b.shape)
        torch.testing.assert_close(a.float(), b, **tol, msg=lambda m, n=name: f"{n}: {m}")


def pytorch_impl(q_tile, k_tile):
    return lambda q, k, v, c: FlashAttention2PyTorch.apply(q, k, v, c, q_tile, k_tile)


@pytest.fixture(autouse=True)
def eager_backward():
    """Eager PyTorch backward by default (torch.compile on CPU costs ~20 s per first call)."""
    before = backward_mode()
    set_backward_mode("eager")
    yield
    set_backward_mode(before)


# ----------------------------------------------------------------------------- reference sanity


def test_reference_matches_sdpa():
    q, k, v, _ = make_inputs(2, 48, 32)
    for causal in (False, True):
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.testing.assert_close(reference_attention(q, k, v, causal), want, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- PyTorch on CPU


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("tiles", [(16, 16), (32, 64)])
def test_pytorch_fp32_b4_n128_d64(is_causal, tiles):
    q, k, v, do = make_inputs(4, 128, 64)
    got = run_attention(pytorch_impl(*tiles), q, k, v, do, is_causal)
    compare(got, reference_results(q, k, v, do, is_causal), FP32_TOL)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("n", [100, 129])
def test_pytorch_ragged_lengths(n, is_causal):
    q, k, v, do = make_inputs(2, n, 32, seed=n)
    got = run_attention(pytorch_impl(32, 16), q, k, v, do, is_causal)
    compare(got, reference_results(q, k, v, do, is_causal), FP32_TOL)


@pytest.mark.parametrize("d", [16, 32, 64, 128])
def test_pytorch_head_dims(d):
    q, k, v, do = make_inputs(2, 64, d, seed=d)
    for causal in (False, True):
        got = run_attention(pytorch_impl(16, 32), q, k, v, do, causal)
        compare(got, reference_results(q, k, v, do, causal), FP32_TOL)


@pytest.mark.parametrize("is_causal", [False, True])
def test_pytorch_bf16(is_causal):
    q, k, v, do = make_inputs(2, 64, 32, dtype=torch.bfloat16)
    got = run_attention(pytorch_impl(16, 16), q, k, v, do, is_causal)
    assert got[0].dtype == torch.bfloat16 and got[2].dtype == torch.bfloat16
    compare(got, reference_results(q, k, v, do, is_causal), BF16_TOL)


def test_pytorch_cross_attention_lengths():
    q, k, v, do = make_inputs(2, 40, 32, n_k=72)
    got = run_attention(pytorch_impl(16, 32), q, k, v, do, False)
    compare(got, reference_results(q, k, v, do, False), FP32_TOL)


def test_pytorch_forward_returns_logsumexp_and_saves_context():
    q, k, v, _ = make_inputs(3, 80, 16)
    o, lse = flash_forward_pytorch(q, k, v, True, 16, 16)
    ref_o, ref_lse = reference_attention(q, k, v, True, return_lse=True)
    assert lse.shape == (3, 80) and lse.dtype == torch.float32
    torch.testing.assert_close(o, ref_o, **FP32_TOL)
    torch.testing.assert_close(lse, ref_lse, **FP32_TOL)

    qg = q.clone().requires_grad_(True)
    out = FlashAttention2PyTorch.apply(qg, k, v, True)
    shapes = sorted(tuple(t.shape) for t in out.grad_fn.saved_tensors)
    assert shapes == sorted([(3, 80), (3, 80, 16), (3, 80, 16), (3, 80, 16), (3, 80, 16)])
    assert out.grad_fn.is_causal is True


def test_flash_attention_leading_dims_and_errors():
    q, k, v, do = make_inputs(6, 32, 16)
    shape = (2, 3, 32, 16)
    got = run_attention(
        lambda a, b, c, causal: flash_attention(a, b, c, causal, impl="pytorch", q_tile_size=16, k_tile_size=16),
        *(t.reshape(shape) for t in (q, k, v, do)),
        True,
    )
    want = reference_results(q, k, v, do, True)
    for a, b in zip(got[2:], want[2:]):
        torch.testing.assert_close(a.reshape(b.shape), b, **FP32_TOL)
    with pytest.raises(ValueError):
        flash_attention(q, k, v, impl="cuda")
    with pytest.raises(ValueError):
        FlashAttention2PyTorch.apply(q, k, v, False, 8, 16)


def test_pytorch_compiled_backward_cpu():
    """The torch.compile backward runs (inductor, C++ codegen) and matches the reference."""
    set_backward_mode("compile")
    q, k, v, do = make_inputs(2, 64, 32, seed=7)
    got = run_attention(pytorch_impl(16, 16), q, k, v, do, True)
    assert backward_mode() == "compile", "torch.compile failed and the backward fell back to eager"
    compare(got, reference_results(q, k, v, do, True), FP32_TOL)


def test_pytorch_backward_falls_back_to_eager(monkeypatch):
    import cs336report.flash.pytorch as fp

    def broken_compile(*args, **kwargs):
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(fp, "_compiled_backward", None)
    monkeypatch.setattr(fp.torch, "compile", broken_compile)
    set_backward_mode("compile")
    q, k, v, do = make_inputs(1, 32, 16)
    with pytest.warns(RuntimeWarning, match="eager"):
        got = run_attention(pytorch_impl(16, 16), q, k, v, do, False)
    assert backward_mode() == "eager"
    compare(got, reference_results(q, k, v, do, False), FP32_TOL)


# ----------------------------------------------------------------------------- Triton availability


def test_import_without_triton():
    """The package imports with Triton absent; the Triton path then raises a clear error."""
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import torch\n"
        "import cs336report.flash as F\n"
        "assert not F.triton_available()\n"
        "q = torch.randn(1, 16, 16)\n"
        "F.flash_attention(q, q, q, impl='pytorch')\n"
        "try:\n"
        "    F.flash_attention(q, q, q, impl='triton')\n"
        "except F.TritonUnavailableError as e:\n"
        "    print('OK', e)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("OK") and "Triton" in res.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-tensor error")
def test_triton_on_cpu_without_interpreter_raises():
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("interpreter enabled in this process")
    from cs336report.flash import TritonUnavailableError

    q = torch.randn(1, 16, 16)
    with pytest.raises(TritonUnavailableError):
        flash_attention(q, q, q, impl="triton")


def test_default_tiles_follow_the_row_size_and_caller_tiles_override_them():
    from cs336report.flash import triton_kernels as tk

    for kernel, tiers in tk.DEFAULT_TILES.items():
        bounds = [bound for bound, _ in tiers]
        assert bounds[-1] is None and bounds[:-1] == sorted(bounds[:-1]), kernel  # ordered, then a catch-all
        for (bound, cfg), (_, after) in zip(tiers, tiers[1:]):
            assert tk.default_tiles(kernel, bound) == cfg and tk.default_tiles(kernel, bound + 1) == after
    q = torch.empty(1, 8, 64, dtype=torch.bfloat16)
    assert tk._tile_args("bwd", q, None, None, None, None) == tk.default_tiles("bwd", 128)
    assert tk._tile_args("bwd", q.float(), None, None, None, None) == tk.default_tiles("bwd", 256)
    bk = tk.default_tiles("bwd", 128)[1]
    assert tk._tile_args("bwd", q, 32, None, None, None) == (32, bk, tk.DEFAULT_NUM_WARPS, tk.DEFAULT_NUM_STAGES)
    assert tk._tile_args("fwd", q, 16, 32, 8, 3) == (16, 32, 8, 3)
    with pytest.raises(ValueError):
        tk._tile_args("fwd", q, 24, None, None, None)


def test_backward_kind_is_fused_unless_set():
    from cs336report.flash import triton_kernels as tk

    assert tk.triton_backward() == "fused"
    with pytest.raises(ValueError):
        tk.set_triton_backward("three_pass")
    tk.set_triton_backward("two_pass")
    try:
        assert tk.triton_backward() == "two_pass"
    finally:
        tk.set_triton_backward("fused")


def test_tensor_descriptors_are_not_chosen_off_the_gpu():
    from cs336report.flash import triton_kernels as tk

    if not tk.HAS_TRITON:
        pytest.skip("no Triton")
    q = torch.randn(1, 32, 16)
    assert not tk._use_tma(None, q, q, q)
    assert not tk._use_tma(False, q)


def test_tuning_script_times_the_defaults_and_every_autotuner_candidate():
    from cs336report.experiments.flash_benchmarking import tune
    from cs336report.flash import triton_kernels as tk

    specs = tune.variants()
    timed = {(s["pass"], s.get("backward"), s["tiles"], s["tma"], s.get("tma_reduce")) for s in specs.values()}
    for t in (tk.default_tiles("fwd", 128), *tk.AUTOTUNE_TILES["fwd"]):
        assert ("fwd", None, t, True, None) in timed
    for t in (tk.default_tiles("bwd", 128), *tk.AUTOTUNE_TILES["bwd"]):
        assert ("bwd", "fused", t, True, True) in timed
    # each path at least once: pointers, descriptors without reductions, the two-pass backward
    assert ("fwd", None, tk.default_tiles("fwd", 128), False, None) in timed
    assert {(s["backward"], s["tma"], s["tma_reduce"]) for s in specs.values() if s["pass"] == "bwd"} >= {
        ("fused", False, False), ("fused", True, False), ("two_pass", False, False), ("two_pass", True, False)}
    ratios = tune.bound_ratios([("o", torch.tensor([1.0, -2.0]), torch.tensor([1.03, -2.0]))])
    assert ratios == {"o": pytest.approx(0.03 / (0.03 + 0.03 * 1.03), abs=1e-4)}


# ----------------------------------------------------------------------------- Triton interpreter (CPU)

# name -> (batch, n_q, n_k, d, dtype, is_causal, q_tile, k_tile)
TRITON_CASES = {
    "fp32-b2-n64-d32": (2, 64, 64, 32, "float32", False, 16, 16),
    "fp32-b2-n64-d32-causal": (2, 64, 64, 32, "float32", True, 16, 16),
    "fp32-n100-d16": (1, 100, 100, 16, "float32", False, 32, 16),
    "fp32-n100-d16-causal": (1, 100, 100, 16, "float32", True, 32, 16),
    "fp32-n50-d32-causal-bq16-bk32": (2, 50, 50, 32, "float32", True, 16, 32),
    "fp32-n33-d16-causal-bq32-bk32": (2, 33, 33, 16, "float32", True, 32, 32),
    "fp32-cross-nq40-nk72-d16": (1, 40, 72, 16, "float32", False, 16, 32),
    "fp32-cross-nq40-nk72-d16-causal": (1, 40, 72, 16, "float32", True, 16, 32),
    "fp32-cross-nq72-nk40-d16-causal": (1, 72, 40, 16, "float32", True, 32, 16),
    "fp32-n96-d16-causal-bq16-bk64": (1, 96, 96, 16, "float32", True, 16, 64),
    "fp32-n128-d16-causal-bq64-bk16": (1, 128, 128, 16, "float32", True, 64, 16),
    "fp32-n32-d64-causal": (1, 32, 32, 64, "float32", True, 16, 16),
    "bf16-n64-d16": (1, 64, 64, 16, "bfloat16", False, 16, 16),
    "bf16-n64-d16-causal": (1, 64, 64, 16, "bfloat16", True, 16, 16),
}


def _triton_skip_reason():
    if importlib.util.find_spec("triton") is None:
        return "triton is not installed"
    return None


# The other paths of the kernels, each on a few TRITON_CASES: name -> (case, backward, tma). The
# cases above run the defaults under the interpreter: the fused backward, tiles through pointers.
# "tma" moves the tiles through tensor descriptors (loads and stores; the interpreter has no
# descriptor reductions, so dQ's atomic adds stay on pointers), where the interpreter has them.
TRITON_PATH_CASES = {
    "two-pass/fp32-n100-d16-causal": ("fp32-n100-d16-causal", "two_pass", False),
    "two-pass/fp32-cross-nq72-nk40-d16-causal": ("fp32-cross-nq72-nk40-d16-causal", "two_pass", False),
    "two-pass/bf16-n64-d16-causal": ("bf16-n64-d16-causal", "two_pass", False),
    "tma/fp32-n100-d16-causal": ("fp32-n100-d16-causal", "fused", True),
    "tma/fp32-cross-nq40-nk72-d16": ("fp32-cross-nq40-nk72-d16", "fused", True),
    "tma/fp32-n50-d32-causal-bq16-bk32": ("fp32-n50-d32-causal-bq16-bk32", "fused", True),
}


def _raw_passes(backward: str, tma: bool, bq: int, bk: int):
    """``fn(q, k, v, causal)`` through the raw forward and backward launchers, the backward's kind and tiles' path set."""
    from cs336report.flash import triton_kernels as tk

    class Passes(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal):
            o, lse = tk.flash_forward_triton(q, k, v, causal, bq, bk, tma=tma)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.causal = causal
            return o

        @staticmethod
        def backward(ctx, do):
            before = tk.triton_backward()
            tk.set_triton_backward(backward)
            try:
                grads = tk.flash_backward_triton(*ctx.saved_tensors[:4], do, ctx.saved_tensors[4], ctx.causal, bq, bk,
                                                 tma=tma, tma_reduce=False)
            finally:
                tk.set_triton_backward(before)
            assert set(tk.last_triton_config()) == {"fwd", *(("bwd",) if backward == "fused" else ("bwd_dkdv", "bwd_dq"))}
            assert all(c["tma"] is tma for c in tk.last_triton_config().values())
            return (*grads, None)

    return Passes.apply


def _interpreter_has_descriptors() -> bool:
    import triton.language as tl

    return hasattr(tl, "make_tensor_descriptor")


def _check_case(name, fn) -> dict:
    """Run ``fn(q, k, v, causal)`` on TRITON_CASES[name] against the reference; {"ok", "error"}."""
    b, n_q, n_k, d, dtype, causal, bq, bk = TRITON_CASES[name]
    try:
        q, k, v, do = make_inputs(b, n_q, d, dtype=DTYPES[dtype], seed=len(name), n_k=n_k)
        got = run_attention(fn, q, k, v, do, causal)
        compare(got, reference_results(q, k, v, do, causal), BF16_TOL if dtype == "bfloat16" else FP32_TOL)
        return {"ok": True, "error": ""}
    except Exception as exc:  # reported back to the parent test
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def run_triton_cases_here() -> dict:
    """Run every TRITON_CASES, TRITON_PATH_CASES and OP_CASES entry in this process; returns
    {name: {"ok", "error", "seconds"}}."""
    from cs336report.flash import flash_attention as fa

    from cs336report.flash import last_triton_config

    report = {}
    for name, (b, n_q, n_k, d, dtype, causal, bq, bk) in TRITON_CASES.items():
        start = time.perf_counter()
        fn = lambda a, bb, c, cz, bq=bq, bk=bk: fa(a, bb, c, cz, impl="triton", q_tile_size=bq, k_tile_size=bk)  # noqa: E731
        report[name] = _check_case(name, fn)
        if report[name]["ok"] and set(last_triton_config()) != {"fwd", "bwd"}:  # the fused backward is the default
            report[name] = {"ok": False, "error": f"kernels run: {sorted(last_triton_config())}"}
        report[name]["seconds"] = round(time.perf_counter() - start, 3)
    for name, (case, backward, tma) in TRITON_PATH_CASES.items():
        start = time.perf_counter()
        if tma and not _interpreter_has_descriptors():
            report[name] = {"ok": None, "error": "this Triton has no tensor descriptors"}
            continue
        _, _, _, _, _, _, bq, bk = TRITON_CASES[case]
        report[name] = _check_case(case, _raw_passes(backward, tma, bq, bk))
        report[name]["seconds"] = round(time.perf_counter() - start, 3)
    for name, check in OP_CASES.items():
        start = time.perf_counter()
        try:
            check()
            report[name] = {"ok": True, "error": ""}
        except Exception as exc:
            report[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        report[name]["seconds"] = round(time.perf_counter() - start, 3)
    return report


def _opcheck_forward_and_backward():
    """The custom operators' schemas, fake (shape) functions and outputs agree (torch.library.opcheck)."""
    import cs336report.flash.triton_kernels  # noqa: F401  (registers the operators)

    q, k, v, do = make_inputs(1, 48, 16, seed=7)
    for causal in (False, True):
        torch.library.opcheck(torch.ops.cs336report.flash_fwd.default, (q, k, v, causal, 16, 16, False))
        o, lse = torch.ops.cs336report.flash_fwd(q, k, v, causal, 16, 16, False)
        torch.library.opcheck(torch.ops.cs336report.flash_bwd.default, (q, k, v, o, do, lse, causal, 16, 16, False))


def _compiled_apply_matches_reference():
    """torch.compile of the autograd.Function (the leaderboard's harness) traces the custom operators."""
    from cs336report.flash import FlashAttention2Triton

    torch._dynamo.reset()
    q, k, v, do = make_inputs(2, 64, 32, seed=9)
    compiled = torch.compile(FlashAttention2Triton.apply, backend="aot_eager", fullgraph=True)
    got = run_attention(lambda a, b, c, causal: compiled(a, b, c, causal, 16, 16, False), q, k, v, do, True)
    compare(got, reference_results(q, k, v, do, True), FP32_TOL)


OP_CASES = {"opcheck-fwd-bwd": _opcheck_forward_and_backward, "compiled-aot-eager": _compiled_apply_matches_reference}


@pytest.fixture(scope="module")
def triton_interpreter_report():
    reason = _triton_skip_reason()
    if reason:
        pytest.skip(reason)
    env = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    res = subprocess.run(
        [sys.executable, str(Path(__file__).resolve())],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=env,
        timeout=300,
    )
    assert res.returncode == 0, f"interpreter worker failed:\n{res.stdout}\n{res.stderr}"
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", list(TRITON_CASES) + list(TRITON_PATH_CASES) + ["opcheck-fwd-bwd", "compiled-aot-eager"])
def test_triton_interpreter(case, triton_interpreter_report):
    result = triton_interpreter_report[case]
    if result["ok"] is None:
        pytest.skip(result["error"])
    assert result["ok"], result["error"]


# ----------------------------------------------------------------------------- Triton on a GPU


def triton_impl(q_tile=None, k_tile=None, autotune=False):
    return lambda q, k, v, c: flash_attention(
        q, k, v, c, impl="triton", q_tile_size=q_tile, k_tile_size=k_tile, autotune=autotune
    )


@pytest.mark.gpu
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("impl", ["triton", "pytorch"])
def test_gpu_fp32_b4_n128_d64(impl, is_causal):
    q, k, v, do = make_inputs(4, 128, 64, device="cuda")
    fn = triton_impl() if impl == "triton" else pytorch_impl(32, 32)
    compare(run_attention(fn, q, k, v, do, is_causal), reference_results(q, k, v, do, is_causal), FP32_TOL)


@pytest.mark.gpu
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("d", [16, 32, 64, 128])
@pytest.mark.parametrize("n", [100, 129, 1000])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gpu_triton_shapes(dtype, n, d, is_causal):
    q, k, v, do = make_inputs(2, n, d, dtype=DTYPES[dtype], device="cuda", seed=n + d)
    got = run_attention(triton_impl(), q, k, v, do, is_causal)
    compare(got, reference_results(q, k, v, do, is_causal), BF16_TOL if dtype == "bfloat16" else FP32_TOL)


@pytest.mark.gpu
@pytest.mark.parametrize("tiles", [(16, 16), (32, 64), (64, 32), (128, 64)])
def test_gpu_triton_tiles_causal(tiles):
    q, k, v, do = make_inputs(2, 300, 64, device="cuda", seed=3)
    got = run_attention(triton_impl(*tiles), q, k, v, do, True)
    compare(got, reference_results(q, k, v, do, True), FP32_TOL)


@pytest.mark.gpu
def test_gpu_triton_autotune_reports_config():
    from cs336report.flash import last_triton_config

    q, k, v, do = make_inputs(2, 512, 64, dtype=torch.bfloat16, device="cuda", seed=11)
    got = run_attention(triton_impl(autotune=True), q, k, v, do, True)
    compare(got, reference_results(q, k, v, do, True), BF16_TOL)
    cfg = last_triton_config()
    assert set(cfg) == {"fwd", "bwd"}
    assert all(c["autotuned"] and c["Q_TILE_SIZE"] >= 16 for c in cfg.values())
    for name, c in cfg.items():  # a shape not tuned before in this process: the table comes with it
        timed = [r for r in c.get("candidates", []) if r["ms"] is not None]
        assert timed, name
        assert (timed[0]["Q_TILE_SIZE"], timed[0]["K_TILE_SIZE"]) == (c["Q_TILE_SIZE"], c["K_TILE_SIZE"]), name


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gpu_every_backward_and_tile_path_matches_the_reference(dtype):
    """Fused (atomic adds through pointers or descriptor reductions) and two-pass backward, tiles through
    pointers or tensor descriptors, on a ragged causal shape."""
    from cs336report.flash import triton_kernels as tk

    q, k, v, do = make_inputs(2, 1000, 64, dtype=DTYPES[dtype], device="cuda", seed=13)
    want = reference_results(q, k, v, do, True)
    tol = BF16_TOL if dtype == "bfloat16" else FP32_TOL
    paths = [("fused", False, False), ("two_pass", False, False)]
    if tk.tma_usable(q, k, v, do):
        paths += [("fused", True, False), ("fused", True, True), ("two_pass", True, False)]
    before = tk.triton_backward()
    try:
        for backward, tma, reduce in paths:
            tk.set_triton_backward(backward)
            o, lse = tk.flash_forward_triton(q, k, v, True, tma=tma)
            dq, dk, dv = tk.flash_backward_triton(q, k, v, o, do, lse, True, tma=tma, tma_reduce=reduce)
            assert all(c["tma"] is tma for c in tk.last_triton_config().values())
            compare((o, lse, dq, dk, dv), want, tol)
    finally:
        tk.set_triton_backward(before)


@pytest.mark.gpu
def test_gpu_tuning_script_checks_the_defaults(tmp_path):
    from cs336report.experiments.flash_benchmarking import tune

    tune.main(["--out", str(tmp_path), "--phases", "check,sweep", "--shape", "2,1024,64"])
    phases = json.loads((tmp_path / "tune.json").read_text())["phases"]
    assert max(phases["check"]["worst_ratio"].values()) <= 1, phases["check"]
    assert phases["check"]["config"]["bwd"]["autotuned"] is False
    assert all(row["passed"] for row in phases["sweep"].values()), phases["sweep"]


@pytest.mark.gpu
def test_gpu_pytorch_compiled_backward():
    set_backward_mode("compile")
    q, k, v, do = make_inputs(4, 128, 64, device="cuda", seed=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = run_attention(pytorch_impl(32, 32), q, k, v, do, True)
    assert backward_mode() == "compile"
    compare(got, reference_results(q, k, v, do, True), FP32_TOL)


if __name__ == "__main__":
    # Child process of ``triton_interpreter_report`` (TRITON_INTERPRET=1 is already set).
    if os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("set TRITON_INTERPRET=1 to run the Triton interpreter cases")
    print(json.dumps(run_triton_cases_here()))


def test_autotune_record_keeps_candidate_times_per_shape():
    """The tuner's timing table is kept per shape, fastest first, and repeated on cached launches."""
    pytest.importorskip("triton")
    import triton

    from cs336report.flash import triton_kernels as tk

    fast = triton.Config({"Q_TILE_SIZE": 128, "K_TILE_SIZE": 64}, num_warps=8, num_stages=3)
    slow = triton.Config({"Q_TILE_SIZE": 32, "K_TILE_SIZE": 32}, num_warps=4, num_stages=2)
    too_big = triton.Config({"Q_TILE_SIZE": 128, "K_TILE_SIZE": 128}, num_warps=8, num_stages=2)

    class Tuner:  # the two attributes triton.autotune's Autotuner leaves after tuning
        best_config = fast
        configs_timings = {slow: [2.5, 2.4, 2.6], too_big: [float("inf")] * 3, fast: [1.25, 1.2, 1.3]}

    try:
        tk._record_autotuned("test_kernel", Tuner, ("shape-a",))
        rec = tk.last_triton_config()["test_kernel"]
        assert (rec["Q_TILE_SIZE"], rec["K_TILE_SIZE"], rec["num_warps"], rec["autotuned"]) == (128, 64, 8, True)
        assert [c["ms"] for c in rec["candidates"]] == [1.25, 2.5, None]
        assert rec["candidates"][0]["Q_TILE_SIZE"] == 128 and rec["candidates"][1]["num_stages"] == 2

        # a new shape with the table left over from shape-a (the tuner served it from its cache): no table
        tk._record_autotuned("test_kernel", Tuner, ("shape-b",))
        assert "candidates" not in tk.last_triton_config()["test_kernel"]
        # shape-a again, cached: its own table comes back
        tk._record_autotuned("test_kernel", Tuner, ("shape-a",))
        assert len(tk.last_triton_config()["test_kernel"]["candidates"]) == 3
    finally:
        tk._last_config.pop("test_kernel", None)
        tk._seen_timings.pop("test_kernel", None)
        for key in [k for k in tk._candidates if k[0] == "test_kernel"]:
            del tk._candidates[key]
