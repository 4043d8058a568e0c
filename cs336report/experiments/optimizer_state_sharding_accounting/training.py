"""optimizer_state_sharding_accounting's training: every rank trains the model with the cell's
optimizer, its phases timed and its memory read part by part (the package's docstring:
:mod:`cs336report.experiments.optimizer_state_sharding_accounting`).
"""

from __future__ import annotations

import os
import subprocess
from contextlib import nullcontext

import torch
import torch.distributed as dist

from ...accounting import transformer as accounting
from ...accounting.distributed import data_parallel_bytes
from ...distributed.launch import launch
from ...distributed.sharded_optimizer import ShardedOptimizer, tensor_bytes
from ...lm.build import build_model
from ...lm.model import ModelSpec, cross_entropy
from ...measure.timing import PhaseTimer, summarize, synchronize, time_steps
from ...student.resolve import adapter_errors, class_name
from ..benchmarking_script.step import set_tf32
from . import OPTIMIZERS

LR = 1e-4


def student_optimizer(student: dict | None):
    """The student's sharded optimizer adapter from the resolver; AdapterNotImplemented if it is not there."""
    from ...student import resolve as resolver

    if not student:
        raise ValueError("optimizer 'student' runs the student's code: set student.checkout")
    found = resolver.implementation("sharded_optimizer", student)
    if not found:
        raise found.error()
    return found


def make_optimizer(name: str, params, student: dict | None = None):
    """The optimizer of a cell, and the optimizers that hold this rank's state (see :func:`holders`)."""
    if name == "adamw":
        opt = torch.optim.AdamW(params, lr=LR)
        return opt, lambda: [opt]
    if name == "sharded":
        opt = ShardedOptimizer(params, torch.optim.AdamW, lr=LR)
        return opt, lambda: [o for o in (opt.optimizer,) if o is not None]
    if name == "zero":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        opt = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, lr=LR)
        return opt, lambda: [opt.optim]
    if name == "student":  # as the handout's tests build it
        from ...student import resolve as resolver

        opt = resolver.call(student_optimizer(student), params, torch.optim.AdamW, lr=LR)
        return opt, lambda: holders(opt)
    raise ValueError(f"cell field 'optimizer' is {name!r}, expected one of {OPTIMIZERS}")


def holders(optimizer) -> list:
    """``optimizer`` and the optimizers it holds as attributes (alone, or in a list, tuple or dict):
    where a sharded optimizer of unknown make keeps this rank's state."""
    found = [optimizer]
    for value in vars(optimizer).values():
        values = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
        found += [v for v in values if isinstance(v, torch.optim.Optimizer) and v is not optimizer]
    return found


def held_state(optimizers: list) -> tuple[int, int]:
    """Bytes of the optimizers' per-parameter state tensors (each storage once) and the parameter
    elements that have state (each parameter once)."""
    storages, params = {}, {}
    for opt in optimizers:
        for p, state in opt.state.items():
            tensors = [v for v in state.values() if torch.is_tensor(v)]
            if tensors:
                params[id(p)] = p.numel()
            for t in tensors:
                storages[(t.untyped_storage().data_ptr(), t.storage_offset(), t.numel())] = tensor_bytes(t)
    return sum(storages.values()), sum(params.values())


def _allocated(device) -> dict | None:
    """Peak and current allocated bytes since the last reset (None off CUDA)."""
    if device.type != "cuda":
        return None
    return {"peak": torch.cuda.max_memory_allocated(device), "current": torch.cuda.memory_allocated(device)}


