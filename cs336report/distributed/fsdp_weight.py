"""One weight of :class:`~cs336report.distributed.fsdp.FSDP`: its flat shard and its collectives.

A :class:`ShardedWeight` replaces a weight of ``numel`` elements by this rank's flat slice of it:
the weight is flattened, padded with zeros to ``world_size * shard_numel`` elements
(``shard_numel = ceil(numel / world_size)``), and rank ``r`` keeps elements
``[r * shard_numel, (r + 1) * shard_numel)`` as a 1-D ``nn.Parameter`` in the weight's own dtype
(the master copy, fp32 for an fp32 model). Only the last ranks hold padding; it stays zero, since
its gradient is zero.

Three collectives move it, all asynchronous (``async_op=True``), so they overlap computation:

- :meth:`start_gather`: the shard, cast to the communication dtype (``compute_dtype`` if set),
  all-gathered into one flat buffer; :meth:`take_full` waits for it and returns the full weight,
  a view of that buffer. The caller holds the only lasting reference, so the buffer is freed
  when the caller is done with it.
- :meth:`start_reduce_scatter`: a full gradient (in the communication dtype) reduce-scattered
  into a shard-sized buffer; :meth:`finish_reduce_scatter` waits, divides by the world size (the
  mean over ranks) and adds it, in the shard's dtype, to the shard's ``.grad``.
- :meth:`gather_master`: a blocking all-gather of the master shard, for reading the full weights.

:class:`Unshard` is the autograd function between the shard and the full weight: its forward
returns the gathered weight, its backward starts the gradient's reduce-scatter and returns no
gradient to autograd (the shard's ``.grad`` is filled when the reduce-scatter is finished).
"""

from __future__ import annotations

import math
import weakref

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

# torch 2.13 names the tensor collectives *_single and deprecates the older names (a FutureWarning).
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class ShardedWeight:
    """The flat shard of one weight on this rank, and its gathers and reduce-scatters.

    ``name``: the weight's name in the wrapped module (its first, for a tied weight);
    ``comm_dtype``: the dtype of the gathered weight and of the gradient communicated (the
    weight's own dtype unless a ``compute_dtype`` is given).
    """

    def __init__(self, name: str, weight: torch.Tensor, rank: int, world_size: int,
                 comm_dtype: torch.dtype | None = None):
        self.name, self.rank, self.world_size = name, rank, world_size
        self.shape, self.numel = weight.shape, weight.numel()
        self.shard_numel = math.ceil(self.numel / world_size)
        self.comm_dtype = comm_dtype or weight.dtype
        flat = F.pad(weight.detach().reshape(-1), (0, self.padded_numel - self.numel))
        start = rank * self.shard_numel
        self.shard = nn.Parameter(flat[start:start + self.shard_numel].clone(),
                                  requires_grad=weight.requires_grad)  # (shard_numel,)
        self._gather: tuple[torch.Tensor, torch.Tensor, dist.Work] | None = None  # (out, in, work)
        self._reductions: list[tuple[torch.Tensor, torch.Tensor, dist.Work]] = []  # (out, in, work)
        self.last_full: weakref.ref | None = None  # the latest gathered buffer, to tell whether it was freed

    @property
    def padded_numel(self) -> int:
        return self.shard_numel * self.world_size

    # --- the full weight ----------------------------------------------------------------------
    @property
    def gathering(self) -> bool:
        """Whether a gather was started and not yet taken."""
        return self._gather is not None

    @torch.no_grad()
    def start_gather(self) -> None:
        """Start the all-gather of every rank's shard (cast to ``comm_dtype`` first)."""
        if self._gather is not None:
            return
        source = self.shard.detach().to(self.comm_dtype)  # (shard_numel,); kept alive until taken
        out = torch.empty(self.padded_numel, dtype=self.comm_dtype, device=source.device)
        self._gather = (out, source, _all_gather(out, source, async_op=True))
        self.last_full = weakref.ref(out)

    @torch.no_grad()
    def take_full(self) -> torch.Tensor:
        """The full weight (``shape``, ``comm_dtype``), from the started gather (started now if none was);
        the caller's reference is the only one this object keeps no copy of."""
        self.start_gather()
        out, _, work = self._gather
        self._gather = None
        work.wait()
        return out[:self.numel].view(self.shape)

    def drop_gather(self) -> None:
        """Forget a started gather that will not be taken (waits for it, so no collective is left open)."""
        if self._gather is not None:
            self._gather[2].wait()
            self._gather = None

    def full_alive(self) -> bool:
        """Whether the latest gathered buffer still exists (held by anything)."""
        return self.last_full is not None and self.last_full() is not None

    @torch.no_grad()
    def gather_master(self) -> torch.Tensor:
        """The full weight in the master dtype (blocking): what an optimizer step has made of it."""
        out = torch.empty(self.padded_numel, dtype=self.shard.dtype, device=self.shard.device)
        _all_gather(out, self.shard.detach())
        return out[:self.numel].view(self.shape).clone()

    # --- the gradient -------------------------------------------------------------------------
    @torch.no_grad()
    def start_reduce_scatter(self, full_grad: torch.Tensor) -> None:
        """Start summing ``full_grad`` (the weight's shape) over the ranks into this rank's shard."""
        flat = full_grad.to(self.comm_dtype).reshape(-1)
        flat = F.pad(flat, (0, self.padded_numel - self.numel)) if self.padded_numel > self.numel \
            else flat.contiguous()  # (padded_numel,)
        out = torch.empty(self.shard_numel, dtype=self.comm_dtype, device=flat.device)
        self._reductions.append((out, flat, _reduce_scatter(out, flat, async_op=True)))

    @property
    def reducing(self) -> int:
        """Reduce-scatters started and not finished."""
        return len(self._reductions)

    @torch.no_grad()
    def finish_reduce_scatter(self) -> None:
        """Wait for the started reduce-scatters; add their mean over the ranks to the shard's gradient."""
        for out, _, work in self._reductions:
            work.wait()
            mean = out.to(self.shard.dtype).div_(self.world_size)  # (shard_numel,)
            if self.shard.grad is None:
                self.shard.grad = mean
            else:
                self.shard.grad.add_(mean)
        self._reductions.clear()


class Unshard(torch.autograd.Function):
    """shard -> full weight; the backward starts the full gradient's reduce-scatter to the shards.

    ``on_backward(weight, grad)`` is called in the backward instead of returning a gradient, so the
    caller decides when to finish the reduce-scatter (and how many to keep in flight).
    """

    @staticmethod
    def forward(ctx, shard: torch.Tensor, weight: ShardedWeight, on_backward):
        ctx.weight, ctx.on_backward = weight, on_backward
        return weight.take_full()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        ctx.on_backward(ctx.weight, grad)
        return None, None, None
