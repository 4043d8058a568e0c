"""benchmarking_mixed_precision (d): what the autograd graph keeps for backward, fp32 against bf16
autocast: one forward pass with the loss per context and precision, then a walk over the graph that
lists every saved tensor (the operation that saved it, its dtype, its bytes, and whether it is a
parameter, a low-precision copy of one, or an activation).
"""

from __future__ import annotations

import torch

from ...lm.build import build_model
from ...lm.model import ModelSpec, cross_entropy
from ...measure.timing import is_out_of_memory, release_memory
from ..benchmarking_script.step import autocast_context, set_tf32


def _graph_nodes(root):
    """Every autograd node reachable from ``root``, each once."""
    seen, stack = set(), [root]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        yield node
        stack.extend(fn for fn, _ in node.next_functions)


def _saved(node):
    """(attribute, tensor) pairs a node saved for backward (its ``_saved_*`` attributes)."""
    for attr in dir(node):
        if not attr.startswith("_saved_"):
            continue
        try:
            value = getattr(node, attr)
        except RuntimeError:  # already freed
            continue
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, torch.Tensor):
                yield attr, item


def _is_copy_of(tensor: torch.Tensor, param: torch.Tensor) -> bool:
    """True if ``tensor`` holds ``param`` (or its transpose) rounded to ``tensor.dtype``."""
    if tensor.numel() != param.numel() or tensor.dtype == param.dtype:
        return False
    shape = [s for s in tensor.shape if s != 1] or [1]
    p = param.detach()
    candidates = [p] + ([p.t()] if p.dim() == 2 else [])
    return any(
        list(c.shape) == shape and torch.equal(tensor.reshape(c.shape), c.to(tensor.dtype)) for c in candidates
    )


def saved_tensor_census(loss: torch.Tensor, model: torch.nn.Module) -> list[dict]:
    """The tensors ``loss``'s graph keeps for backward, one per storage, grouped.

    Returns rows of ``{"op", "dtype", "role", "bytes", "count", "largest_bytes",
    "largest_shape"}`` where ``op`` is the autograd node that saved the storage first on the
    way back from the loss, and ``role`` is ``parameter`` (the storage is a parameter's: no
    memory of its own), ``parameter_copy`` (a parameter rounded to a lower precision),
    ``activation`` (any other floating-point tensor) or ``index`` (integer and boolean
    tensors). ``bytes`` counts each storage once, whole.
    """
    params = list(model.parameters())
    param_storages = {p.untyped_storage().data_ptr() for p in params}
    by_numel: dict[int, list[torch.Tensor]] = {}
    for p in params:
        by_numel.setdefault(p.numel(), []).append(p)
    seen: set[int] = set()
    groups: dict[tuple, dict] = {}
    for node in _graph_nodes(loss.grad_fn):
        for _, tensor in _saved(node):
            storage = tensor.untyped_storage()
            ptr = storage.data_ptr()
            if ptr in seen or storage.nbytes() == 0:
                continue
            seen.add(ptr)
            if ptr in param_storages:
                role = "parameter"
            elif not tensor.is_floating_point():
                role = "index"
            elif any(_is_copy_of(tensor, p) for p in by_numel.get(tensor.numel(), [])):
                role = "parameter_copy"
            else:
                role = "activation"
            key = (node.name(), str(tensor.dtype).removeprefix("torch."), role)
            group = groups.setdefault(key, {"op": key[0], "dtype": key[1], "role": role, "bytes": 0,
                                            "count": 0, "largest_bytes": 0, "largest_shape": []})
            group["bytes"] += storage.nbytes()
            group["count"] += 1
            if storage.nbytes() > group["largest_bytes"]:
                group["largest_bytes"], group["largest_shape"] = storage.nbytes(), list(tensor.shape)
    return sorted(groups.values(), key=lambda g: -g["bytes"])


def run_census(cell: dict) -> dict:
    """For each context and precision: one forward with the loss, then the saved-tensor census."""
    device = cell["device"]
    set_tf32(cell["tf32"])
    torch.manual_seed(cell["seed"])
    spec = ModelSpec(**cell["model"])
    model, model_info = build_model(cell)
    cuda = device.startswith("cuda")
    cases = []
    for context in cell["contexts"]:
        tokens = torch.randint(0, spec.vocab_size, (cell["batch_size"], context), device=device)  # (batch, seq)
        targets = torch.randint(0, spec.vocab_size, (cell["batch_size"], context), device=device)
        for precision in cell["precisions"]:
            case = {"context": context, "precision": precision, "status": "ok", "error": None, "groups": [],
                    "allocated_before_bytes": None, "allocated_after_forward_bytes": None}
            logits = loss = None
            try:
                if cuda:
                    torch.cuda.synchronize()
                    case["allocated_before_bytes"] = torch.cuda.memory_allocated()
                with autocast_context(device, precision):
                    logits = model(tokens)  # (batch, seq, vocab)
                    loss = cross_entropy(logits, targets)
                if cuda:
                    torch.cuda.synchronize()
                    case["allocated_after_forward_bytes"] = torch.cuda.memory_allocated()
                case["logits_bytes"] = logits.untyped_storage().nbytes()
                case["logits_dtype"] = str(logits.dtype).removeprefix("torch.")
                case["groups"] = saved_tensor_census(loss, model)
            except Exception as exc:  # an OOM in one case still leaves the others
                if not is_out_of_memory(exc):
                    raise
                case["status"], case["error"] = "oom", f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            finally:
                del logits, loss
                release_memory(device)
                if cuda:
                    torch.cuda.empty_cache()
            case["saved_bytes"] = sum(g["bytes"] for g in case["groups"] if g["role"] != "parameter")
            cases.append(case)
    return {
        "model": model_info,
        "params": sum(p.numel() for p in model.parameters()),
        "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "grad_mode": "enabled",
        "cases": cases,
    }
