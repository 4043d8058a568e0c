"""The processes of the DDP and sharded-optimizer cases: each rank trains through the adapters,
beside a single-process reference trained on the whole batch, and writes how far apart they are.

    run_ranks(tmp_path, "ddp_individual_parameters", "mlp")   # -> max |parameter - reference|

``ddp`` is the 2026 edition's overlapping DDP (``get_ddp``, ``ddp_on_after_backward``); ``naive_ddp``
runs cs336report's own naive DDP (the handout gives no adapter for it).

Ranks start with different weights (seeded by rank), so a wrapper that does not broadcast rank 0's
weights at construction ends up away from the reference (built with rank 0's seed).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

WORLD_SIZE = 2
STEPS = 5
BATCH = 8  # split evenly over the ranks, so the mean of their gradients is the whole batch's gradient
IN_FEATURES, OUT_FEATURES = 10, 5


class MLP(nn.Module):
    """Two linear layers with a LayerNorm, and one frozen parameter no hook may touch."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(IN_FEATURES, 16)
        self.norm = nn.LayerNorm(16)
        self.fc2 = nn.Linear(16, OUT_FEATURES, bias=False)
        self.frozen = nn.Parameter(torch.randn(3), requires_grad=False)

    def forward(self, x):  # (batch, IN_FEATURES) -> (batch, OUT_FEATURES)
        return self.fc2(F.relu(self.norm(self.fc1(x))))


class TiedMLP(nn.Module):
    """Two layers sharing one weight: a parameter met twice in the backward."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(IN_FEATURES, IN_FEATURES, bias=False)
        self.mix = nn.Linear(IN_FEATURES, IN_FEATURES, bias=False)
        self.mix.weight = self.embed.weight
        self.out = nn.Linear(IN_FEATURES, OUT_FEATURES)

    def forward(self, x):
        return self.out(torch.tanh(self.mix(torch.tanh(self.embed(x)))))


MODELS = {"mlp": MLP, "tied": TiedMLP}


def _build(model_name: str, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return MODELS[model_name]()


def _distance(model: nn.Module, reference: nn.Module) -> float:
    return max(float((p.detach() - r.detach()).abs().max()) for p, r in zip(model.parameters(), reference.parameters()))


def _batches():
    gen = torch.Generator().manual_seed(1234)
    for _ in range(STEPS):
        yield torch.randn(BATCH, IN_FEATURES, generator=gen), torch.randn(BATCH, OUT_FEATURES, generator=gen)


def _ddp_rank(rank: int, piece: str, model_name: str, bucket_size_mb: float | None) -> float:
    from . import adapters

    a = adapters()
    model, reference = _build(model_name, seed=rank), _build(model_name, seed=0)
    if piece == "naive_ddp":  # the handout has no adapter for it: ours, through its own method
        from ..distributed.ddp import DDPNaive

        ddp, start = DDPNaive(model), None
        after = lambda wrapped, _optimizer: wrapped.finish_gradient_synchronization()  # noqa: E731
    elif piece == "ddp_individual_parameters":
        ddp, after, start = a.get_ddp_individual_parameters(model), a.ddp_individual_parameters_on_after_backward, None
    elif piece == "ddp":  # the 2026 edition's names for the same wrapper
        ddp, after, start = a.get_ddp(model), a.ddp_on_after_backward, None
    else:
        ddp = a.get_ddp_bucketed(model, bucket_size_mb)
        after, start = a.ddp_bucketed_on_after_backward, a.ddp_bucketed_on_train_batch_start
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    errors = [_distance(model, reference)]  # after construction: rank 0's weights everywhere
    share = BATCH // WORLD_SIZE
    for x, y in _batches():
        if start is not None:
            start(ddp, optimizer)
        optimizer.zero_grad(set_to_none=True)
        F.mse_loss(ddp(x[rank * share:(rank + 1) * share]), y[rank * share:(rank + 1) * share]).backward()
        after(ddp, optimizer)
        optimizer.step()
        reference_optimizer.zero_grad(set_to_none=True)
        F.mse_loss(reference(x), y).backward()
        reference_optimizer.step()
        errors.append(_distance(model, reference))
    return max(errors)


def _sharded_rank(rank: int, model_name: str) -> float:
    from . import adapters

    model, reference = _build(model_name, seed=0), _build(model_name, seed=0)
    optimizer = adapters().get_sharded_optimizer(model.parameters(), torch.optim.AdamW, lr=0.01, weight_decay=0.1)
    reference_optimizer = torch.optim.AdamW(reference.parameters(), lr=0.01, weight_decay=0.1)
    errors = []
    for x, y in _batches():  # every rank the same batch: only the optimizer's state is sharded
        for m, opt in ((model, optimizer), (reference, reference_optimizer)):
            opt.zero_grad(set_to_none=True)
            F.mse_loss(m(x), y).backward()
            opt.step()
        errors.append(_distance(model, reference))
    return max(errors)


def _rank(rank: int, world_size: int, store: str, out: str, piece: str, model_name: str, bucket_size_mb):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world_size)
    try:
        if piece == "sharded_optimizer":
            error = _sharded_rank(rank, model_name)
        else:
            error = _ddp_rank(rank, piece, model_name, bucket_size_mb)
        Path(out, f"rank{rank}.json").write_text(json.dumps({"max_abs_error": error}))
    finally:
        dist.destroy_process_group()


def start_ranks(fn, args: tuple, world_size: int = WORLD_SIZE) -> None:
    """Run ``fn(rank, *args)`` in ``world_size`` processes and wait for them, one thread each.

    The ranks are forked where the platform can (a spawned rank imports torch again: seconds on a
    busy machine), after torch._dynamo is imported here once: a first optimizer imports it, which
    otherwise costs every rank of every case a second or two."""
    torch.set_num_threads(1)
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    if method == "fork":
        importlib.import_module("torch._dynamo")
    mp.start_processes(fn, args=args, nprocs=world_size, join=True, start_method=method)


def run_ranks(tmp_path: Path, piece: str, model_name: str, bucket_size_mb: float | None = None) -> float:
    """Run ``piece`` on WORLD_SIZE gloo processes; the largest parameter deviation any rank saw."""
    start_ranks(_rank, (WORLD_SIZE, str(tmp_path / "store"), str(tmp_path), piece, model_name, bucket_size_mb))
    return max(json.loads((tmp_path / f"rank{r}.json").read_text())["max_abs_error"] for r in range(WORLD_SIZE))
