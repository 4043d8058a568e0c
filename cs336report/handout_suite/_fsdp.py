"""The processes of the FSDP cases: each rank trains a small language model through the FSDP
adapters on its half of every batch, beside single-process references, and writes what it saw.

    run_fsdp_ranks(tmp_path, "correctness", None)      # -> one dict per rank

The model is the handout's test model (an Embedding, two RMSNorms, three Linears, no attention),
built from ``cs336_basics.model`` when that package is importable, as the handout's own test run
builds it, and from cs336report's model otherwise. Two references train beside it, both on the
whole batch with the same SGD steps:

- ``whole``: one forward and backward over all rows at once.
- ``split``: one backward per rank's half, gradients averaged: the same sums the ranks make,
  so an FSDP that loses nothing in its collectives matches it exactly in fp32.

With ``compute_dtype`` the references compute with their Linear and Embedding weights cast to that
dtype (forward and backward), accumulating gradients into fp32 weights, as FSDP's mixed precision
does. Ranks start from the same weights (one seed), as in the handout's tests.
"""

from __future__ import annotations

import copy
import json
import os
import types
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ._distributed import start_ranks

WORLD_SIZE = 2
VOCAB, D_MODEL, D_FF = 100, 64, 128
BATCH, SEQ, STEPS, LR = 20, 8, 3, 0.01
RTOL = 1e-4  # the handout's relative tolerance with fp16 compute
SYNC_BATCH = 4  # rows per rank in the gradient-synchronization case
SHARDED_CLASSES = ("Linear", "Embedding")  # the handout shards these and replicates the rest
DTYPES = {"fp32": None, "fp16": torch.float16}
ADAPTERS = ("get_fsdp", "fsdp_on_after_backward", "fsdp_gather_full_params")


def fsdp_adapters():
    """The three FSDP adapters: the adapters module's where it defines them; otherwise, with no
    checkout under test, cs336report's FSDP through the same three calls; None for a checkout
    whose adapters have none (an edition without FSDP)."""
    from . import CHECKOUT_ENV, adapters

    a = adapters()
    if all(hasattr(a, name) for name in ADAPTERS):
        return a
    if os.environ.get(CHECKOUT_ENV):
        return None
    from ..distributed.fsdp import FSDP

    return types.SimpleNamespace(
        get_fsdp=FSDP,
        fsdp_on_after_backward=lambda model, _optimizer: model.finish_gradient_synchronization(),
        fsdp_gather_full_params=lambda model: model.gather_full_params())


def layer_classes() -> tuple[type, type, type, str]:
    """(Embedding, Linear, RMSNorm, where from): the course's classes if importable, else ours."""
    try:
        from cs336_basics.model import Embedding, Linear, RMSNorm

        return Embedding, Linear, RMSNorm, "cs336_basics.model"
    except ImportError:
        from ..lm.model import Embedding, Linear, RMSNorm

        return Embedding, Linear, RMSNorm, "cs336report.lm.model"


class ToyLM(nn.Module):
    """Embedding, RMSNorm, Linear up, ReLU, RMSNorm, Linear down, Linear to the vocabulary."""

    def __init__(self):
        super().__init__()
        Embedding, Linear, RMSNorm, _ = layer_classes()
        self.embedding = Embedding(VOCAB, D_MODEL)
        self.norm1 = RMSNorm(D_MODEL)
        self.linear1 = Linear(D_MODEL, D_FF)
        self.norm2 = RMSNorm(D_FF)
        self.linear2 = Linear(D_FF, D_MODEL)
        self.lm_head = Linear(D_MODEL, VOCAB)

    def forward(self, ids):  # (batch, seq) -> (batch, seq, VOCAB)
        x = self.linear1(self.norm1(self.embedding(ids)))
        return self.lm_head(self.linear2(self.norm2(torch.relu(x))))


def sharded_names(model: nn.Module) -> set[str]:
    """Names of the weights the handout expects sharded (Linear and Embedding weights)."""
    return {f"{name}.weight" for name, m in model.named_modules() if type(m).__name__ in SHARDED_CLASSES}


def _forward(model: nn.Module, ids: torch.Tensor, compute_dtype) -> torch.Tensor:
    if compute_dtype is None:
        return model(ids)
    params = dict(model.named_parameters())
    cast = {name: params[name].to(compute_dtype) for name in sharded_names(model)}
    return torch.func.functional_call(model, cast, (ids,))


def _loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits[:, -1, :].float(), labels)  # the last position's prediction


def reference_grads(model: nn.Module, pieces, compute_dtype) -> None:
    """Fill ``model``'s gradients with the mean of one backward per (ids, labels) piece."""
    model.zero_grad(set_to_none=True)
    for ids, labels in pieces:
        _loss(_forward(model, ids, compute_dtype), labels).backward()
    if len(pieces) > 1:
        for p in model.parameters():
            p.grad.div_(len(pieces))


def _batches():
    gen = torch.Generator().manual_seed(123)
    for _ in range(STEPS):
        yield torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen), torch.randint(0, VOCAB, (BATCH,), generator=gen)


