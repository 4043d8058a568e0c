"""bf16 autocast against fp32: step times, peak memory, and what the autograd graph keeps.

Three experiments, all running the configured Transformer:

* ``benchmarking_bf16`` -- the benchmarking grid (sizes x contexts x modes, by default those
  of ``grids.<gpu|cpu>.benchmarking``) in fp32 and under bf16 autocast. A cell the
  ``benchmarking`` experiment already runs (every fp32 cell of its grid) is not listed again:
  the report takes it from there.
* ``autocast_memory`` -- peak memory and time of a smaller grid (by default small and 2.7B at
  contexts 128/256/512, forward and forward+backward) for both model implementations, fp32
  and bf16. Cells already run by ``benchmarking`` or ``benchmarking_bf16`` are not repeated.
  Both measure with :func:`cs336report.experiments.benchmarking.run`.
* ``autocast_saved_tensors`` -- one forward pass (with the loss, gradients enabled) per
  context and precision, then a walk over the autograd graph that lists every tensor kept
  for the backward pass: which operation saved it, its dtype, its bytes, and whether it is a
  parameter, a low-precision copy of a parameter, or an activation. One cell per
  (implementation, size); it runs on CPU as well as CUDA.

    python -m cs336report cells autocast_memory
"""

from __future__ import annotations

import torch

from . import benchmarking
from ..measure.timing import is_out_of_memory, release_memory
from ..model import ModelSpec, cross_entropy
from ..models import build_model
from .benchmarking import autocast_context, cell_name, set_tf32, transformer_cell

GRID_KEYS = ("implementations", "precisions", "sizes", "contexts", "modes")


def _new_cells(candidates: list[dict], *taken: dict[str, dict]) -> dict[str, dict]:
    """The candidates that no experiment in ``taken`` already runs with the same settings."""
    out = {}
    for cell in candidates:
        name = cell_name(cell)
        if not any(existing.get(name) == cell for existing in taken):
            out[name] = cell
    return out


def bf16_grid(cfg) -> dict | None:
    """The resolved grid of benchmarking_bf16: its own keys, else those of the benchmarking grid."""
    grid = cfg.grid("benchmarking_bf16")
    if grid is None:
        return None
    base = cfg.grid("benchmarking") or {}
    resolved = {key: grid.get(key) or base.get(key) for key in GRID_KEYS}
    resolved["implementations"] = resolved["implementations"] or [cfg.run["implementation"]]
    resolved["modes"] = resolved["modes"] or list(benchmarking.MODES)
    return resolved


def bf16_cells(cfg) -> dict[str, dict]:
    grid = bf16_grid(cfg)
    if grid is None:
        return {}
    return _new_cells(benchmarking.grid_cells(cfg, grid), benchmarking.cells(cfg))


def memory_cells(cfg) -> dict[str, dict]:
    grid = cfg.grid("autocast_memory")
    if grid is None:
        return {}
    return _new_cells(benchmarking.grid_cells(cfg, grid), benchmarking.cells(cfg), bf16_cells(cfg))


# ---------------------------------------------------------------------------
# What the autograd graph keeps for backward
# ---------------------------------------------------------------------------


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


def census_cells(cfg) -> dict[str, dict]:
    grid = cfg.grid("autocast_memory")
    if grid is None or not grid["saved_tensors"]:
        return {}
    out = {}
    for impl in grid["implementations"]:
        for size in grid["sizes"]:
            cell = transformer_cell(cfg, size, max(grid["contexts"]), "forward", "fp32", impl,
                                    contexts=list(grid["contexts"]), precisions=list(grid["precisions"]))
            del cell["precision"], cell["warmup_steps"], cell["measured_steps"]
            out[f"{impl}-{size}-census"] = cell
    return out


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


EXPERIMENTS = {
    "benchmarking_bf16": (bf16_cells, benchmarking.run),
    "autocast_memory": (memory_cells, benchmarking.run),
    "autocast_saved_tensors": (census_cells, run_census),
}
