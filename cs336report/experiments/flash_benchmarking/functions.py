"""The attention function of each implementation that flash_benchmarking and the leaderboard time.

``attention_function(impl, causal, student)`` gives ``(attn(q, k, v) -> o, notes)``: the naive
attention (eager or compiled), an SDPA backend, or a FlashAttention-2 from the resolver (ours, or
the student's through their adapters). q, k, v are (batch, seq, d).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from ...lm.model import scaled_dot_product_attention
from ...names.flash import FLASH_PIECES, IMPLEMENTATIONS, STUDENT_ROWS  # noqa: F401  (callers reach them here)

SDPA_BACKENDS = {
    "sdpa_flash": "FLASH_ATTENTION",
    "sdpa_cudnn": "CUDNN_ATTENTION",
    "sdpa_efficient": "EFFICIENT_ATTENTION",
    "sdpa_math": "MATH",
}


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The model's hand-written attention with its causal mask built per call, as a training step does.

    q: (batch, seq, d); k, v: (batch, seq, d) -> (batch, seq, d).
    """
    positions = torch.arange(q.shape[-2], device=q.device)  # (seq,)
    mask = positions[:, None] >= positions[None, :]  # (seq, seq) bool
    return scaled_dot_product_attention(q, k, v, mask=mask)


def _sdpa(backend_name: str) -> Callable:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, backend_name)

    def attention(q, k, v, is_causal=True):
        # Fused backends want (batch, heads, seq, d): one head.
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], is_causal=is_causal)
        return out[:, 0]  # (batch, seq, d)

    return attention


def _flash_function(impl: str, causal: bool, student: dict | None) -> tuple[Callable, dict]:
    """A FlashAttention-2 autograd function from the resolver; AdapterNotImplemented if it is not implemented."""
    from ...student import resolve as resolver

    if impl in STUDENT_ROWS and not student:
        raise ValueError(f"implementation {impl!r} runs the student's code: set student.checkout")
    found = resolver.implementation(FLASH_PIECES[impl], student if impl in STUDENT_ROWS else None)
    if not found:
        raise found.error()
    function, provenance = found
    notes: dict = {"provenance": provenance}
    if provenance != resolver.BUILTIN:  # the handout's interface: apply(q, k, v, is_causal)
        notes["class"] = resolver.class_name(function)  # named in the answer
        return (lambda q, k, v: function.apply(q, k, v, causal)), notes
    if impl in ("triton", "triton_fixed"):
        autotune = impl == "triton"
        return (lambda q, k, v: function.apply(q, k, v, causal, None, None, autotune)), {**notes, "autotune": autotune}
    from ...flash import set_backward_mode

    set_backward_mode("compile" if impl == "flash_pytorch" else "eager")
    return (lambda q, k, v: function.apply(q, k, v, causal)), notes


def attention_function(impl: str, causal: bool = True, student: dict | None = None) -> tuple[Callable, dict]:
    """``(attn(q, k, v) -> o, notes)`` for implementation ``impl``; notes describe how it runs.

    The FlashAttention-2 implementations come from the resolver (:mod:`cs336report.student.resolve`): the
    student's through their adapters when ``student`` (a cell's ``student`` entry) is given.
    """
    if impl not in IMPLEMENTATIONS:
        raise ValueError(f"unknown implementation {impl!r}; known: {', '.join(IMPLEMENTATIONS)}")
    if impl in FLASH_PIECES:
        return _flash_function(impl, causal, student)
    if impl in ("naive", "naive_compiled"):
        if not causal:
            raise ValueError("the naive attention of this benchmark is causal only")
        if impl == "naive":
            return naive_attention, {}
        import torch._functorch.config as functorch_config

        # Timing the backward alone calls it again on one graph (retain_graph), which donated buffers forbid.
        functorch_config.donated_buffer = False
        return torch.compile(naive_attention, dynamic=True), {"compile": "torch.compile(dynamic=True)",
                                                               "donated_buffer": False}
    sdpa = _sdpa(SDPA_BACKENDS[impl])
    return (lambda q, k, v: sdpa(q, k, v, causal)), {"sdpa_backend": SDPA_BACKENDS[impl]}
