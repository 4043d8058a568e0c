"""Distributed data parallel training, four ways (handout §2.2–2.3).

Every wrapper has the handout's interface: ``Wrapper(module[, bucket_size_mb])`` broadcasts rank
0's parameters and buffers, ``forward(*inputs, **kwargs)`` runs the wrapped module, and
``finish_gradient_synchronization()``, called after ``loss.backward()`` and before the optimizer
step, leaves every gradient equal to its mean over the ranks.

- :class:`DDPNaive`: after backward, one blocking all-reduce per parameter.
- :class:`DDPFlat`: after backward, one blocking all-reduce over all gradients flattened into one
  tensor (``torch._utils._flatten_dense_tensors``).
- :class:`DDPIndividualParameters`: each parameter's all-reduce starts (``async_op=True``) from its
  post-accumulate-grad hook, as soon as backward has produced its gradient, so communication
  overlaps the rest of backward; finishing waits for the handles.
- :class:`DDPBucketed`: the same, per bucket of parameters (at most ``bucket_size_mb`` MiB each,
  filled in reverse parameter order, the order backward produces gradients): a bucket's one
  all-reduce starts when its last gradient is ready.

Tied weights are one ``Parameter`` reached twice; ``module.parameters()`` yields it once, and its
post-accumulate-grad hook fires once, after both uses have added to its gradient. Parameters that
do not require grad are neither hooked nor reduced. Gradients are summed and then divided by the
world size (Gloo has no averaging reduction); the overlapped variants divide before the all-reduce,
in the hook, so no arithmetic is left for after backward. On CUDA the bucketed variant also copies
each reduced bucket back into its gradients on a side stream as soon as that bucket's all-reduce
ends, so after backward only the last buckets remain to wait for.

    model = DDPBucketed(model, bucket_size_mb=25)
    loss = loss_fn(model(x), y); loss.backward()
    model.finish_gradient_synchronization(); optimizer.step()
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from ..names.ddp import WRAPPERS

MIB = 2**20  # bucket_size_mb counts MiB, as torch's DistributedDataParallel's bucket_cap_mb does


def trainable(module: nn.Module) -> list[nn.Parameter]:
    """The parameters whose gradients are synchronized: tied ones once, in registration order."""
    return [p for p in module.parameters() if p.requires_grad]


class _DDP(nn.Module):
    """Holds the module, broadcasts rank 0's state, forwards calls."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module
        self.world_size = dist.get_world_size()
        with torch.no_grad():
            for tensor in [*module.parameters(), *module.buffers()]:
                dist.broadcast(tensor.data, src=0)

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)

    def finish_gradient_synchronization(self) -> None:
        raise NotImplementedError


class DDPNaive(_DDP):
    """One blocking all-reduce per gradient, after backward."""

    def finish_gradient_synchronization(self) -> None:
        for p in trainable(self.module):
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad.div_(self.world_size)


class DDPFlat(_DDP):
    """One blocking all-reduce over all gradients flattened into one buffer, after backward."""

    def finish_gradient_synchronization(self) -> None:
        grads = [p.grad for p in trainable(self.module) if p.grad is not None]
        if not grads:
            return
        flat = _flatten_dense_tensors(grads)  # (sum of numels,)
        dist.all_reduce(flat)
        flat.div_(self.world_size)
        for grad, reduced in zip(grads, _unflatten_dense_tensors(flat, grads)):
            grad.copy_(reduced)


class DDPIndividualParameters(_DDP):
    """Each gradient's all-reduce starts from its post-accumulate-grad hook, during backward."""

    def __init__(self, module: nn.Module):
        super().__init__(module)
        self._pending: list[dist.Work] = []
        for p in trainable(module):
            p.register_post_accumulate_grad_hook(self._start)

    def _start(self, p: torch.Tensor) -> None:
        p.grad.div_(self.world_size)  # the sum of the ranks' shares is the mean
        self._pending.append(dist.all_reduce(p.grad, async_op=True))

    def finish_gradient_synchronization(self) -> None:
        for work in self._pending:
            work.wait()
        self._pending.clear()


def assign_buckets(sizes_bytes: list[int], bucket_bytes: float) -> list[list[int]]:
    """Parameter indices per bucket: in reverse order of ``sizes_bytes``, a bucket takes parameters
    while its total stays within ``bucket_bytes``; a parameter larger than that gets a bucket alone."""
    buckets: list[list[int]] = []
    filled = 0
    for i in reversed(range(len(sizes_bytes))):
        if buckets and filled + sizes_bytes[i] <= bucket_bytes:
            buckets[-1].append(i)
            filled += sizes_bytes[i]
        else:
            buckets.append([i])
            filled = sizes_bytes[i]
    return buckets


class DDPBucketed(_DDP):
    """One asynchronous all-reduce per bucket of at most ``bucket_size_mb`` MiB of gradients,
    started by the hook of the bucket's last gradient to be ready."""

    def __init__(self, module: nn.Module, bucket_size_mb: float):
        super().__init__(module)
        if bucket_size_mb <= 0:
            raise ValueError(f"bucket_size_mb must be positive, not {bucket_size_mb}")
        params = trainable(module)
        sizes = [p.numel() * p.element_size() for p in params]
        self.buckets = [[params[i] for i in b] for b in assign_buckets(sizes, bucket_size_mb * MIB)]
        self._bucket_of = {id(p): b for b, bucket in enumerate(self.buckets) for p in bucket}
        self._ready = [0] * len(self.buckets)
        self._pending: dict[int, tuple[torch.Tensor, list[torch.Tensor], dist.Work]] = {}
        self._copy_stream: torch.cuda.Stream | None = None
        for p in params:
            p.register_post_accumulate_grad_hook(self._mark_ready)

    def _launch(self, b: int) -> None:
        grads = [p.grad for p in self.buckets[b] if p.grad is not None]
        if not grads:
            return
        flat = _flatten_dense_tensors(grads).div_(self.world_size)  # (bucket numel,)
        work = dist.all_reduce(flat, async_op=True)
        if not flat.is_cuda:
            self._pending[b] = (flat, grads, work)
            return
        # The copy back waits for this bucket's all-reduce on a side stream, while backward goes on.
        if self._copy_stream is None:
            self._copy_stream = torch.cuda.Stream(flat.device)
        with torch.cuda.stream(self._copy_stream):
            work.wait()
            _copy_back(flat, grads)
        flat.record_stream(self._copy_stream)

    def _mark_ready(self, p: torch.Tensor) -> None:
        b = self._bucket_of[id(p)]
        self._ready[b] += 1
        if self._ready[b] == len(self.buckets[b]):
            self._launch(b)

    def finish_gradient_synchronization(self) -> None:
        # a bucket with a parameter that took no part in this step's loss never filled: reduce what it has
        for b, ready in enumerate(self._ready):
            if 0 < ready < len(self.buckets[b]):
                self._launch(b)
        for flat, grads, work in self._pending.values():
            work.wait()
            _copy_back(flat, grads)
        self._pending.clear()
        if self._copy_stream is not None:
            torch.cuda.current_stream(self._copy_stream.device).wait_stream(self._copy_stream)
        self._ready = [0] * len(self.buckets)


def _copy_back(flat: torch.Tensor, grads: list[torch.Tensor]) -> None:
    for grad, reduced in zip(grads, _unflatten_dense_tensors(flat, grads)):
        grad.copy_(reduced)


# Our wrappers by their variant names (cs336report.names.ddp.WRAPPERS).
VARIANTS = dict(zip(WRAPPERS, (DDPNaive, DDPFlat, DDPIndividualParameters, DDPBucketed)))
