"""Fully sharded data parallel training (the 2026 handout's ``fsdp`` problem).

:class:`FSDP` has the handout's interface: ``FSDP(module, compute_dtype=None)`` broadcasts rank
0's parameters and buffers and shards the module, ``forward(*inputs, **kwargs)`` runs it, and
``finish_gradient_synchronization()``, called after ``loss.backward()`` and before the optimizer
step, leaves every trainable parameter of ``.module`` with the mean gradient over the ranks.

Sharding plan. The ``weight`` of every Linear and Embedding (torch's, or any module class named
``Linear`` or ``Embedding``, as the course's and ours are) becomes this rank's flat 1/world_size
slice of it (:class:`~cs336report.distributed.fsdp_weight.ShardedWeight`): ``.module``'s
parameter of that name is the 1-D shard, and an optimizer built on ``model.parameters()`` steps
the shards. Every other parameter (norms, biases) stays whole on each rank and its gradient is
all-reduced, started from its post-accumulate-grad hook during backward.

A sharded layer's step:

- Forward. Before the layer runs, its weight is all-gathered; the gathers of the first two
  layers start when the forward starts, and the gather of layer i+2 starts when layer i has
  finished its forward (prefetch two ahead), so at most three full weights exist at once. The
  layer runs with the gathered weight in place of the shard; afterwards the shard is put back
  and no reference to the gathered weight is kept, so it is freed.
- Backward. Saved-tensor hooks keep the graph from holding a gathered weight: the layer's
  saved weight is packed as a note of which weight it was, and unpacked by gathering it again.
  Unpacking one weight starts the gather of the one before it in forward order (prefetch one
  ahead in backward). A layer that saves no weight (an Embedding's index needs only the indices)
  is not gathered in backward at all.
- Gradients. The full gradient of a weight is reduce-scattered (asynchronously; at most
  ``MAX_REDUCTIONS_IN_FLIGHT`` at a time, the oldest finished first) to the shards; the shard's
  ``.grad`` gets the mean over ranks.

With ``compute_dtype`` (e.g. ``torch.bfloat16`` or ``torch.float16``) each shard is cast before
its all-gather, so the gather moves and the layer computes in that dtype; a sharded layer's other
parameters (a bias) and floating-point inputs are cast for its forward too. Gradients are
reduce-scattered in that dtype and added to the shards in fp32, so the master weights, their
gradients and the optimizer's update stay fp32. Replicated parameters keep their own dtype.

Gloo on the CPU and NCCL on GPUs both work: all collectives are the tensor ones
(all-gather and reduce-scatter of one flat buffer, all-reduce), asynchronous, waited for where
their result is needed.

    model = FSDP(model, compute_dtype=torch.bfloat16)
    optimizer = AdamW(model.parameters())            # the shards and the replicated parameters
    loss = loss_fn(model(x), y); loss.backward()
    model.finish_gradient_synchronization(); optimizer.step()
    full = model.gather_full_params()                # {name in .module: full fp32 tensor}

The gradient of a replicated parameter is all-reduced once per backward: call
``finish_gradient_synchronization`` after each backward (no accumulation over several).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from .fsdp_weight import ShardedWeight, Unshard

SHARDED_TYPES = (nn.Linear, nn.Embedding)
SHARDED_NAMES = ("Linear", "Embedding")  # the Assignment 1 classes, whichever package defines them
PREFETCH_FORWARD = 2  # gathers running ahead of the layer being computed
MAX_REDUCTIONS_IN_FLIGHT = 2


def is_sharded_layer(module: nn.Module) -> bool:
    """Whether FSDP shards this module's weight: a Linear or Embedding with a ``weight`` parameter."""
    kind = isinstance(module, SHARDED_TYPES) or type(module).__name__ in SHARDED_NAMES
    return kind and isinstance(module._parameters.get("weight"), nn.Parameter)


class _Packed:
    """What the graph keeps instead of a gathered weight it saved: which weight, and the view of it."""

    __slots__ = ("weight", "size", "stride", "offset")

    def __init__(self, weight: ShardedWeight, t: torch.Tensor):
        self.weight, self.size, self.stride, self.offset = weight, t.size(), t.stride(), t.storage_offset()


