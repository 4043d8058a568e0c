"""The CS336 Transformer language model, in two implementations.

``naive`` is what a student writes for Assignment 1: an einsum ``Linear``, a hand-written
softmax, and scaled dot-product attention with an explicit boolean causal mask.
``native`` computes the same function with PyTorch's fused building blocks
(``F.linear``, ``F.softmax``, ``F.scaled_dot_product_attention(is_causal=True)``).

Architecture: token embedding, ``num_layers`` pre-norm blocks (RMSNorm, causal multi-head
self-attention with RoPE, RMSNorm, SwiGLU feed-forward), a final RMSNorm and an untied LM
head. No biases anywhere. ``rope_layout`` follows the edition's staff model (``staff.semantics``).

    model = TransformerLM(ModelSpec.named("small"), impl="naive", device="cuda")
    logits = model(tokens)  # (batch, seq) int64 -> (batch, seq, vocab)
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..measure.annotate import region
from . import staff

IMPLEMENTATIONS = ("naive", "native")


# the shape of a model size lives in a module without torch, for the formulas and the report
from ..names.spec import ModelSpec  # noqa: E402,F401


def _trunc_normal(shape, std: float, device, dtype) -> nn.Parameter:
    weight = torch.empty(shape, device=device, dtype=dtype)
    nn.init.trunc_normal_(weight, mean=0.0, std=std, a=-3 * std, b=3 * std)
    return nn.Parameter(weight)


class Linear(nn.Module):
    """y = x W^T without bias; ``impl`` picks einsum (naive) or F.linear (native)."""

    def __init__(self, d_in: int, d_out: int, impl: str = "naive", device=None, dtype=None):
        super().__init__()
        self.impl = impl
        self.weight = _trunc_normal((d_out, d_in), math.sqrt(2.0 / (d_in + d_out)), device, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.impl == "native":
            return F.linear(x, self.weight)
        return torch.einsum("...i,oi->...o", x, self.weight)


class Embedding(nn.Module):
    def __init__(self, vocab_size: int, d_model: int, device=None, dtype=None):
        super().__init__()
        self.weight = _trunc_normal((vocab_size, d_model), 1.0, device, dtype)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        return self.weight[token_ids]  # (batch, seq, d_model)


class RMSNorm(nn.Module):
    """Root-mean-square norm computed in fp32, returned in the input dtype."""

    def __init__(self, d_model: int, eps: float = 1e-5, device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        in_dtype = x.dtype
        x = x.to(torch.float32)
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., 1)
        return (x * rms * self.weight).to(in_dtype)


class RotaryEmbedding(nn.Module):
    """RoPE: rotates pairs of features of Q and K by position-dependent angles; ``layout`` is the
    edition's output layout (:mod:`cs336report.lm.staff`: 2025 ``interleaved``, 2026 ``halves``)."""

    def __init__(self, context_length: int, d_head: int, theta: float = 10_000.0, device=None,
                 layout: str = "interleaved"):
        super().__init__()
        if layout not in staff.ROPE_LAYOUTS:
            raise ValueError(f"RoPE layout must be one of {staff.ROPE_LAYOUTS}, got {layout!r}")
        self.layout = layout
        inv_freq = theta ** (-torch.arange(0, d_head, 2, device=device, dtype=torch.float32) / d_head)
        angles = torch.outer(torch.arange(context_length, device=device, dtype=torch.float32), inv_freq)
        self.register_buffer("cos", angles.cos(), persistent=False)  # (context, d_head/2)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cos = self.cos[positions].to(x.dtype)  # (seq, d_head/2)
        sin = self.sin[positions].to(x.dtype)
        return staff.rotate(x, cos, sin, self.layout)  # (..., seq, d_head)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable softmax written by hand (subtract the max, exponentiate, normalise), as
    the course's reference writes it: the max is ``torch.max(x, dim, keepdim=True).values``, whose
    backward keeps the positions of the maxima, not ``x`` (``amax``'s backward keeps its input and
    output, one more seq × seq matrix per layer). Autograd then keeps two seq × seq matrices per
    attention: exp(x - max), the division's numerator, and the output, the product with V's operand."""
    shifted = x - torch.max(x, dim=dim, keepdim=True).values
    exp = torch.exp(shifted)
    return exp / exp.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    """softmax(Q K^T / sqrt(d)) V with a boolean ``mask`` (True = may attend).

    Q: (..., seq_q, d), K: (..., seq_k, d), V: (..., seq_k, d_v); accepts its arguments by keyword.
    """
    d = Q.shape[-1]
    with region("attention_scores"):
        scores = torch.einsum("...qd,...kd->...qk", Q, K) / math.sqrt(d)  # (..., seq_q, seq_k)
        if mask is not None:
            scores = torch.where(mask, scores, float("-inf"))
    with region("softmax"):
        weights = softmax(scores, dim=-1)
    with region("attention_value"):
        return torch.einsum("...qk,...kd->...qd", weights, V)  # (..., seq_q, d_v)


class CausalMultiHeadSelfAttention(nn.Module):
    def __init__(self, spec: ModelSpec, rope: RotaryEmbedding, impl: str, device=None, dtype=None):
        super().__init__()
        self.num_heads = spec.num_heads
        self.impl = impl
        self.rope = rope
        d = spec.d_model
        self.q_proj = Linear(d, d, impl, device, dtype)
        self.k_proj = Linear(d, d, impl, device, dtype)
        self.v_proj = Linear(d, d, impl, device, dtype)
        self.output_proj = Linear(d, d, impl, device, dtype)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, d = x.shape
        return x.view(batch, seq, self.num_heads, d // self.num_heads).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, d_model = x.shape
        positions = torch.arange(seq, device=x.device)
        q = self.rope(self._heads(self.q_proj(x)), positions)  # (batch, heads, seq, d_head)
        k = self.rope(self._heads(self.k_proj(x)), positions)
        v = self._heads(self.v_proj(x))
        if self.impl == "native":
            with region("scaled_dot_product_attention"):
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            causal_mask = positions[:, None] >= positions[None, :]  # (seq, seq) bool
            out = scaled_dot_product_attention(Q=q, K=k, V=v, mask=causal_mask)
        out = out.transpose(1, 2).reshape(batch, seq, d_model)
        return self.output_proj(out)


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, d_ff: int, impl: str, device=None, dtype=None):
        super().__init__()
        self.w1 = Linear(d_model, d_ff, impl, device, dtype)
        self.w2 = Linear(d_ff, d_model, impl, device, dtype)
        self.w3 = Linear(d_model, d_ff, impl, device, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = self.w1(x)  # (batch, seq, d_ff)
        return self.w2(gate * torch.sigmoid(gate) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, spec: ModelSpec, rope: RotaryEmbedding, impl: str, device=None, dtype=None):
        super().__init__()
        self.ln1 = RMSNorm(spec.d_model, device=device, dtype=dtype)
        self.attn = CausalMultiHeadSelfAttention(spec, rope, impl, device, dtype)
        self.ln2 = RMSNorm(spec.d_model, device=device, dtype=dtype)
        self.ffn = SwiGLU(spec.d_model, spec.d_ff, impl, device, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.ffn(self.ln2(x))


class TransformerLM(nn.Module):
    def __init__(
        self,
        spec: ModelSpec,
        context_length: int,
        impl: str = "naive",
        device=None,
        dtype=None,
        rope_layout: str = "interleaved",
    ):
        super().__init__()
        if impl not in IMPLEMENTATIONS:
            raise ValueError(f"impl must be one of {IMPLEMENTATIONS}, got {impl!r}")
        self.spec = spec
        self.context_length = context_length
        rope = RotaryEmbedding(context_length, spec.d_head, spec.rope_theta, device=device, layout=rope_layout)
        self.token_embeddings = Embedding(spec.vocab_size, spec.d_model, device, dtype)
        self.layers = nn.ModuleList(
            TransformerBlock(spec, rope, impl, device, dtype) for _ in range(spec.num_layers)
        )
        self.ln_final = RMSNorm(spec.d_model, device=device, dtype=dtype)
        self.lm_head = Linear(spec.d_model, spec.vocab_size, impl, device, dtype)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        x = self.token_embeddings(token_ids)  # (batch, seq, d_model)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.ln_final(x))  # (batch, seq, vocab)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean token-level cross entropy; logits (..., vocab), targets (...)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
