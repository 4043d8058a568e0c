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

from . import accounting_compiled
from .accounting_compiled import compiled_saved_items, per_tensor_update_bytes
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


# --- What one step holds at its peak ---------------------------------------------------------

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


def cublas_workspace_bytes(capability: str | None) -> int:
    """The cuBLAS workspace torch allocates through the caching allocator for each thread that runs
    matrix products (the forward's and the autograd engine's): 32 MiB on compute capability 9.0 and
    10.0 (Hopper, Blackwell), 4096 KiB · 2 + 16 KiB · 8 elsewhere (torch's defaults, unless
    CUBLAS_WORKSPACE_CONFIG sets it); none without a GPU (``capability`` None)."""
    if not capability:
        return 0
    return 32 * MiB if str(capability) in ("9.0", "10.0") else 4096 * 1024 * 2 + 16 * 1024 * 8


def parameter_sizes(spec: ModelSpec) -> list[int]:
    """Values of each parameter tensor: embedding, per block four d × d, three d × f and two norm
    gains, the final norm's gain and the LM head (they sum to :func:`param_count`)."""
    d, f, V = spec.d_model, spec.d_ff, spec.vocab_size
    return [V * d] + spec.num_layers * ([d * d] * 4 + [d * f] * 3 + [d] * 2) + [d, V * d]


def matrix_weight_sizes(spec: ModelSpec) -> list[int]:
    """Values of each weight that enters a matrix product (:func:`linear_weight_count` of them)."""
    d, f = spec.d_model, spec.d_ff
    return spec.num_layers * ([d * d] * 4 + [d * f] * 3) + [spec.vocab_size * d]


def training_state_bytes(spec: ModelSpec) -> dict[str, int]:
    """fp32 weights, gradients and AdamW's two moments: the 16 bytes/parameter floor."""
    n = param_count(spec)
    return {"parameters": 4 * n, "gradients": 4 * n, "optimizer_state": 8 * n, "total": 16 * n}


def autocast_cast_bytes(spec: ModelSpec, precision: str) -> int:
    """Autocast's cached low-precision copies of the weights that enter a matrix product (2 bytes each
    in bf16 or fp16; none in fp32). The cache holds them until the autocast region exits, also
    under no_grad (the weights still require grad), and the matrix products save them for backward."""
    return 0 if precision == "fp32" else 2 * sum(matrix_weight_sizes(spec))


# AdamW's foreach implementation (torch's default on CUDA) computes sqrt(v) for every parameter
# at once into a temporary as large as the weights: 4 bytes/parameter on top of the 16 at the end
# of a train step. The fused implementation works in place. ``per_tensor``: an update run one
# tensor at a time (the master-weight update run eagerly), whose temporaries are the largest
# tensor's (accounting_compiled.PER_TENSOR_UPDATE_BYTES).
ADAMW_TEMPORARY_BYTES_PER_PARAM = {"foreach": 4, "fused": 0}
OPTIMIZERS = ("foreach", "fused", "per_tensor")

# In the last block's attention backward (the first to run), the division's backward holds the
# gradient of the probabilities (fp32; under autocast cast up from the gradient of the saved bf16
# copy, +2 bytes over it), the gradient of exp(scores − max) and the four temporaries of the
# denominator's gradient, −g·((e / s) / s): bytes a score above what forward saved.
ATTENTION_BACKWARD_BYTES_PER_SCORE = {4: 20, 2: 22}
# Under no_grad the naive attention holds the scores, scores − max, their exponential and the
# probabilities at once (locals of the softmax): 4 bytes each in fp32; under autocast the first
# two in 2 bytes and the exponential and the probabilities in fp32.
ATTENTION_FORWARD_BYTES_PER_SCORE = {4: 16, 2: 12}

