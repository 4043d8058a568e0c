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

from .spec import ModelSpec

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


def training_state_bytes(spec: ModelSpec) -> dict[str, int]:
    """fp32 weights, gradients and AdamW's two moments: the 16 bytes/parameter floor."""
    n = param_count(spec)
    return {"parameters": 4 * n, "gradients": 4 * n, "optimizer_state": 8 * n, "total": 16 * n}


ADAMW_BYTES_PER_PARAM = 28
ADAMW_TRAFFIC_FORMULA = ("Memory traffic of an AdamW step = 28 bytes × parameters: it reads the fp32 weight, gradient "
                         "and both moments (16 bytes) and writes back the weight and both moments (12 bytes)")


def adamw_step_bytes(params: int) -> int:
    """Bytes an AdamW step over fp32 weights, gradients and moments reads and writes at least."""
    return ADAMW_BYTES_PER_PARAM * params


def residual_activation_bytes(spec: ModelSpec, batch: int, context: int, bytes_per_value: int = 4) -> int:
    """One residual-stream activation tensor: B · T · d_model values."""
    return batch * context * spec.d_model * bytes_per_value


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
# fp32, counted with torch.autograd.graph.saved_tensors_hooks (tests/test_memory_profiling.py
# checks the count against the model). Per block: the block input and the attention
# residual (the two RMSNorm inputs), each RMSNorm's x·rms and output, Q and K after RoPE, V,
# and the merged heads (10 tensors of B·T·d); the naive attention's exp(scores - max) and
# probabilities (2 of B·h·T²: the row max is torch.max, whose backward keeps indices), where the native fused attention keeps its B·T·d output and
# a B·h·T log-sum-exp instead; SwiGLU's W1x, σ(W1x), W1x·σ(W1x), W3x and their product (5 of
# B·T·f).
# After the blocks: the final RMSNorm's input, x·rms and output (3 of B·T·d). Terms of B·T,
# B·h·T and T² elements (norm scales, softmax row statistics, mask, RoPE tables) are left out.
ACTIVATION_FORMULA = (
    "saved for backward = 4 bytes × [L·(10·B·T·d + 2·B·h·T² + 5·B·T·f) + 3·B·T·d] (naive attention); "
    "native fused attention: 4 bytes × [L·(11·B·T·d + 5·B·T·f) + 3·B·T·d]; "
    "logits 4·B·T·V, and with a loss the log-softmax output and its gradient, 4·B·T·V each"
)


def saved_activation_bytes(spec: ModelSpec, batch: int, context: int, impl: str = "naive",
                           saved_matrices: int | None = None, precision: str = "fp32") -> dict[str, int]:
    """Activations the forward pass keeps for backward (see ACTIVATION_FORMULA); ``saved_matrices``:
    the naive attention's seq × seq matrices per layer, where not the built-in model's
    (``NAIVE_SAVED_MATRICES``).

    Under bf16 or fp16 autocast (``precision``) the matrix products' outputs and what is computed
    from them (Q, K, V, the merged heads, the attention matrices, the feed-forward's B·T·f
    tensors) are 2 bytes a value; the residual stream and the RMSNorms stay fp32 (6 of the
    B·T·d tensors), and each matrix product also saves the 2-byte copy autocast made of its
    fp32 input (q, k, v and the two feed-forward inputs: 5 more B·T·d; the LM head's after the
    blocks)."""
    B, T, d, f, h, L = batch, context, spec.d_model, spec.d_ff, spec.num_heads, spec.num_layers
    if impl not in ("naive", "native"):
        raise ValueError(f"unknown implementation {impl!r}; expected 'naive' or 'native'")
    matrices = (saved_matrices or NAIVE_SAVED_MATRICES) if impl == "naive" else 0
    attention = matrices * B * h * T * T
    if precision == "fp32":
        residual = 4 * (10 if impl == "naive" else 11) * B * T * d
        per_layer = residual + 4 * attention + 4 * 5 * B * T * f
        final = 4 * 3 * B * T * d
    else:  # 6 fp32 B·T·d; Q, K, V, merged heads (+ the fused output) and 5 input casts in 2 bytes
        residual = (4 * 6 + 2 * (9 if impl == "naive" else 10)) * B * T * d
        per_layer = residual + 2 * attention + 2 * 5 * B * T * f
        final = (4 * 3 + 2) * B * T * d
    return {"per_layer": per_layer, "attention_per_layer": (4 if precision == "fp32" else 2) * attention,
            "layers": L * per_layer, "final": final, "total": L * per_layer + final}


