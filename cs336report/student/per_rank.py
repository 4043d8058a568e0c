"""What the handout's tests do not check, measured per rank: whether an FSDP and a sharded optimizer
really shard, and whether a DDP really averages gradients across ranks.

The handout's tests compare weights after training; an FSDP whose ranks each keep every parameter,
or a "sharded" optimizer that keeps the whole state on every rank, passes them. These checks run
the implementation under test (ours, or a student checkout's through its 2026 ``tests/adapters.py``)
in two Gloo processes on the CPU and measure, on each rank:

- FSDP (:func:`fsdp_sharding`): bytes of the parameters the wrapper's ``parameters()`` yield and of
  the tensors the wrapped module holds, against the bytes of the whole model; after one AdamW step
  on ``parameters()``, the bytes of the optimizer's state.
- Sharded optimizer (:func:`optimizer_sharding`): bytes of every tensor the optimizer object holds
  that is not a parameter (its own state and any inner optimizer's), after one step, against
  unsharded AdamW's state.
- DDP (:func:`ddp_averaging`): ranks are fed different data; after ``ddp_on_after_backward`` every
  rank's gradients are compared with the mean of the single-process gradients of every rank's data.

Each returns the ranks' measurements and a ``verdict``: ``sharded`` / ``not_sharded`` (every rank
holds at least ``NOT_SHARDED_FRACTION`` of the whole) / ``partly_sharded``; ``averaged`` /
``summed`` / ``not_synchronized`` / ``wrong``; and ``sentence``, the plain statement the report prints.

    found = fsdp_sharding(checkout=None)          # ours; checkout="path/to/assignment2-systems": theirs
    found["verdict"], found["sentence"]
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from ..distributed.launch import launch
from ..distributed.sharded_optimizer import tensor_bytes

WORLD_SIZE = 2
NOT_SHARDED_FRACTION = 0.9  # a rank holding this share of the whole shards nothing worth the name
VOCAB, D_MODEL, D_FF = 64, 32, 64
BATCH, SEQ = 4, 6
DDP_TOLERANCE = 1e-5


class CheckModel(nn.Module):
    """The shape of the handout's FSDP test model: an Embedding, norms, Linears, an LM head."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, D_MODEL)
        self.norm = nn.LayerNorm(D_MODEL)
        self.up = nn.Linear(D_MODEL, D_FF, bias=False)
        self.down = nn.Linear(D_FF, D_MODEL, bias=False)
        self.lm_head = nn.Linear(D_MODEL, VOCAB, bias=False)

    def forward(self, tokens):  # (batch, seq) -> (batch, seq, vocab)
        x = self.norm(self.embedding(tokens))
        return self.lm_head(self.down(F.relu(self.up(x))))


def _adapters(checkout: str | None):
    if checkout:
        from .resolve import load_adapters

        return load_adapters(checkout)
    from . import adapters

    return adapters


def _model() -> CheckModel:
    torch.manual_seed(0)
    return CheckModel()


def _tokens(rank: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(100 + rank))


def _loss(model, tokens) -> torch.Tensor:
    return F.cross_entropy(model(tokens).float().flatten(0, 1), tokens.roll(-1, 1).flatten())


def _params_bytes(params) -> int:
    seen, total = set(), 0
    for p in params:
        if id(p) not in seen:
            seen.add(id(p))
            total += tensor_bytes(p)
    return total


def held_tensor_bytes(obj, exclude: set[int], depth: int = 6) -> int:
    """Bytes of the tensors reachable from ``obj``'s attributes, dicts, lists and tuples (``depth``
    levels), each once, leaving out those whose id is in ``exclude`` (the parameters)."""
    seen: set[int] = set(exclude)

    def walk(x, level: int) -> int:
        if torch.is_tensor(x):
            if id(x) in seen:
                return 0
            seen.add(id(x))
            return tensor_bytes(x)
        if level <= 0 or id(x) in seen or isinstance(x, (str, bytes, int, float, bool, type(None), nn.Module)):
            return 0
        seen.add(id(x))
        if isinstance(x, dict):
            items = list(x.values())
        elif isinstance(x, (list, tuple, set)):
            items = list(x)
        elif hasattr(x, "__dict__") and not callable(x) or isinstance(x, torch.optim.Optimizer):
            items = list(vars(x).values())
        else:
            return 0
        return sum(walk(i, level - 1) for i in items)

    return walk(obj, depth)


# ----------------------------------------------------------------------------- the ranks


def _fsdp_rank(rank: int, world_size: int, device: str, checkout: str | None) -> dict:
    a = _adapters(checkout)
    whole = _params_bytes(_model().parameters())
    wrapped = a.get_fsdp(_model())
    params = list(wrapped.parameters())
    held = _params_bytes(params)
    module_held = _params_bytes(wrapped.module.parameters()) if hasattr(wrapped, "module") else held
    optimizer = torch.optim.AdamW(params, lr=1e-3)
    _loss(wrapped, _tokens(rank)).backward()
    a.fsdp_on_after_backward(wrapped, optimizer)
    optimizer.step()
    state = held_tensor_bytes(optimizer.state, {id(p) for p in params})
    reference = torch.optim.AdamW(_model().parameters(), lr=1e-3)
    for p in reference.param_groups[0]["params"]:
        p.grad = torch.zeros_like(p)
    reference.step()
    whole_state = held_tensor_bytes(reference.state, set())
    return {"parameter_bytes": held, "module_parameter_bytes": module_held, "model_bytes": whole,
            "optimizer_state_bytes": state, "unsharded_state_bytes": whole_state}