def _distance(full: dict, model: nn.Module) -> tuple[float, float]:
    """(largest |gathered - reference|, largest amount by which it exceeds RTOL * |reference|)."""
    missing = [n for n, _ in model.named_parameters() if n not in full]
    if missing:
        raise AssertionError(f"fsdp_gather_full_params returned no {missing}")
    worst_abs, worst_excess = 0.0, float("-inf")
    for name, p in model.named_parameters():
        reference = p.detach().float()
        diff = (full[name].detach().float().cpu() - reference).abs()
        worst_abs = max(worst_abs, float(diff.max()))
        worst_excess = max(worst_excess, float((diff - RTOL * reference.abs()).max()))
    return worst_abs, worst_excess


def _parameter_bytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _correctness(rank: int, a, compute_dtype) -> dict:
    torch.manual_seed(42)
    base = ToyLM()
    whole, split = copy.deepcopy(base), copy.deepcopy(base)
    fsdp = a.get_fsdp(copy.deepcopy(base), compute_dtype=compute_dtype)
    fraction = _parameter_bytes(fsdp.module) / _parameter_bytes(base)  # what this rank holds of the model
    optimizer = torch.optim.SGD(fsdp.parameters(), lr=LR)
    references = [(m, torch.optim.SGD(m.parameters(), lr=LR)) for m in (whole, split)]
    errors = {"whole": 0.0, "whole_excess": float("-inf"), "split": 0.0}
    share = BATCH // WORLD_SIZE
    for ids, labels in _batches():
        halves = [(ids[r * share:(r + 1) * share], labels[r * share:(r + 1) * share]) for r in range(WORLD_SIZE)]
        for (model, opt), pieces in zip(references, ([(ids, labels)], halves)):
            reference_grads(model, pieces, compute_dtype)
            opt.step()
        optimizer.zero_grad(set_to_none=True)
        _loss(fsdp(halves[rank][0]), halves[rank][1]).backward()
        a.fsdp_on_after_backward(fsdp, optimizer)
        optimizer.step()
        full = a.fsdp_gather_full_params(fsdp)
        (whole_abs, whole_excess), (split_abs, _) = (_distance(full, m) for m, _ in references)
        errors = {"whole": max(errors["whole"], whole_abs), "whole_excess": max(errors["whole_excess"], whole_excess),
                  "split": max(errors["split"], split_abs)}
    return {**errors, "parameter_fraction": fraction, "layers": layer_classes()[3]}


def _gradient_sync(rank: int, a, compute_dtype) -> dict:
    torch.manual_seed(42)
    base = ToyLM()
    reference = copy.deepcopy(base)
    fsdp = a.get_fsdp(copy.deepcopy(base), compute_dtype=compute_dtype)
    inputs = [torch.randint(0, VOCAB, (SYNC_BATCH, SEQ), generator=torch.Generator().manual_seed(r))
              for r in range(WORLD_SIZE)]  # each rank's own rows; every rank can make every rank's
    fsdp(inputs[rank]).float().sum().backward()
    a.fsdp_on_after_backward(fsdp, torch.optim.SGD(fsdp.parameters(), lr=LR))
    problems = []
    for name, p in fsdp.module.named_parameters():
        if not p.requires_grad:
            continue
        if p.grad is None:
            problems.append(f"{name}: no gradient")
        elif p.grad.shape != p.shape or p.grad.dtype != p.dtype:
            problems.append(f"{name}: gradient {tuple(p.grad.shape)} {p.grad.dtype}, "
                            f"parameter {tuple(p.shape)} {p.dtype}")
    reference.zero_grad(set_to_none=True)
    for ids in inputs:  # the mean over ranks of each rank's gradient
        _forward(reference, ids, compute_dtype).float().sum().backward()
    expected = {n: p.grad / WORLD_SIZE for n, p in reference.named_parameters()}
    across, from_mean = 0.0, 0.0
    replicated = [(n, p) for n, p in fsdp.module.named_parameters()
                  if p.requires_grad and p.grad is not None and n not in sharded_names(fsdp.module)]
    for name, p in replicated:
        gathered = [torch.zeros_like(p.grad) for _ in range(WORLD_SIZE)]
        dist.all_gather(gathered, p.grad)
        across = max(across, max(float((g - gathered[0]).abs().max()) for g in gathered))
        from_mean = max(from_mean, float((p.grad.float().cpu() - expected[name]).abs().max()))
    return {"problems": problems, "replicated": [n for n, _ in replicated],
            "across_ranks": across, "from_mean": from_mean}


CASES = {"correctness": _correctness, "gradient_sync": _gradient_sync}


def _rank(rank: int, world_size: int, store: str, out: str, case: str, dtype_name: str) -> None:
    # a forked rank inherits the test's warning filters; the handout's ranks are new processes, where a
    # warning is printed, not raised
    warnings.resetwarnings()
    torch.use_deterministic_algorithms(True)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world_size)
    try:
        result = CASES[case](rank, fsdp_adapters(), DTYPES[dtype_name])
        Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def run_fsdp_ranks(tmp_path: Path, case: str, dtype_name: str) -> list[dict]:
    """Run ``case`` ("correctness" or "gradient_sync") with ``dtype_name`` ("fp32" or "fp16") on
    WORLD_SIZE gloo processes; what each rank wrote, in rank order."""
    start_ranks(_rank, (WORLD_SIZE, str(tmp_path / "store"), str(tmp_path), case, dtype_name), WORLD_SIZE)
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD_SIZE)]
