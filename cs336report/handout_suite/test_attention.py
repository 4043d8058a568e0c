"""flash_forward and flash_backward: the FlashAttention-2 autograd functions against float32 attention.

Inputs as the handout's tests use them: q, k, v (4, 128, 64) float32 from seed 0, an upstream
gradient of the same shape; the function is called as ``Function.apply(q, k, v, is_causal)``.
The forward must save exactly one (batch, n_queries) tensor, the logsumexp L.
"""

from __future__ import annotations

import os

import pytest
import torch

from cs336report.flash.reference import reference_attention
from cs336report.handout_suite import adapters, record_and_compare

SHAPE = (4, 128, 64)  # (batch, seq, d)


def _inputs(device: str):
    gen = torch.Generator().manual_seed(0)
    q, k, v, do = (torch.randn(*SHAPE, generator=gen).to(device) for _ in range(4))
    return [t.requires_grad_(True) for t in (q, k, v)] + [do]


def _triton_device() -> str:
    try:
        import triton  # noqa: F401
    except ImportError:  # a missing package is not a failing implementation
        pytest.skip("Triton is not installed (pip install triton)")
    if torch.cuda.is_available():
        return "cuda"
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "cpu"
    pytest.skip("Triton needs a CUDA device, or TRITON_INTERPRET=1 on a CPU")


def _saved_lse(o: torch.Tensor, batch: int, n_queries: int) -> torch.Tensor:
    saved = getattr(o.grad_fn, "saved_tensors", None)
    assert saved is not None, "the forward saves nothing for backward (ctx.save_for_backward)"
    found = [t for t in saved if tuple(t.shape) == (batch, n_queries)]
    assert len(found) == 1, \
        f"expected one saved tensor of shape {(batch, n_queries)} (the logsumexp L), found {len(found)}"
    return found[0]


def _forward(record_property, function, device: str, is_causal: bool) -> None:
    q, k, v, _ = _inputs(device)
    o = function.apply(q, k, v, is_causal)
    lse = _saved_lse(o, SHAPE[0], SHAPE[1])
    o_ref, lse_ref = reference_attention(q, k, v, is_causal, return_lse=True)
    record_and_compare(record_property, [(o, o_ref), (lse, lse_ref)])


def _backward(record_property, function, device: str, is_causal: bool) -> None:
    q, k, v, do = _inputs(device)
    reference_attention(q, k, v, is_causal).backward(do)
    expected = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    function.apply(q, k, v, is_causal).backward(do)
    record_and_compare(record_property, [(t.grad, e) for t, e in zip((q, k, v), expected)])


def test_flash_forward_pass_pytorch(record_property):
    _forward(record_property, adapters().get_flashattention_autograd_function_pytorch(), "cpu", False)


@pytest.mark.parametrize("is_causal", [False, True])
def test_flash_forward_pass_triton(record_property, is_causal):
    device = _triton_device()
    _forward(record_property, adapters().get_flashattention_autograd_function_triton(), device, is_causal)


def test_flash_backward_pytorch(record_property):
    _backward(record_property, adapters().get_flashattention_autograd_function_pytorch(), "cpu", False)


@pytest.mark.parametrize("is_causal", [False, True])
def test_flash_backward_triton(record_property, is_causal):
    device = _triton_device()
    _backward(record_property, adapters().get_flashattention_autograd_function_triton(), device, is_causal)