class FSDP(nn.Module):
    """``module`` with its Linear and Embedding weights sharded over the ranks of the default group."""

    def __init__(self, module: nn.Module, compute_dtype: torch.dtype | None = None):
        super().__init__()
        self.module, self.compute_dtype = module, compute_dtype
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        with torch.no_grad():
            for tensor in [*module.parameters(), *module.buffers()]:
                dist.broadcast(tensor.data, src=0)
        self.weights: list[ShardedWeight] = []  # in the order of forward (the modules' registration)
        self._weight_of: dict[nn.Module, ShardedWeight] = {}
        self._shard(module)
        self.replicated = [p for p in module.parameters()
                           if p.requires_grad and all(p is not w.shard for w in self.weights)]
        self._pending: list[dist.Work] = []  # replicated gradients' all-reduces
        self._reducing: list[ShardedWeight] = []  # weights with reduce-scatters in flight, oldest first
        for p in self.replicated:
            p.register_post_accumulate_grad_hook(self._all_reduce)
        self._live: dict[int, ShardedWeight] = {}  # storage address -> weight, while its layer runs
        self._swapped: dict[nn.Module, dict[str, nn.Parameter]] = {}  # layer -> its own parameters
        self._gathered_version: dict[ShardedWeight, int] = {}  # the shard version a gather started from
        self._saved_order: list[ShardedWeight] = []  # weights the graph saved, in forward order
        self._saved_count: dict[ShardedWeight, int] = {}  # packed references not yet unpacked
        self._prefetched: set[ShardedWeight] = set()  # weights whose gather this forward has started
        self._backward_full: dict[ShardedWeight, torch.Tensor] = {}  # gathered in backward, still needed
        self.events: list[tuple[str, str]] = []  # this step's (event, weight name), for inspection

    def _shard(self, module: nn.Module) -> None:
        by_param: dict[int, ShardedWeight] = {}  # a tied weight is sharded once
        for name, layer in module.named_modules():
            if not is_sharded_layer(layer):
                continue
            param = layer._parameters["weight"]
            if id(param) not in by_param:
                weight_name = f"{name}.weight" if name else "weight"
                by_param[id(param)] = ShardedWeight(weight_name, param, self.rank, self.world_size,
                                                    self.compute_dtype)
                self.weights.append(by_param[id(param)])
            weight = by_param[id(param)]
            layer._parameters["weight"] = weight.shard
            self._weight_of[layer] = weight
            layer.register_forward_pre_hook(self._before_layer)
            layer.register_forward_hook(self._after_layer)

    # --- forward --------------------------------------------------------------------------
    def forward(self, *inputs, **kwargs):
        self.events = []
        self._saved_order, self._saved_count = [], {}
        self._backward_full.clear()
        self._prefetched = set()
        for weight in self.weights[:PREFETCH_FORWARD]:
            self._prefetch(weight)
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                return self.module(*inputs, **kwargs)
        finally:
            self._restore_all()
            for weight in self.weights:  # layers that did not run this time
                weight.drop_gather()

    def _start_gather(self, weight: ShardedWeight, phase: str) -> None:
        if not weight.gathering:
            weight.start_gather()
            self._gathered_version[weight] = weight.shard._version
            self.events.append((f"gather_{phase}", weight.name))

    def _prefetch(self, weight: ShardedWeight) -> None:
        if weight not in self._prefetched:  # a tied weight's second layer starts no gather ahead again
            self._prefetched.add(weight)
            self._start_gather(weight, "forward")

    def _before_layer(self, layer: nn.Module, args: tuple):
        weight = self._weight_of[layer]
        self.events.append(("forward_start", weight.name))
        self._start_gather(weight, "forward")  # a layer met out of order, or a second time
        self._prefetched.add(weight)
        if weight.shard.requires_grad and torch.is_grad_enabled():
            full = Unshard.apply(weight.shard, weight, self._reduce_scatter)
        else:
            full = weight.take_full()
        self._live[full.untyped_storage().data_ptr()] = weight
        own = dict(layer._parameters)
        self._swapped[layer] = own
        layer._parameters["weight"] = full  # the layer computes with the gathered weight
        if self.compute_dtype is None:
            return None
        for name, p in own.items():
            if name != "weight" and p is not None and p.is_floating_point():
                layer._parameters[name] = p.to(self.compute_dtype)
        return tuple(a.to(self.compute_dtype) if torch.is_tensor(a) and a.is_floating_point() else a
                     for a in args)

    def _after_layer(self, layer: nn.Module, args: tuple, output):
        weight = self._weight_of[layer]
        self._live = {ptr: w for ptr, w in self._live.items() if w is not weight}
        layer._parameters.update(self._swapped.pop(layer))  # the shard again; the gathered weight is dropped
        self.events.append(("forward_end", weight.name))
        i = self.weights.index(weight)
        if i + PREFETCH_FORWARD < len(self.weights):
            self._prefetch(self.weights[i + PREFETCH_FORWARD])

    def _restore_all(self) -> None:
        for layer, own in self._swapped.items():
            layer._parameters.update(own)
        self._swapped.clear()
        self._live.clear()

    # --- backward: saved gathered weights are gathered again ----------------------------------
    def _pack(self, t: torch.Tensor):
        live = self._live and t.layout == torch.strided
        weight = self._live.get(t.untyped_storage().data_ptr()) if live else None
        if weight is None:
            return t
        if weight not in self._saved_count:
            self._saved_order.append(weight)
        self._saved_count[weight] = self._saved_count.get(weight, 0) + 1
        return _Packed(weight, t)

    def _unpack(self, packed):
        # Every choice here (gather or reuse, prefetch or not) depends only on what this step did,
        # never on whether Python has freed a buffer yet, so all ranks issue the same collectives.
        if not isinstance(packed, _Packed):
            return packed
        weight = packed.weight
        full = self._backward_full.get(weight)
        if full is None or self._gathered_version[weight] != weight.shard._version:
            self._start_gather(weight, "backward")
            full = weight.take_full()
        self.events.append(("backward_unpack", weight.name))
        left = self._saved_count.get(weight, 0) - 1
        self._saved_count[weight] = left
        if left > 0:  # the graph saved this weight more than once: keep it for the other uses
            self._backward_full[weight] = full
        else:  # the last use: the graph's node holds the only reference, and frees it after use
            self._backward_full.pop(weight, None)
        i = self._saved_order.index(weight) if weight in self._saved_order else 0
        if i > 0:  # the layer before it in forward order comes next in backward
            earlier = self._saved_order[i - 1]
            if self._saved_count.get(earlier, 0) > 0 and earlier not in self._backward_full:
                self._start_gather(earlier, "backward")
        return full.as_strided(packed.size, packed.stride, packed.offset)

    def _reduce_scatter(self, weight: ShardedWeight, grad: torch.Tensor) -> None:
        weight.start_reduce_scatter(grad)
        self.events.append(("reduce_scatter", weight.name))
        self._reducing.append(weight)
        while len(self._reducing) > MAX_REDUCTIONS_IN_FLIGHT:
            self._reducing.pop(0).finish_reduce_scatter()

    def _all_reduce(self, p: torch.Tensor) -> None:
        p.grad.div_(self.world_size)  # the sum of the ranks' shares is the mean
        self._pending.append(dist.all_reduce(p.grad, async_op=True))

    # --- after backward ---------------------------------------------------------------------
    def finish_gradient_synchronization(self) -> None:
        """Finish every reduce-scatter and all-reduce: each trainable parameter of ``.module`` has its
        mean gradient over the ranks, shards in their own (fp32) dtype and shape."""
        for weight in self.weights:
            weight.finish_reduce_scatter()
            weight.drop_gather()  # a backward prefetch no layer asked for
        self._reducing.clear()
        for work in self._pending:
            work.wait()
        self._pending.clear()
        self.events.append(("synchronized", ""))

    def gather_full_params(self) -> dict[str, torch.Tensor]:
        """Every parameter of ``.module`` by its name there, full: shards all-gathered (master dtype),
        replicated parameters as they are. A collective: every rank must call it."""
        sharded = {id(w.shard): w for w in self.weights}
        full: dict[str, torch.Tensor] = {}
        gathered: dict[int, torch.Tensor] = {}
        for name, p in self.module.named_parameters(remove_duplicate=False):
            if id(p) in sharded:
                if id(p) not in gathered:
                    gathered[id(p)] = sharded[id(p)].gather_master()
                full[name] = gathered[id(p)]
            else:
                full[name] = p.detach()
        return full

    # --- accounting -------------------------------------------------------------------------
    def parameter_bytes(self) -> dict[str, int]:
        """Bytes of parameters this rank holds: its shards (padding included) and the replicated ones."""
        shards = sum(w.shard.numel() * w.shard.element_size() for w in self.weights)
        total = sum(p.numel() * p.element_size() for p in self.module.parameters())
        return {"sharded": shards, "replicated": total - shards, "total": total}