PEAK_FORMULA = (
    "peak = the largest of these moments. Forward: weights 4·P, autocast's weight copies (2 bytes a "
    "matrix weight, held under no_grad too), the saved activations (with autograd) and the logits c·B·T·V; "
    "under no_grad, the largest block-local set instead of the saved activations. A step with backward "
    "starts it without gradients (zero_grad(set_to_none=True) freed them) and with the AdamW moments 8·P: "
    "(i) the loss's backward adds the log-softmax output, its gradient and the NLL gradient, 12·B·T·V; "
    "(ii) the last block's attention backward adds 20 bytes a score in fp32, 22 under autocast, and the "
    "gradients so far, less what that block's backward has freed; (iii) the optimizer step holds weights, "
    "gradients, moments and foreach AdamW's temporary, 20·P (16·P fused). Plus 32 MiB of cuBLAS workspace "
    "a thread that runs matrix products (H100, H200). c = 2 under bf16 autocast, else 4; P parameters. "
    "Compiled (torch.compile): the compiled graph's saved activations, its 16-bit weight copies in place of "
    "autocast's, and moments (i) and (iii) (its backward is one graph that releases what forward saved as it "
    "makes the gradients). Master weights: each matrix weight of M values in all is a bf16 working copy beside "
    "its fp32 master (+2·M) with a bf16 gradient (−2·M), and nothing is copied by autocast"
)


def _params(sizes: list[int], bytes_per_value: int) -> Items:
    return [(1, bytes_per_value * n) for n in sizes]


def _gradients(sizes: list[int], matrix: list[int], master_weights: bool) -> Items:
    """One gradient a parameter: fp32, but bf16 for the matrix weights held as bf16 working copies."""
    if not master_weights:
        return _params(sizes, 4)
    rest = list(sizes)
    for n in matrix:
        rest.remove(n)
    return _params(rest, 4) + _params(matrix, 2)


def _moments(spec: ModelSpec, batch: int, context: int, mode: str, grad: str, impl: str, precision: str,
             optimizer: str, saved_matrices: int | None, capability: str | None, output_held: bool,
             compiled: bool = False, master_weights: bool = False,
             attention_output_merged: bool | None = None) -> dict[str, dict[str, Items]]:
    """The live tensors of each candidate peak of one step, by part."""
    B, T, d, f, V, L = batch, context, spec.d_model, spec.d_ff, spec.vocab_size, spec.num_layers
    BTd, BTf, BTV, S = B * T * d, B * T * f, B * T * V, B * spec.num_heads * T * T
    c = compute_bytes(precision)
    master_weights = master_weights and c == 2
    sizes, matrix = parameter_sizes(spec), matrix_weight_sizes(spec)
    weights = _params(sizes, 4) + (_params(matrix, 2) if master_weights else [])  # masters, and working copies
    casts = _params(matrix, 2) if c == 2 and not master_weights else []
    ws = cublas_workspace_bytes(capability)
    acts = saved_activation_items(spec, B, T, impl, saved_matrices, precision, compiled, attention_output_merged)
    saved = [(L * n, b) for n, b in acts["layer"] + acts["attention"]] + acts["first"] + acts["final"]
    logits = [(1, c * BTV)]
    if mode == "forward":
        base = {"parameters": weights, "autocast_casts": casts, "workspace": [(1, ws)] if ws else []}
        if grad != "no_grad":
            return {"end of forward": {**base, "activations": saved, "logits": logits}}
        out = {"end of forward": {**base, "logits": logits},
               "feed-forward": {**base, "temporaries": [(2, 4 * BTd), (4, c * BTf)]}}
        if impl == "naive":
            per_score = ATTENTION_FORWARD_BYTES_PER_SCORE[c]
            out["attention forward"] = {**base, "temporaries": [(2, 4 * BTd), (3, c * BTd),
                                                                 (1, per_score * S)]}
        return out
    if mode not in ("forward_backward", "train_step"):
        raise ValueError(f"unknown mode {mode!r}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; expected one of {OPTIMIZERS}")
    workspace = [(2, ws)] if ws else []
    moments = _params(sizes, 8) if mode == "train_step" else []
    grads = _gradients(sizes, matrix, master_weights)
    start = {"parameters": weights, "optimizer_state": moments, "autocast_casts": casts, "workspace": workspace}
    out = {"loss backward": {**start, "activations": saved, "logits": logits + [(3, 4 * BTV)]}}
    if impl == "naive" and not compiled:
        # the last block's backward before its attention core: LM head, final norm, feed-forward,
        # second norm and output projection have made their gradients and released what they saved
        done = [(1, V * d), (3, d * f), (1, d * d), (2, d)]
        done_matrix = [n for k, n in done[:3] for _ in range(k)]
        freed = [(-7, 4 * BTd), (-5, 4 * BTf)] if c == 4 else \
            [(-4, 4 * BTd), (-4, c * BTd), (-5, c * BTf)]
        out["last attention backward"] = {
            **start, "gradients": _params(done_matrix, 2 if master_weights else 4) + _params([d, d], 4),
            "autocast_casts": casts + [(-1, 2 * n) for n in done_matrix] if casts else [],
            "activations": saved + freed, "logits": logits,
            "temporaries": [(1, ATTENTION_BACKWARD_BYTES_PER_SCORE[c] * S)]}
    end = {"parameters": weights, "gradients": grads, "optimizer_state": moments,
           "logits": logits if output_held else [], "workspace": workspace}
    if mode == "train_step":
        if optimizer == "per_tensor":
            end["optimizer_temporary"] = [(1, per_tensor_update_bytes(sizes, matrix if master_weights else []))]
        else:
            end["optimizer_temporary"] = _params(sizes, ADAMW_TEMPORARY_BYTES_PER_PARAM[optimizer])
        out["optimizer step"] = end
    else:
        out["end of backward"] = end
    return out


