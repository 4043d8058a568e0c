"""Analytic parameter, FLOP and memory formulas for the CS336 Transformer LM.

FLOPs follow the usual matmul accounting (Kaplan et al. 2020, "Scaling Laws for Neural
Language Models", Table 1; Hoffmann et al. 2022, Appendix F): a matmul of an (m, k) by a
(k, n) matrix costs 2·m·k·n FLOPs; the backward pass costs twice the forward pass (one
matmul for the input gradient, one for the weight gradient). Element-wise work (norms,
softmax, SiLU, RoPE, the optimizer) is not counted. Attention is counted over the full
T x T score matrix, as the naive implementation computes it.

Per forward pass, with B = batch, T = context, d = d_model, f = d_ff, L = layers, V = vocab:

    attention projections   L · 2·B·T · 4·d²
    attention QK^T and PV   L · 2 · 2·B·T²·d
    SwiGLU feed-forward     L · 2·B·T · 3·d·f
    LM head                 2·B·T·d·V
"""

from __future__ import annotations

from . import compiled as accounting_compiled
from ..names.spec import ModelSpec
from .compiled import compiled_saved_items

FLOP_FORMULA = (
    "forward = L·(8·B·T·d² + 4·B·T²·d + 6·B·T·d·f) + 2·B·T·d·V; "
    "backward = 2 × forward; train step = 3 × forward (optimizer not counted)"
)

MODE_MULTIPLIER = {"forward": 1, "forward_backward": 3, "train_step": 3}


def param_count(spec: ModelSpec) -> int:
    """Number of trainable parameters (untied embedding and LM head, RMSNorm gains)."""
    d, f, V = spec.d_model, spec.d_ff, spec.vocab_size
    per_layer = 4 * d * d + 3 * d * f + 2 * d
    return V * d + spec.num_layers * per_layer + d + d * V


def linear_weight_count(spec: ModelSpec) -> int:
    """Weight matrices of the reference architecture that enter a matrix product: four in attention
    and three in the feed-forward block of each layer, and the LM head (the embedding is a lookup)."""
    return 7 * spec.num_layers + 1


def forward_flops(spec: ModelSpec, batch: int, context: int) -> int:
    d, f, V, L = spec.d_model, spec.d_ff, spec.vocab_size, spec.num_layers
    B, T = batch, context
    per_layer = 2 * B * T * 4 * d * d + 2 * 2 * B * T * T * d + 2 * B * T * 3 * d * f
    return L * per_layer + 2 * B * T * d * V


def attention_score_flops(spec: ModelSpec, batch: int, context: int) -> int:
    """The forward formula's attention term, L·4·B·T²·d: scores and their weighted sum of values."""
    return spec.num_layers * 2 * 2 * batch * context * context * spec.d_model


def step_flops(spec: ModelSpec, batch: int, context: int, mode: str) -> int:
    """FLOPs of one measured step in ``mode`` (forward, forward_backward, train_step)."""
    if mode not in MODE_MULTIPLIER:
        raise ValueError(f"unknown mode {mode!r}; expected one of {sorted(MODE_MULTIPLIER)}")
    return MODE_MULTIPLIER[mode] * forward_flops(spec, batch, context)


ADAMW_BYTES_PER_PARAM = 28
ADAMW_TRAFFIC_FORMULA = ("Memory traffic of an AdamW step = 28 bytes × parameters: it reads the fp32 weight, gradient "
                         "and both moments (16 bytes) and writes back the weight and both moments (12 bytes)")


def adamw_step_bytes(params: int) -> int:
    """Bytes an AdamW step over fp32 weights, gradients and moments reads and writes at least."""
    return ADAMW_BYTES_PER_PARAM * params


def residual_activation_bytes(spec: ModelSpec, batch: int, context: int, bytes_per_value: int = 4) -> int:
    """One residual-stream activation tensor: B · T · d_model values."""
    return batch * context * spec.d_model * bytes_per_value


