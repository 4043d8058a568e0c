"""Which Transformer an experiment runs: the built-in one, or a user's own factory.

Every experiment builds its model through :func:`build_model`, so a config that names a
user's factory (``model.factory: "package.module:Callable"``, Assignment 1's
``BasicsTransformerLM(vocab_size, context_length, d_model, num_layers, num_heads, d_ff,
rope_theta)`` signature) changes every section at once. The model is constructed directly
on the target device.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
from pathlib import Path

import torch
from torch import nn

from .model import ModelSpec, TransformerLM

FACTORY_ARGS = ("vocab_size", "context_length", "d_model", "num_layers", "num_heads", "d_ff", "rope_theta")


class ModelError(ValueError):
    """A configured model that cannot be used; the message says what to fix."""


def resolve(path: str, what: str = "model.factory"):
    """Import ``package.module:attribute``."""
    if ":" not in path:
        raise ModelError(f"{what}: {path!r} must look like 'package.module:name'")
    module_name, attr = path.split(":", 1)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ModelError(
            f"{what}: cannot import module {module_name!r} ({exc}); install the package that provides it "
            f"(e.g. pip install -e path/to/your/cs336_basics) in the environment that runs snakemake"
        ) from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ModelError(f"{what}: module {module_name!r} has no attribute {attr!r}") from None


def check_factory(factory, path: str) -> None:
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return
    missing = [a for a in FACTORY_ARGS if a not in params]
    if missing:
        raise ModelError(
            f"model.factory: {path} does not take {', '.join(missing)}; it must accept "
            f"({', '.join(FACTORY_ARGS)}) by keyword, like Assignment 1's BasicsTransformerLM"
        )


def source_info(obj) -> dict:
    """Import path, file and a hash of the source of a model class or function."""
    try:
        file = inspect.getsourcefile(obj)
        digest = hashlib.sha256(Path(file).read_bytes()).hexdigest()[:16] if file else None
    except (TypeError, OSError):
        file, digest = None, None
    return {"object": f"{obj.__module__}:{obj.__qualname__}", "file": file, "sha256_16": digest}


def build_model(cell: dict) -> tuple[nn.Module, dict]:
    """The model of ``cell`` on its device, and a description of it for the result."""
    spec = ModelSpec(**cell["model"])
    device = cell["device"]
    factory_path = (cell.get("model_source") or {}).get("factory")
    if not factory_path:
        model = TransformerLM(spec, cell["context"], impl=cell.get("implementation", "naive"), device=device)
        return model, {"kind": "builtin", "implementation": cell.get("implementation", "naive"),
                       **source_info(TransformerLM)}
    factory = resolve(factory_path)
    check_factory(factory, factory_path)
    with torch.device(device):
        model = factory(vocab_size=spec.vocab_size, context_length=cell["context"], d_model=spec.d_model,
                        num_layers=spec.num_layers, num_heads=spec.num_heads, d_ff=spec.d_ff,
                        rope_theta=spec.rope_theta)
    if not isinstance(model, nn.Module):
        raise ModelError(f"model.factory: {factory_path} returned {type(model).__name__}, not a torch.nn.Module")
    return model.to(device), {"kind": "user", **source_info(factory)}