def _optimizer_rank(rank: int, world_size: int, device: str, checkout: str | None) -> dict:
    a = _adapters(checkout)
    model = _model()
    params = list(model.parameters())
    optimizer = a.get_sharded_optimizer(params, torch.optim.AdamW, lr=1e-3)
    _loss(model, _tokens(0)).backward()
    optimizer.step()
    reference = torch.optim.AdamW(_model().parameters(), lr=1e-3)
    for p in reference.param_groups[0]["params"]:
        p.grad = torch.zeros_like(p)
    reference.step()
    exclude = {id(p) for p in params} | {id(p.grad) for p in params if p.grad is not None}
    return {"optimizer_state_bytes": held_tensor_bytes(optimizer, exclude),
            "unsharded_state_bytes": held_tensor_bytes(reference.state, set()),
            "model_bytes": _params_bytes(params)}


def _ddp_rank(rank: int, world_size: int, device: str, checkout: str | None) -> dict:
    a = _adapters(checkout)
    model = _model()
    reference = copy.deepcopy(model)
    ddp = a.get_ddp(model)
    _loss(ddp, _tokens(rank)).backward()
    a.ddp_on_after_backward(ddp, None)
    singles = []
    for r in range(world_size):  # each rank's data through one process's copy of the model
        reference.zero_grad(set_to_none=True)
        _loss(reference, _tokens(r)).backward()
        singles.append([p.grad.clone() for p in reference.parameters()])
    mean = [sum(gs) / world_size for gs in zip(*singles)]
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]

    def distance(target) -> float:
        return max(float((g - t).abs().max()) for g, t in zip(grads, target))

    return {"from_mean": distance(mean), "from_sum": distance([m * world_size for m in mean]),
            "from_own": distance(singles[rank])}


# ----------------------------------------------------------------------------- the checks


def _sharding_verdict(fractions: list[float], world_size: int) -> str:
    if min(fractions) >= NOT_SHARDED_FRACTION:
        return "not_sharded"
    return "sharded" if max(fractions) <= 1.0 / world_size + 0.25 else "partly_sharded"


def fsdp_sharding(checkout: str | None = None, world_size: int = WORLD_SIZE) -> dict:
    """Parameters and optimizer state each rank holds through ``get_fsdp``, against the whole model's."""
    ranks = launch(_fsdp_rank, world_size, backend="gloo", args=(checkout,))
    fractions = [r["parameter_bytes"] / r["model_bytes"] for r in ranks]
    verdict = _sharding_verdict(fractions, world_size)
    who = "the FSDP under test"
    sentence = {
        "not_sharded": f"Nothing is sharded: each of the {world_size} ranks of {who} holds "
                       f"{min(fractions):.0%} or more of the model's parameters.",
        "partly_sharded": f"{who.capitalize()} shards part of the model: its ranks hold "
                          f"{min(fractions):.0%} to {max(fractions):.0%} of the parameters.",
        "sharded": f"{who.capitalize()} shards the model: each of its {world_size} ranks holds at most "
                   f"{max(fractions):.0%} of the parameters.",
    }[verdict]
    return {"ranks": ranks, "parameter_fractions": fractions, "verdict": verdict, "sentence": sentence}


def optimizer_sharding(checkout: str | None = None, world_size: int = WORLD_SIZE) -> dict:
    """Optimizer state each rank holds through ``get_sharded_optimizer``, against unsharded AdamW's."""
    ranks = launch(_optimizer_rank, world_size, backend="gloo", args=(checkout,))
    fractions = [r["optimizer_state_bytes"] / r["unsharded_state_bytes"] for r in ranks]
    verdict = _sharding_verdict(fractions, world_size)
    sentence = {
        "not_sharded": f"Nothing is sharded: each of the {world_size} ranks keeps {min(fractions):.0%} or more "
                       f"of the whole optimizer state.",
        "partly_sharded": f"The optimizer state is partly sharded: ranks keep {min(fractions):.0%} to "
                          f"{max(fractions):.0%} of it.",
        "sharded": f"The optimizer state is sharded: each of the {world_size} ranks keeps at most "
                   f"{max(fractions):.0%} of it.",
    }[verdict]
    return {"ranks": ranks, "state_fractions": fractions, "verdict": verdict, "sentence": sentence}


def ddp_averaging(checkout: str | None = None, world_size: int = WORLD_SIZE) -> dict:
    """Whether ``get_ddp``'s gradients after synchronization are the mean over the ranks' data."""
    ranks = launch(_ddp_rank, world_size, backend="gloo", args=(checkout,))
    for verdict, key in (("averaged", "from_mean"), ("summed", "from_sum"), ("not_synchronized", "from_own")):
        if all(r[key] <= DDP_TOLERANCE for r in ranks):
            break
    else:
        verdict = "wrong"
    sentence = {
        "averaged": "Gradients are averaged across ranks: each rank's equal the mean of the ranks' own.",
        "summed": "Gradients are summed across ranks, not averaged: each rank's are the ranks' total.",
        "not_synchronized": "Gradients are not synchronized: each rank keeps the gradient of its own data.",
        "wrong": "Gradients after synchronization are neither the ranks' mean, their sum, nor each rank's own.",
    }[verdict]
    return {"ranks": ranks, "verdict": verdict, "sentence": sentence}
