"""fsdp_accounting (a) of the 2026 handout: the bytes per rank of a model's parameters, gradients and
AdamW state, unsharded, with optimizer state sharding (§6) and with FSDP (§7), all fp32.

FSDP shards every Linear and Embedding weight over the ranks and replicates the RMSNorm gains, so a
rank holds 1/W of the sharded parameters, of their gradients and of their two AdamW moments, and all
of the norms'. Optimizer state sharding keeps every parameter and gradient and shards only the
moments. The gathered weights FSDP holds while a layer runs are left out, as the handout asks.
"""

from __future__ import annotations

from ..names.spec import ModelSpec
from .transformer import param_count

FP32 = 4
ADAM_STATES = 2  # first and second moments


def norm_params(spec: ModelSpec) -> int:
    """The RMSNorm gains: two a block and the final norm's."""
    return (2 * spec.num_layers + 1) * spec.d_model


def per_rank(spec: ModelSpec, world_size: int) -> list[dict]:
    """Bytes a rank holds for each scheme: parameters, gradients, optimizer state and their sum."""
    P = param_count(spec)
    replicated = norm_params(spec)
    sharded = P - replicated
    own = sharded / world_size + replicated  # the elements FSDP leaves on a rank
    rows = [("no sharding", P, P, ADAM_STATES * P),
            ("optimizer state sharding", P, P, ADAM_STATES * P / world_size),
            ("FSDP", own, own, ADAM_STATES * own)]
    return [{"scheme": name, "params_bytes": FP32 * p, "grads_bytes": FP32 * g, "optimizer_bytes": FP32 * o,
             "total_bytes": FP32 * (p + g + o)} for name, p, g, o in rows]


def accounting(spec: ModelSpec, world_size: int) -> dict:
    """:func:`per_rank`'s rows and the saving of FSDP beside optimizer state sharding."""
    rows = per_rank(spec, world_size)
    zero1, fsdp = rows[1]["total_bytes"], rows[2]["total_bytes"]
    return {"params": param_count(spec), "norm_params": norm_params(spec), "rows": rows,
            "saving": {"bytes": zero1 - fsdp, "fraction_of_sharded_optimizer": (zero1 - fsdp) / zero1,
                       "fraction_of_unsharded": (rows[0]["total_bytes"] - fsdp) / rows[0]["total_bytes"]}}