def score_tensor_bytes(spec: ModelSpec, batch: int, context: int, bytes_per_value: int = 4) -> int:
    """One layer's attention scores (or softmax probabilities): B · h · T² values."""
    return batch * spec.num_heads * context * context * bytes_per_value


# Element-wise operations per attention score in a numerically stable softmax: the running
# max, the subtraction, the exponential, the sum and the division.
SOFTMAX_FLOPS_PER_SCORE = 5

ATTENTION_FLOP_FORMULA = (
    "per forward pass: QK^T = L·2·B·T²·d, PV = L·2·B·T²·d, "
    f"softmax = L·{SOFTMAX_FLOPS_PER_SCORE}·B·h·T² (max, subtract, exp, sum, divide per score)"
)


def attention_flops(spec: ModelSpec, batch: int, context: int) -> dict[str, int]:
    """FLOPs of the three operations inside self-attention, for one forward pass of all layers.

    The score matrix is (B, h, T, T); each score costs 2·d_head FLOPs in QK^T and each
    output element 2·T in PV, so both matmuls cost 2·B·T²·d per layer. The softmax costs
    ``SOFTMAX_FLOPS_PER_SCORE`` FLOPs per score.
    """
    L, B, T = spec.num_layers, batch, context
    matmul = L * 2 * B * T * T * spec.d_model
    return {
        "attention_scores": matmul,
        "softmax": L * SOFTMAX_FLOPS_PER_SCORE * B * spec.num_heads * T * T,
        "attention_value": matmul,
    }


# Tensors autograd keeps for the backward pass of one forward pass of the built-in model,
# counted with torch.autograd.graph.saved_tensors_hooks (tests/test_memory_profiling.py checks the
# fp32 count against the model on the CPU; tests/test_memory_closes.py checks both precisions
# against the census of the published GPU run, autocast_saved_tensors). In fp32, per block: the
# block input and the attention residual (the two RMSNorm inputs), each RMSNorm's x·rms and
# output, Q and K after RoPE, V, and the merged heads (10 tensors of B·T·d: the fused attention's
# output is the merged heads' storage, its kernel writes it in (B, T, h, d) order); SwiGLU's W1x,
# σ(W1x), W1x·σ(W1x), W3x and their product (5 of B·T·f); the naive attention's exp(scores - max)
# and probabilities (m = 2 of B·h·T²: the row max is torch.max, whose backward keeps indices; 3
# where it was amax, which keeps the scores). After the blocks: the final RMSNorm's input, x·rms
# and output (3 of B·T·d).
# Under CUDA bf16 autocast the RMSNorms keep their fp32 input and x·rms (4 of B·T·d a block); the
# matrix products keep 2-byte operands: the copies autocast makes of their fp32 inputs (the norm
# output three times for Q, K, V and twice for W1, W3), Q, K, V, the merged heads (9 of B·T·d;
# 10 with the fused attention, whose cuDNN kernel keeps its own output), the B·T·f tensors, and
# the probabilities; exp runs in fp32 under autocast, so exp(scores - max) stays 4 bytes a score.
# Terms of B·T, B·h·T and T² elements (norm scales, row statistics, mask, RoPE tables) are left out.
COMPILED_ACTIVATION_FORMULA = accounting_compiled.COMPILED_ACTIVATION_FORMULA
ACTIVATION_FORMULA = (
    "saved for backward, fp32 = 4 bytes × [L·(10·B·T·d + 5·B·T·f + m·B·h·T²) + 3·B·T·d]; "
    "under bf16 autocast = 4 bytes × [L·(4·B·T·d + B·h·T²) + 2·B·T·d] "
    "+ 2 bytes × [L·(9·B·T·d + 5·B·T·f + (m − 1)·B·h·T²) + B·T·d]; "
    "m = 2 seq × seq matrices a block (exp(scores − max), the probabilities; 3 where the row max was amax); "
    "native fused attention: no B·h·T² term, and under autocast 10·B·T·d in 2 bytes"
)

