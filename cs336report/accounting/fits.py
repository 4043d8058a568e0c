"""Whether one step of the Transformer LM fits a card, from the accounting alone: the bytes a step
needs at its peak (:func:`cs336report.accounting.peak.predicted_peak_bytes`: weights, gradients,
AdamW state and temporaries, activations, logits), the bytes it is certain to hold at one moment,
and what an 80 GB card would need.

A cell whose certain bytes exceed its card's memory cannot run there, so it is recorded as out of
memory without running (``predicted``); a cell above the predicted peak but under the certain bytes
runs, and its out-of-memory error, if any, is the result (``measured``). The certain bytes count
only tensors that autograd and AdamW must hold together (CERTAIN_FORMULA), none of the temporaries,
logits, workspaces or allocator rounding the predicted peak adds.

    needed(cell)                  # the analytic bytes of a cell's step
    certain_not_to_fit(cell, n)   # True where the step cannot fit n bytes
"""

from __future__ import annotations

import math

from ..names.spec import ModelSpec
from .peak import PEAK_PARTS, predicted_peak_bytes, training_state_bytes
from .transformer import saved_activation_bytes

# The course's card, an 80 GB H100, as the report counts it: 80·10⁹ bytes (torch sees 81,559 MiB of
# one, 85.5·10⁹ bytes, part of which the CUDA context takes).
CARD_BYTES = 80 * 10**9

CERTAIN_FORMULA = (
    "certain = the largest of: weights 4·P with the activations saved for backward, at the end of a forward "
    "with autograd (plus AdamW's moments 8·P from the step before, in a train step); weights and gradients "
    "8·P at the end of backward; weights, gradients and moments 16·P in the optimizer step. A cell whose "
    "certain bytes exceed the card is recorded as out of memory without running (predicted, not measured)"
)


def _spec(cell: dict) -> ModelSpec:
    return ModelSpec(**cell["model"])


def applies(cell: dict) -> bool:
    """True for a one-process Transformer step on a CUDA device (not a distributed rank, whose state may
    be sharded, nor a step on bf16 master weights, whose gradients are not all fp32)."""
    return (str(cell.get("device", "")).startswith("cuda") and "model" in cell and "mode" in cell
            and "context" in cell and "batch_size" in cell and "world_size" not in cell
            and not cell.get("master_weights"))


def certain_bytes(cell: dict) -> dict:
    """The bytes the step must hold at one moment (CERTAIN_FORMULA), by part, with ``total``. The saved
    activations count only for the built-in model (a user's model may save others)."""
    spec = _spec(cell)
    state = training_state_bytes(spec)
    mode = cell["mode"]
    autograd = cell.get("grad", "enabled") != "no_grad"
    acts = 0
    if autograd and not cell.get("model_source"):
        acts = saved_activation_bytes(spec, cell["batch_size"], cell["context"], cell.get("implementation", "naive"),
                                      precision=cell.get("precision", "fp32"),
                                      compiled=bool(cell.get("compiled")))["total"]
    moments = state["optimizer_state"] if mode == "train_step" else 0
    candidates = {"end of forward": {"parameters": state["parameters"], "optimizer_state": moments,
                                     "activations": acts}}
    if mode in ("forward_backward", "train_step"):
        candidates["end of backward"] = {"parameters": state["parameters"], "gradients": state["gradients"],
                                         "optimizer_state": moments}
    moment = max(candidates, key=lambda k: sum(candidates[k].values()))
    return {**candidates[moment], "moment": moment, "total": sum(candidates[moment].values())}


def needed(cell: dict, capacity: int | None = None, predicted: bool = False) -> dict:
    """The analytic bytes of ``cell``'s step: the predicted peak by part, the certain bytes, and what
    :data:`CARD_BYTES` lacks (``capacity``: the card the cell ran on, if known; ``predicted``: the cell
    was not run)."""
    spec = _spec(cell)
    peak = predicted_peak_bytes(spec, cell["batch_size"], cell["context"], cell["mode"],
                                grad=cell.get("grad", "enabled"), impl=cell.get("implementation", "naive"),
                                precision=cell.get("precision", "fp32"))
    certain = certain_bytes(cell)
    need = max(peak["total"], certain["total"])
    return {
        "predicted": predicted,
        "peak_bytes": peak["total"],
        "peak_moment": peak["moment"],
        "parts": {p: peak[p] for p in PEAK_PARTS if peak[p]},
        "certain_bytes": certain["total"],
        "certain_moment": certain["moment"],
        "device_memory_bytes": capacity,
        "card_bytes": CARD_BYTES,
        "short_of_card_bytes": max(0, need - CARD_BYTES),
        "cards_of_80gb": math.ceil(need / CARD_BYTES),
        "formula": CERTAIN_FORMULA,
    }


def certain_not_to_fit(cell: dict, capacity: int) -> bool:
    """True where ``cell``'s step must hold more than ``capacity`` bytes at one moment."""
    return applies(cell) and certain_bytes(cell)["total"] > capacity
