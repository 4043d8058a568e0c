"""The memory terms of a compiled train step and of the optimized step's optimizer.

What a compiled forward saves. ``torch.compile`` (Inductor) splits the joint forward-backward
graph with its partitioner (Inductor's joint-graph passes, then AOTAutograd's
``min_cut_rematerialization_partition``): the forward keeps the fewest bytes that let backward
avoid recomputing a matrix product, and backward recomputes the element-wise work. Counted with
:func:`cs336report.measure.compiled_census.compiled_saved_tensors` on the CPU, per block:

* the block input and the attention residual in fp32 (the residual stream; the first block's
  input is not kept: backward looks the embedding up again);
* in the compute dtype c (4 bytes in fp32, 2 under bf16 autocast): the first norm's output (one
  copy for Q, K and V), Q and K after RoPE, V, the merged heads and the second norm's output (one
  copy for W1 and W3): 6 of B·T·d; the fused attention's output where it is a storage of its own
  (cuDNN and the CPU kernel write it in Q's layout; CUDA's memory-efficient kernel, which runs
  fp32, writes it in the merged heads' layout, so they are one storage): one more;
* W1x, W3x and their gated product: 3 of B·T·f in c;
* the naive attention: 2 of B·h·T² in c (the scores or exp(scores − max), and the
  probabilities; the same with amax or torch.max for the row max: the partitioner recomputes the
  rest from them and the B·h·T row statistics).

After the blocks: the final norm's input in fp32 and its output in c. Against the eager count
(accounting.ACTIVATION_FORMULA) the compiled graph drops the norms' x·rms, SwiGLU's σ(W1x) and
W1x·σ(W1x) and the duplicate 16-bit copies autocast makes per matrix product. Under bf16 it saves
a 16-bit copy of every matrix weight: autocast's cache holds the same bytes in eager mode.

The optimized step's optimizer (:mod:`cs336report.lm.master_weights`): with master weights, every
matrix weight is a bf16 parameter (its working copy, 2 bytes) whose fp32 value the optimizer keeps
(4 bytes); its gradient is bf16 (2 bytes); autocast finds the weights in bf16 and copies none. The
update's temporaries: none where it runs fused (torch's fused AdamW, or the update compiled into
one kernel per tensor); one tensor at a time where it runs eagerly (:data:`PER_TENSOR_UPDATE_BYTES`).
"""

from __future__ import annotations

from ..names.spec import ModelSpec

COMPILED_ACTIVATION_FORMULA = (
    "saved for backward by the compiled graph = 4 bytes × 2·L·B·T·d "
    "+ c bytes × [(L·(6 + a) + 1)·B·T·d + 3·L·B·T·f + 2·L·B·h·T² (naive only)]; "
    "c = 4 in fp32, 2 under bf16 autocast; a = 1 where the fused attention's output is a storage of its own "
    "(native under bf16, cuDNN), else 0"
)

# AdamW over fp32 moments written one tensor at a time (master_weights.adamw_update run eagerly):
# the gradient widened to fp32 (4 bytes a value; none where it already is fp32), the denominator,
# m / denominator and its product with the step size are live together: bytes a value of the
# tensor being updated, by the gradient's bytes a value.
PER_TENSOR_UPDATE_BYTES = {2: 16, 4: 12}

Items = list  # [(count, bytes of each tensor)]


def compiled_saved_items(spec: ModelSpec, batch: int, context: int, impl: str, compute: int,
                         attention_output_merged: bool | None = None) -> dict[str, Items]:
    """The tensors of COMPILED_ACTIVATION_FORMULA as (count, bytes each), by kind: ``layer`` (one block),
    ``attention`` (one block's seq × seq matrices), ``final`` (after the blocks) and ``first`` (what the
    first block keeps less). ``compute``: bytes of a value in the compute dtype; ``attention_output_merged``:
    whether the fused attention writes its output in the merged heads' layout, so that they are one
    storage (None: as on an H100 / H200, in fp32 only)."""
    B, T, d, f, h = batch, context, spec.d_model, spec.d_ff, spec.num_heads
    BTd, BTf, S = B * T * d, B * T * f, B * h * T * T
    c = compute
    merged = (c == 4) if attention_output_merged is None else attention_output_merged
    own_output = 1 if impl == "native" and not merged else 0
    return {"layer": [(2, 4 * BTd), (6 + own_output, c * BTd), (3, c * BTf)],
            "attention": [(2, c * S)] if impl == "naive" else [],
            "final": [(1, 4 * BTd), (1, c * BTd)],
            "first": [(-1, 4 * BTd)]}


def per_tensor_update_bytes(sizes: list[int], matrix_sizes: list[int]) -> int:
    """The largest temporaries of an AdamW update run one tensor at a time with master weights: the
    matrix weights have bf16 gradients, the other parameters fp32 ones."""
    rest = list(sizes)
    for n in matrix_sizes:
        rest.remove(n)
    return max([PER_TENSOR_UPDATE_BYTES[2] * n for n in matrix_sizes] + [PER_TENSOR_UPDATE_BYTES[4] * n for n in rest])