Items = list  # [(count, bytes of each tensor)]: what is live, tensor by tensor


def _bytes(items: Items, blocks: bool = False) -> int:
    return sum(n * (allocator_block_bytes(b) if blocks else b) for n, b in items)


def saved_activation_items(spec: ModelSpec, batch: int, context: int, impl: str = "naive",
                           saved_matrices: int | None = None, precision: str = "fp32", compiled: bool = False,
                           attention_output_merged: bool | None = None) -> dict[str, Items]:
    """The tensors of ACTIVATION_FORMULA as (count, bytes each), by kind: ``layer`` (one block),
    ``attention`` (one block's seq × seq matrices), ``final`` (after the blocks), ``first`` (what the
    first block keeps beyond the others: nothing in eager mode). ``compiled``: what the torch.compile'd
    graph saves instead (COMPILED_ACTIVATION_FORMULA; ``saved_matrices`` does not change it,
    ``attention_output_merged`` is its layout switch, see accounting_compiled.compiled_saved_items)."""
    B, T, d, f, h = batch, context, spec.d_model, spec.d_ff, spec.num_heads
    if impl not in ("naive", "native"):
        raise ValueError(f"unknown implementation {impl!r}; expected 'naive' or 'native'")
    c = compute_bytes(precision)
    if compiled:
        return compiled_saved_items(spec, batch, context, impl, c, attention_output_merged)
    BTd, BTf, S = B * T * d, B * T * f, B * h * T * T
    m = (saved_matrices or NAIVE_SAVED_MATRICES) if impl == "naive" else 0
    attention = [(1, 4 * S), (m - 1, c * S)] if m else []  # exp(scores − max) is fp32 under autocast too
    if c == 4:
        layer, final = [(10, 4 * BTd), (5, 4 * BTf)], [(3, 4 * BTd)]
    else:
        layer = [(4, 4 * BTd), (9 if impl == "naive" else 10, c * BTd), (5, c * BTf)]
        final = [(2, 4 * BTd), (1, c * BTd)]
    return {"layer": layer, "attention": attention, "final": final, "first": []}


def saved_activation_bytes(spec: ModelSpec, batch: int, context: int, impl: str = "naive",
                           saved_matrices: int | None = None, precision: str = "fp32", compiled: bool = False,
                           attention_output_merged: bool | None = None) -> dict[str, int]:
    """Activations the forward pass keeps for backward (see ACTIVATION_FORMULA); ``saved_matrices``:
    the naive attention's seq × seq matrices per layer, where not the built-in model's
    (``NAIVE_SAVED_MATRICES``); ``precision``: fp32, or bf16 / fp16 under CUDA autocast; ``compiled``:
    the torch.compile'd graph's (COMPILED_ACTIVATION_FORMULA)."""
    items = saved_activation_items(spec, batch, context, impl, saved_matrices, precision, compiled,
                                   attention_output_merged)
    attention = _bytes(items["attention"])
    per_layer = _bytes(items["layer"]) + attention
    final, first = _bytes(items["final"]), _bytes(items["first"])
    L = spec.num_layers
    return {"per_layer": per_layer, "attention_per_layer": attention, "layers": L * per_layer, "final": final,
            "first": first, "total": L * per_layer + first + final}


def compute_bytes(precision: str) -> int:
    """Bytes of a value that a matrix product computes: 2 under bf16 or fp16 autocast, else 4."""
    return 4 if precision == "fp32" else 2


# --- The caching allocator's rounding (the peak of a step: accounting_peak) ------------------

MiB = 2**20

# PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp) rounds every request up to
# 512 bytes; a request of 10 MiB or more gets a segment of its own rounded up to 2 MiB, whose tail
# is split off as a free block only when it is larger than 1 MiB, so torch.cuda.max_memory_allocated
# counts up to 1 MiB more than the tensor for such a request. Smaller requests are carved from
# shared segments and cost only the rounding. (A request served from a cached block can cost more
# or less; the rule is the steady state, where same-sized tensors reuse the same blocks.)
ALLOCATOR_ROUND_BYTES = 512
ALLOCATOR_OWN_SEGMENT_BYTES = 10 * MiB
ALLOCATOR_SEGMENT_ROUND_BYTES = 2 * MiB
ALLOCATOR_SPLIT_ABOVE_BYTES = 1 * MiB


def allocator_block_bytes(nbytes: int) -> int:
    """The block the caching allocator counts as allocated for a request of ``nbytes``."""
    size = max(ALLOCATOR_ROUND_BYTES, -(-nbytes // ALLOCATOR_ROUND_BYTES) * ALLOCATOR_ROUND_BYTES)
    if size < ALLOCATOR_OWN_SEGMENT_BYTES:
        return size
    segment = -(-size // ALLOCATOR_SEGMENT_ROUND_BYTES) * ALLOCATOR_SEGMENT_ROUND_BYTES
    return segment if segment - size <= ALLOCATOR_SPLIT_ABOVE_BYTES else size


# Attention on (B, T, d) inputs, one head, b bytes per value (pytorch_attention).
# The naive implementation materializes B x T x T matrices; autograd saves two of them for
# backward: exp(scores - max) (numerator of the division) and the softmax output (left operand
# of P·V), plus the row max's int64 indices and the row sum (B x T each). The row max is torch.max, as
# in the course's reference: amax would keep the scores too (its backward needs its input).
NAIVE_SAVED_MATRICES = 2
# Records made before the softmax took torch.max ran the amax model: three.
AMAX_SAVED_MATRICES = 3


def saved_matrices_of(data: dict | None, provenance: dict | None = None) -> int:
    """The naive attention's seq × seq matrices per layer of the model a record ran: its data's
    ``attention_saved_matrices``; else, for a record that stopped before writing it (an OOM), the
    current model's where its provenance has a ``code_hash`` (recorded since the softmax took
    torch.max), and the amax model's three for older records."""
    if (data or {}).get("attention_saved_matrices"):
        return data["attention_saved_matrices"]
    return NAIVE_SAVED_MATRICES if (provenance or {}).get("code_hash") else AMAX_SAVED_MATRICES


ATTENTION_MEMORY_FORMULA = (
    "one score matrix = B·T²·b; saved for backward = 2·B·T²·b + B·T·(8 + b) (the row max's int64 positions and "
    "the row sum; + T² bytes of mask when causal); "
    "inputs Q, K, V = 3·B·T·d·b; output O and upstream gradient dO = B·T·d·b each; "
    "gradients dQ, dK, dV = 3·B·T·d·b"
)


def naive_attention_memory(batch: int, seq: int, d_head: int, bytes_per_value: int = 4,
                           causal: bool = False, saved_matrices: int | None = None) -> dict[str, int]:
    """Bytes of naive attention by item; ``before_backward`` is what is alive once the forward returns."""
    B, T, d, b = batch, seq, d_head, bytes_per_value
    matrix = B * T * T * b  # (B, T, T)
    vector = B * T * d * b  # (B, T, d)
    matrices = saved_matrices or NAIVE_SAVED_MATRICES
    # amax's backward kept its input and output (one more matrix) and no int64 positions
    rows = B * T * (8 + b) if matrices == NAIVE_SAVED_MATRICES else 2 * B * T * b
    saved = matrices * matrix + rows + (T * T if causal else 0)
    out = {
        "score_matrix": matrix,
        "inputs": 3 * vector,
        "output": vector,
        "grad_output": vector,
        "saved_for_backward": saved,
        "gradients": 3 * vector,
    }
    out["before_backward"] = out["inputs"] + out["output"] + out["grad_output"] + saved
    return out
