"""What one step of the Transformer LM holds at its peak of allocated memory, predicted part by part
(weights, gradients, optimizer state and temporaries, autocast's copies, activations, workspace),
for the memory sections to check the CUDA allocator's own peak against.

    predicted_peak_bytes(spec, batch=4, context=512, mode="train_step")
"""

from __future__ import annotations

from ..names.spec import ModelSpec
from .compiled import per_tensor_update_bytes
from .transformer import MiB, Items, _bytes, compute_bytes, param_count, saved_activation_items


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
    bf16 working copies of fp32 masters the optimizer keeps (cs336report.lm.master_weights);
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