# AdamW's foreach implementation (torch's default on CUDA) computes sqrt(v) for every parameter
# at once into a temporary as large as the weights: 4 bytes/parameter on top of the 16 at the end
# of a train step, so its peak is 20 bytes/parameter where activations do not dominate. The fused
# implementation works in place.
ADAMW_TEMPORARY_BYTES_PER_PARAM = {"foreach": 4, "fused": 0}


def autocast_cast_bytes(spec: ModelSpec, precision: str) -> int:
    """Autocast's cached low-precision copies of the weights that enter a matrix product (2 bytes each
    in bf16 or fp16; none in fp32). The cache holds them for as long as the autocast region, also
    under no_grad (the weights still require grad), and the matrix products save them for backward."""
    if precision == "fp32":
        return 0
    d, f, V, L = spec.d_model, spec.d_ff, spec.vocab_size, spec.num_layers
    return 2 * (L * (4 * d * d + 3 * d * f) + d * V)


def predicted_peak_bytes(spec: ModelSpec, batch: int, context: int, mode: str, grad: str = "enabled",
                         impl: str = "naive", precision: str = "fp32", optimizer: str = "foreach",
                         saved_matrices: int | None = None) -> dict[str, int]:
    """What must be live at once at the peak of one step (an estimate, not a bound).

    forward without autograd: the weights, the logits and, under autocast, the cached
    low-precision copies of the weights (:func:`autocast_cast_bytes`, kept even under no_grad).
    Forward with autograd: also the activations saved for backward. With a backward pass, the
    start of backward holds the weights, the cast copies (saved by the matrix products), the
    saved activations, the logits, the log-softmax output and the logits' gradient; parameter
    gradients are freed by ``zero_grad(set_to_none=True)`` at the step's start, so they do not
    exist yet. A train step also holds AdamW's two moments, and its optimizer step holds the
    16 bytes/parameter of weights, gradients and moments plus the foreach implementation's
    temporary (``ADAMW_TEMPORARY_BYTES_PER_PARAM``). ``saved_matrices`` overrides the naive
    attention's seq × seq matrices per layer (3 for a model whose softmax used amax).
    """
    state = training_state_bytes(spec)
    n = param_count(spec)
    logits = 4 * batch * context * spec.vocab_size
    acts = saved_activation_bytes(spec, batch, context, impl, saved_matrices, precision)["total"]
    casts = autocast_cast_bytes(spec, precision)
    parts = {"parameters": state["parameters"], "gradients": 0, "optimizer_state": 0, "activations": 0,
             "logits": logits, "autocast_casts": casts, "optimizer_temporary": 0}
    if mode == "forward":
        if grad != "no_grad":
            parts["activations"] = acts
        parts["total"] = sum(parts.values())
        return parts
    if mode not in ("forward_backward", "train_step"):
        raise ValueError(f"unknown mode {mode!r}")
    moments = state["optimizer_state"] if mode == "train_step" else 0
    temporary = ADAMW_TEMPORARY_BYTES_PER_PARAM[optimizer] * n if mode == "train_step" else 0
    parts.update(activations=acts, logits=3 * logits, optimizer_state=moments)
    start_of_backward = state["parameters"] + moments + casts + acts + 3 * logits
    end_of_step = state["parameters"] + state["gradients"] + moments + temporary
    if end_of_step > start_of_backward:
        parts.update(gradients=state["gradients"], optimizer_temporary=temporary, activations=0, logits=0,
                     autocast_casts=0)
    parts["total"] = max(start_of_backward, end_of_step)
    return parts


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