def _reset_peak(device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


class SavedBytes:
    """Bytes of the tensors autograd saves for backward, each storage once, parameters left out."""

    def __init__(self, params):
        self.skip = {p.untyped_storage().data_ptr() for p in params}
        self.seen: dict[int, int] = {}

    def pack(self, t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in self.skip:
            self.seen[storage.data_ptr()] = storage.nbytes()
        return t

    @property
    def total(self) -> int:
        return sum(self.seen.values())


def _average_gradients(params, world: int) -> None:
    grads = [p.grad for p in params if p.grad is not None]
    handles = [dist.all_reduce(g, op=dist.ReduceOp.SUM, async_op=True) for g in grads]
    for h in handles:
        h.wait()
    torch._foreach_mul_(grads, 1.0 / world)


def _rank(rank: int, world: int, device, cell: dict) -> dict:
    set_tf32(cell["tf32"])
    if device.type == "cpu":  # the ranks share the host's cores: one rank's threads must not crowd another's
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    spec = ModelSpec(**cell["model"])
    _reset_peak(device)
    torch.manual_seed(cell["seed"])
    model, model_info = build_model({**cell, "device": str(device)})
    params = list(model.parameters())
    for p in params:  # every rank starts from rank 0's weights
        dist.broadcast(p.data, src=0)
    synchronize(str(device))
    after_init = _allocated(device)
    generator = torch.Generator(device="cpu").manual_seed(cell["seed"] + 1 + rank)
    shape = (cell["batch_size"], cell["context"])  # (batch per rank, seq)
    tokens = torch.randint(0, spec.vocab_size, shape, generator=generator).to(device)
    targets = torch.randint(0, spec.vocab_size, shape, generator=generator).to(device)
    optimizer, local = make_optimizer(cell["optimizer"], params, cell.get("student"))
    memory: list[dict] = []
    saved = SavedBytes(params)
    first = {}

    def step() -> dict:
        timer, mem = PhaseTimer(str(device)), {}
        optimizer.zero_grad(set_to_none=True)
        synchronize(str(device))
        start = _allocated(device)
        _reset_peak(device)
        # the first step also counts the tensors autograd saves (the hooks cost nothing measurable)
        counting = torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda t: t) if not memory else nullcontext()
        with timer.phase("forward_backward"):
            with counting:
                loss = cross_entropy(model(tokens), targets)  # logits (batch, seq, vocab)
            loss.backward()
        with timer.phase("all_reduce"):
            _average_gradients(params, world)
        mem["before_step"] = _allocated(device)
        mem["grad_bytes"] = sum(tensor_bytes(p.grad) for p in params if p.grad is not None)
        _reset_peak(device)
        with timer.phase("optimizer_step"):
            optimizer.step()
        mem["after_step"] = _allocated(device)
        mem["start"] = start
        if not memory:  # the first step allocates the optimizer state
            first["state_allocated"] = (mem["after_step"]["current"] - mem["before_step"]["current"]
                                        if mem["after_step"] else None)
        memory.append(mem)
        return timer.times

    times = time_steps(step, cell["warmup_steps"], cell["measured_steps"], str(device))
    param_bytes = sum(tensor_bytes(p) for p in params)
    state, owned = held_state(local())
    sharded = cell["optimizer"] in ("sharded", "zero")  # what the student's sends is its own: not counted
    checksum = float(sum(p.detach().double().sum() for p in params))
    return {
        "rank": rank, "device": str(device), "model": model_info if rank == 0 else None,
        "times_s": times, "stats_s": summarize(times["measured_s"]),
        "phase_stats_s": {k: summarize(v) for k, v in times["phases_s"].items()},
        "memory_after_init": after_init, "memory_steps": memory,
        "state_allocated_first_step": first.get("state_allocated"),
        "tensors": {"parameters": param_bytes, "gradients": memory[-1]["grad_bytes"],
                    "optimizer_state": state, "saved_activations": saved.total},
        "params": sum(p.numel() for p in params), "owned_params": owned,
        "issued_bytes": {"all_reduce": memory[-1]["grad_bytes"],
                         "broadcast": param_bytes if sharded else 0 if cell["optimizer"] == "adamw" else None,
                         "broadcast_owned": 4 * owned if sharded else 0 if cell["optimizer"] == "adamw" else None},
        "param_checksum": checksum,
        "optimizer_class": class_name(optimizer),
    }


def _topology() -> str | None:
    try:
        return subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=20).stdout or None
    except (OSError, subprocess.SubprocessError):
        return None


def run(cell: dict) -> dict:
    world, backend = cell["world_size"], cell["backend"]
    provenance = "built-in"
    if cell["optimizer"] == "student":  # a missing adapter fails here, before any process starts
        provenance = student_optimizer(cell.get("student")).provenance
    with adapter_errors():  # the student's optimizer not implemented in a rank: the cell's status
        ranks = launch(_rank, world, backend=backend, args=(cell,), timeout_s=cell.get("timeout_s", 900))
    spec = ModelSpec(**cell["model"])
    n = ranks[0]["params"]
    analytic = data_parallel_bytes(n, world)
    acts = accounting.saved_activation_bytes(spec, cell["batch_size"], cell["context"], cell["implementation"])
    cuda = backend == "nccl"
    return {
        "model": ranks[0]["model"], "params": n, "params_expected": accounting.param_count(spec),
        "world_size": world, "backend": backend, "global_batch": cell["global_batch"],
        "batch_per_rank": cell["batch_size"],
        "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
        "interconnect": _topology() if cuda else None,
        "ranks": ranks, "optimizer_class": ranks[0]["optimizer_class"], "provenance": provenance,
        "analytic": {**analytic, "saved_activations": acts["total"],
                     "logits": 4 * cell["batch_size"] * cell["context"] * spec.vocab_size},
    }


