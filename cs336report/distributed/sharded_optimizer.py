"""Optimizer state sharding (the handout's §3, ZeRO stage 1's idea): each rank keeps the optimizer
state of about 1/world_size of the parameters.

:class:`ShardedOptimizer` wraps any ``torch.optim.Optimizer`` class. Every rank holds all the
parameters (and, after a data-parallel backward, the same averaged gradients), but each parameter
has one owner: the rank that runs the wrapped optimizer on it and so holds its state (AdamW's two
moments). After the owners' step every parameter is broadcast from its owner, so all ranks end the
step with the same weights. Parameters go to owners largest first, each to the rank with the fewest
elements so far (the greedy partition ZeroRedundancyOptimizer uses too), so the shards are balanced
by element count, also across groups added later with :meth:`add_param_group`.

    optimizer = ShardedOptimizer(model.parameters(), torch.optim.AdamW, lr=1e-3)
    loss.backward(); average_gradients(model); optimizer.step()

Without an initialized process group it runs as one rank (owner of everything).
"""

from __future__ import annotations

from typing import Any, Iterable, Type

import torch
import torch.distributed as dist
from torch.optim import Optimizer


def tensor_bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def state_bytes(optimizer: Optimizer | None) -> int:
    """Bytes of every tensor in ``optimizer``'s per-parameter state (0 for None)."""
    if optimizer is None:
        return 0
    return sum(tensor_bytes(v) for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v))


class ShardedOptimizer(Optimizer):
    """``optimizer_cls(**kwargs)`` run by each rank on the parameters it owns, then a broadcast.

    ``param_groups`` are the full groups (as the caller gave them: ``zero_grad`` and schedulers
    see every parameter); ``optimizer`` is this rank's wrapped optimizer over its own parameters
    (None while it owns none). Hyperparameters set on ``param_groups`` reach it at each step.
    """

    def __init__(self, params: Iterable, optimizer_cls: Type[Optimizer], **kwargs: Any):
        distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if distributed else 0
        self.world_size = dist.get_world_size() if distributed else 1
        self.optimizer_cls, self.optimizer_kwargs = optimizer_cls, kwargs
        self.optimizer: Optimizer | None = None
        self.owner: dict[torch.Tensor, int] = {}  # parameter -> the rank that updates it
        self.elements_per_rank = [0] * self.world_size
        self._local_groups: list[dict | None] = []  # per full group: this rank's part, or None
        super().__init__(params, defaults=kwargs)  # calls add_param_group for each group

    def _assign(self, params: list[torch.Tensor]) -> list[int]:
        """Owners of ``params``: largest first, each to the least-loaded rank (ties: lowest rank)."""
        owners = [0] * len(params)
        order = sorted(range(len(params)), key=lambda i: (-params[i].numel(), i))
        for i in order:
            rank = min(range(self.world_size), key=lambda r: (self.elements_per_rank[r], r))
            owners[i] = rank
            self.elements_per_rank[rank] += params[i].numel()
        return owners

    def add_param_group(self, param_group: dict) -> None:
        """Add a group for every rank, and this rank's owned part of it to the wrapped optimizer."""
        super().add_param_group(param_group)  # validates, fills in defaults, rejects repeated params
        group = self.param_groups[-1]
        new = [p for p in group["params"] if p not in self.owner]
        for p, rank in zip(new, self._assign(new)):
            self.owner[p] = rank
        local = {**{k: v for k, v in group.items() if k != "params"},
                 "params": [p for p in group["params"] if self.owner[p] == self.rank]}
        if not local["params"]:
            self._local_groups.append(None)
            return
        if self.optimizer is None:
            self.optimizer = self.optimizer_cls([local], **self.optimizer_kwargs)
        else:
            self.optimizer.add_param_group(local)
        self._local_groups.append(self.optimizer.param_groups[-1])

    def _sync_hyperparameters(self) -> None:
        for full, local in zip(self.param_groups, self._local_groups):
            if local is not None:
                local.update({k: v for k, v in full.items() if k != "params"})

    @torch.no_grad()
    def _broadcast_parameters(self) -> None:
        """Every parameter from its owner to the other ranks (asynchronously, then wait for all)."""
        if self.world_size == 1:
            return
        handles = [dist.broadcast(p.data, src=self.owner[p], async_op=True)
                   for group in self.param_groups for p in group["params"]]
        for handle in handles:
            handle.wait()

    def step(self, closure=None, **kwargs):
        """The wrapped optimizer's step on this rank's parameters, then every parameter from its owner."""
        self._sync_hyperparameters()
        if self.optimizer is not None:
            loss = self.optimizer.step(closure, **kwargs) if closure is not None else self.optimizer.step(**kwargs)
        else:  # owns nothing: still evaluates the closure, as every rank's step would
            loss = closure() if closure is not None else None
        self._broadcast_parameters()
        return loss

    # --- accounting -------------------------------------------------------------------------
    def local_state_bytes(self) -> int:
        """Bytes of optimizer state this rank holds."""
        return state_bytes(self.optimizer)

    def owned_elements(self, rank: int | None = None) -> int:
        """Parameter elements owned by ``rank`` (default: this rank)."""
        return self.elements_per_rank[self.rank if rank is None else rank]

    def broadcast_bytes(self) -> dict[str, int]:
        """What one step's broadcasts move, by this rank: the bytes it sends as owner (its own
        parameters) and receives (the others'), out of all parameter bytes."""
        params = [p for group in self.param_groups for p in group["params"]]
        total = sum(tensor_bytes(p) for p in params)
        own = sum(tensor_bytes(p) for p in params if self.owner[p] == self.rank)
        return {"total": total, "owned": own, "received": total - own if self.world_size > 1 else 0}