PEAK_PARTS = ("parameters", "gradients", "optimizer_state", "optimizer_temporary", "autocast_casts", "activations",
              "logits", "temporaries", "workspace")


def predicted_peak_bytes(spec: ModelSpec, batch: int, context: int, mode: str, grad: str = "enabled",
                         impl: str = "naive", precision: str = "fp32", optimizer: str = "foreach",
                         saved_matrices: int | None = None, capability: str | None = None,
                         output_held: bool = True, compiled: bool = False, master_weights: bool = False,
                         attention_output_merged: bool | None = None) -> dict:
    """What is live at the peak of one step (PEAK_FORMULA), in tensor bytes by part, with ``total``
    (what a memory snapshot's requested sizes add up to), ``allocated`` (the same tensors in the
    caching allocator's blocks: what torch.cuda.max_memory_allocated counts) and ``moment``, the
    moment of the step that holds the most.

    ``capability``: the GPU's compute capability, for the cuBLAS workspaces (None: not counted);
    ``output_held``: the step keeps its logits until it returns (the benchmark's step), not only
    through backward; ``saved_matrices``: the naive attention's seq × seq matrices per layer (3 for
    a model whose softmax took amax); ``optimizer``: foreach or fused AdamW, or ``per_tensor`` (an
    update one tensor at a time); ``compiled``: the model runs torch.compile'd (what its graph
    saves, accounting_compiled); ``master_weights``: under 16-bit autocast, the matrix weights are
    bf16 working copies of fp32 masters the optimizer keeps (cs336report.master_weights);
    ``attention_output_merged``: see accounting_compiled.compiled_saved_items."""
    moments = _moments(spec, batch, context, mode, grad, impl, precision, optimizer, saved_matrices, capability,
                       output_held, compiled, master_weights, attention_output_merged)
    totals = {k: sum(_bytes(items) for items in parts.values()) for k, parts in moments.items()}
    blocks = {k: sum(_bytes(items, blocks=True) for items in parts.values()) for k, parts in moments.items()}
    moment = max(totals, key=totals.get)
    out = {p: _bytes(moments[moment].get(p, [])) for p in PEAK_PARTS}
    out.update(total=totals[moment], allocated=max(blocks.values()), moment=moment,
               moments={k: {"total": totals[k], "allocated": blocks[k]} for k in moments})
    return out


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
