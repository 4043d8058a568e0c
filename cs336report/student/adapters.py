"""The handout's adapter functions (``tests/adapters.py`` of the assignment), returning ours.

These are the built-in implementations under the same names and signatures a student's
checkout defines, for both editions of the handout (2025's names in :data:`NAMES`, 2026's in
:data:`NAMES_2026`; the two share the FlashAttention-2 and sharded-optimizer adapters), so that the resolver (:mod:`cs336report.student.resolve`) and the handout suite
(:mod:`cs336report.handout_suite`) reach ours and a student's the same way. The distributed
pieces are imported when an adapter is called: where their module is missing, the adapter
raises ``NotImplementedError``, as an unfinished student adapter does.

    from cs336report.student import adapters
    Flash = adapters.get_flashattention_autograd_function_pytorch()
    o = Flash.apply(q, k, v, True)            # q, k, v: (batch, seq, d)
"""

from __future__ import annotations

import importlib
import importlib.util

import torch

# Every adapter of the handout's tests/adapters.py, in its order.
NAMES = (
    "get_flashattention_autograd_function_pytorch",
    "get_flashattention_autograd_function_triton",
    "get_ddp_individual_parameters",
    "ddp_individual_parameters_on_after_backward",
    "get_ddp_bucketed",
    "ddp_bucketed_on_after_backward",
    "ddp_bucketed_on_train_batch_start",
    "get_sharded_optimizer",
)
# The 2026 edition's tests/adapters.py, in its order: one overlapping DDP, and FSDP.
NAMES_2026 = (
    "get_flashattention_autograd_function_pytorch",
    "get_flashattention_autograd_function_triton",
    "get_ddp",
    "ddp_on_after_backward",
    "get_fsdp",
    "fsdp_on_after_backward",
    "fsdp_gather_full_params",
    "get_sharded_optimizer",
)


def _load(module: str, name: str, adapter: str):
    """``module.name`` of this package, or NotImplementedError naming the adapter if it is missing."""
    try:
        return getattr(importlib.import_module(module, __package__), name)
    except (ImportError, AttributeError) as exc:
        where = importlib.util.resolve_name(module, __package__)
        raise NotImplementedError(f"{adapter}: {where}.{name} is not available ({exc})") from None


def get_flashattention_autograd_function_pytorch() -> type:
    """FlashAttention-2 as a torch.autograd.Function in plain PyTorch (tiled forward, recomputing backward)."""
    from ..flash import FlashAttention2PyTorch

    return FlashAttention2PyTorch


def get_flashattention_autograd_function_triton() -> type:
    """FlashAttention-2 as a torch.autograd.Function with Triton forward and backward kernels."""
    from ..flash.triton_kernels import FlashAttention2Triton

    return FlashAttention2Triton


def get_ddp_individual_parameters(module: torch.nn.Module) -> torch.nn.Module:
    """DDP that all-reduces each parameter's gradient asynchronously as backward produces it."""
    return _load("..distributed.ddp", "DDPIndividualParameters", "get_ddp_individual_parameters")(module)


def ddp_individual_parameters_on_after_backward(ddp_model: torch.nn.Module, optimizer: torch.optim.Optimizer):
    """After backward, before the optimizer step: wait for the gradients' all-reduces."""
    ddp_model.finish_gradient_synchronization()


def get_ddp_bucketed(module: torch.nn.Module, bucket_size_mb: float) -> torch.nn.Module:
    """DDP that all-reduces gradients in buckets of at most ``bucket_size_mb`` MB."""
    return _load("..distributed.ddp", "DDPBucketed", "get_ddp_bucketed")(module, bucket_size_mb)


def ddp_bucketed_on_after_backward(ddp_model: torch.nn.Module, optimizer: torch.optim.Optimizer):
    """After backward, before the optimizer step: wait for the buckets' all-reduces."""
    ddp_model.finish_gradient_synchronization()


def ddp_bucketed_on_train_batch_start(ddp_model: torch.nn.Module, optimizer: torch.optim.Optimizer):
    """At the start of a training step: reset the buckets, where the wrapper needs it."""
    start = getattr(ddp_model, "on_train_batch_start", None)
    if start is not None:
        start()


def get_ddp(module: torch.nn.Module) -> torch.nn.Module:
    """2026: DDP that all-reduces each parameter's gradient asynchronously as backward produces it."""
    return _load("..distributed.ddp", "DDPIndividualParameters", "get_ddp")(module)


def ddp_on_after_backward(ddp_model: torch.nn.Module, optimizer: torch.optim.Optimizer):
    """2026: after backward, before the optimizer step: wait for the gradients' all-reduces."""
    ddp_model.finish_gradient_synchronization()


def get_fsdp(module: torch.nn.Module, compute_dtype: torch.dtype | None = None) -> torch.nn.Module:
    """2026: ``module`` with its Linear and Embedding weights sharded over the ranks; with
    ``compute_dtype``, gathered and computed in that dtype over fp32 master weights."""
    return _load("..distributed.fsdp", "FSDP", "get_fsdp")(module, compute_dtype=compute_dtype)


def fsdp_on_after_backward(fsdp_model: torch.nn.Module, optimizer: torch.optim.Optimizer):
    """2026: after backward, before the optimizer step: wait for the reduce-scatters and all-reduces."""
    fsdp_model.finish_gradient_synchronization()


def fsdp_gather_full_params(fsdp_model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """2026: every parameter of the wrapped module by name, full (a collective: every rank calls it)."""
    return fsdp_model.gather_full_params()


def get_sharded_optimizer(params, optimizer_cls: type[torch.optim.Optimizer], **kwargs) -> torch.optim.Optimizer:
    """``optimizer_cls`` with its state sharded over the ranks (each rank steps its own share)."""
    return _load("..distributed.sharded_optimizer", "ShardedOptimizer", "get_sharded_optimizer")(
        params, optimizer_cls, **kwargs)
