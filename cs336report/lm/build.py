"""Which Transformer an experiment runs: the built-in one, or a user's own factory.

Every experiment builds its model through :func:`build_model`, so a config that names a
user's factory changes every section at once::

    model:
      factory: cs336_basics.model:BasicsTransformerLM      # Assignment 1's signature
      attention: cs336_basics.model:scaled_dot_product_attention   # optional
      softmax: cs336_basics.nn_utils:softmax                        # optional

The factory is called as ``factory(vocab_size=, context_length=, d_model=, num_layers=,
num_heads=, d_ff=, rope_theta=)`` under ``torch.device(device)`` and must return an
``nn.Module`` mapping int token ids (batch, seq) to logits (batch, seq, vocab_size).

The model's check before any cell is :mod:`cs336report.lm.check`.

:func:`instrumented` wraps the named attention and softmax functions in profiler ranges
(:data:`ATTENTION_RANGE`, :data:`SOFTMAX_RANGE`) for the duration of a run: each is
replaced at its module attribute, and at every alias of it that the user's package holds
(``from .nn_utils import softmax``), and restored afterwards. The runner applies it to
every cell, so an experiment only calls :func:`build_model`.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import re
import sys
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from ..accounting import transformer as accounting
from ..config.checkout import files_hash, package_files
from . import fit_check
from ..measure import annotate
from . import staff
from .model import ModelSpec, TransformerLM
from .model_paths import (  # noqa: F401  (ModelError, resolve and the checks: callers reach them here)
    ModelError,
    _owner,
    _split,
    add_paths,
    check_factory,
    resolve,
)

# Ranges around the user's functions; nested, so softmax time is inside attention time.
ATTENTION_RANGE = "scaled_dot_product_attention"
SOFTMAX_RANGE = "softmax"
ROLES = {"attention": ATTENTION_RANGE, "softmax": SOFTMAX_RANGE}


_MARK = "__cs336report_range__"


# --------------------------------------------------------------------------- provenance


def source_info(obj) -> dict:
    """Import path, file and a hash of the source file of a model class or function."""
    try:
        file = inspect.getsourcefile(obj)
        digest = hashlib.sha256(Path(file).read_bytes()).hexdigest()[:16] if file else None
    except (TypeError, OSError):
        file, digest = None, None
    from ..records.store import portable_path  # the machine's folders stay out of the record

    return {"object": f"{obj.__module__}:{obj.__qualname__}", "file": portable_path(file, obj.__module__), "sha256_16": digest}


def package_source(module_name: str) -> dict:
    """A hash over every ``.py`` file of ``module_name``'s top-level package (its folder).

    Editing any file of the user's package (not only the factory's) changes it, and the
    cells carry it, so a cell whose model code changed is rerun.
    """
    top = module_name.split(".")[0]
    module = sys.modules.get(top) or importlib.import_module(top)
    roots = [Path(p) for p in getattr(module, "__path__", [])]
    files = package_files(roots, Path(module.__file__) if getattr(module, "__file__", None) else None)
    return {"package": top, "files": len(files), "sha256_16": files_hash(files)}


def param_counts(model: nn.Module, spec: ModelSpec) -> dict:
    """Measured parameter count (shared tensors once) beside the reference architecture's."""
    measured = sum(p.numel() for p in model.parameters())
    expected = accounting.param_count(spec)
    return {"params": measured, "params_expected": expected, "params_match": measured == expected}


def attention_ranges(kind: str, implementation: str | None = None, source: dict | None = None) -> dict:
    """The profiler ranges a model emits inside attention, and what they cannot separate."""
    if kind == "builtin":
        if implementation == "native":
            return {"ranges": ["scaled_dot_product_attention"],
                    "not_separated": ["attention_scores", "softmax", "attention_value"]}
        return {"ranges": list(annotate.ATTENTION_RANGES), "not_separated": []}
    source = source or {}
    ranges = [ROLES[r] for r in ("attention", "softmax") if source.get(r)]
    if source.get("attention"):
        rest = ["attention_scores", "attention_value"] + ([] if source.get("softmax") else ["softmax"])
    else:
        rest = ["attention_scores", "attention_value"]
    return {"ranges": ranges, "not_separated": rest}


def _file_tail(path: str | None, parts: int = 2) -> str | None:
    """The last ``parts`` components of a path: frames recorded on another host end the same way."""
    if not path:
        return None
    return "/".join(Path(path).parts[-parts:])


def snapshot_options(cell: dict) -> dict:
    """Keyword arguments for ``parsers.snapshot.parse_snapshot`` that fit the cell's model.

    For a user's model: its package counts as model code even when installed under
    site-packages (``user_code``), frames inside the configured softmax are ``Softmax``, and
    frames inside the configured attention function are ``AttnScores`` before the line that
    calls the softmax and ``AttnOut`` after it (``categories``). The built-in model needs
    nothing beyond the parser's default rules.

        parse_snapshot(path, **snapshot_options(cell))
    """
    from ..parsers.snapshot import Rule

    source = cell.get("model_source") or {}
    if not source.get("factory"):
        return {}
    add_paths(source.get("paths"))
    package = _split(source["factory"], "model.factory")[0].split(".")[0]
    options: dict = {"user_code": ["cs336", rf"(^|[/\\]){package}([/\\]|\.py$)"], "categories": []}
    functions = {role: inspect.unwrap(resolve(source[role], f"model.{role}")) for role in ROLES if source.get(role)}
    for role, fn in functions.items():
        tail = _file_tail(inspect.getsourcefile(fn))
        if tail and re.escape(tail) + "$" not in options["user_code"]:
            options["user_code"].append(re.escape(tail) + "$")
    if "softmax" in functions:
        fn = functions["softmax"]
        tail = _file_tail(inspect.getsourcefile(fn)) or ""
        options["categories"].append(Rule("Softmax", func=re.escape(fn.__name__), file=re.escape(tail) + "$",
                                          user_only=False))
    if "attention" in functions:
        fn = functions["attention"]
        tail = _file_tail(inspect.getsourcefile(fn)) or ""
        lines, start = inspect.getsourcelines(fn)
        called = functions["softmax"].__name__ if "softmax" in functions else r"\w*softmax"
        split = next((start + i for i, text in enumerate(lines) if re.search(rf"\b{called}\s*\(", text)), None)
        if split is not None:
            def inside(f, name=fn.__name__, tail=tail):
                return f.name == name and f.filename.replace("\\", "/").endswith(tail)

            options["categories"] += [
                Rule("AttnScores", predicate=lambda f, s=split: inside(f) and f.line < s, user_only=False),
                Rule("AttnOut", predicate=lambda f, s=split: inside(f) and f.line > s, user_only=False),
            ]
    return options


# --------------------------------------------------------------------------- instrumenting


def _ranged(fn, range_name: str, role: str, calls: dict | None):
    @functools.wraps(fn)
    def ranged(*args, **kwargs):
        if calls is not None:
            calls[role] = calls.get(role, 0) + 1
        if not annotate.enabled():
            return fn(*args, **kwargs)
        with annotate.region(range_name):
            return fn(*args, **kwargs)

    setattr(ranged, _MARK, range_name)
    return ranged


def _packages(*module_names: str) -> set[str]:
    return {m.split(".")[0] for m in module_names if m} - {"torch", "builtins"}


def _patch(path: str, role: str, packages: set[str], calls: dict | None) -> list[tuple]:
    """Replace the function at ``path`` and its aliases in ``packages``; return what to restore."""
    what = f"model.{role}"
    owner, name = _owner(path, what)
    try:
        raw = inspect.getattr_static(owner, name)
    except AttributeError:
        resolve(path, what)  # raises the message naming the missing attribute
        raise
    descriptor = type(raw) if isinstance(raw, (staticmethod, classmethod)) else None
    fn = raw.__func__ if descriptor else raw
    if not callable(fn):
        raise ModelError(f"{what}: {path} is a {type(fn).__name__}, not a function")
    if getattr(fn, _MARK, None):
        return []  # already wrapped by an enclosing instrumented()
    wrapped = _ranged(fn, ROLES[role], role, calls)
    own = name in vars(owner)
    patches = [(owner, name, raw if own else None)]
    setattr(owner, name, descriptor(wrapped) if descriptor else wrapped)
    for module_name, module in list(sys.modules.items()):
        if module_name.split(".")[0] not in packages:
            continue
        namespace = getattr(module, "__dict__", None)
        for attr, value in list((namespace or {}).items()):
            if value is fn:
                patches.append((module, attr, value))
                setattr(module, attr, wrapped)
    return patches


def _restore(patches: list[tuple]) -> None:
    for owner, name, original in reversed(patches):
        if original is None:
            delattr(owner, name)
        else:
            setattr(owner, name, original)


@contextmanager
def _instrumented(source: dict | None, calls: dict | None = None):
    source = source or {}
    add_paths(source.get("paths"))
    packages = _packages(_split(source["factory"], "model.factory")[0]) if source.get("factory") else set()
    patches: list[tuple] = []
    try:
        for role in ("softmax", "attention"):
            if source.get(role):
                module_name = _split(source[role], f"model.{role}")[0]
                patches += _patch(source[role], role, packages | _packages(module_name), calls)
        yield [f"{getattr(o, '__name__', o)}.{n}" for o, n, _ in patches]
    finally:
        _restore(patches)


def instrumented(cell: dict):
    """Context manager: the cell's ``model.attention``/``model.softmax`` wrapped in profiler ranges.

    Yields the attributes it replaced (``module.name``); restores them on exit. A cell of the
    built-in model replaces nothing (its attention marks its own ranges).

        with instrumented(cell):
            model, info = build_model(cell)
            ...
    """
    return _instrumented(cell.get("model_source"))


# --------------------------------------------------------------------------- checking and building


def _call_factory(factory, path: str, kwargs: dict, device) -> nn.Module:
    with torch.device(device):
        model = factory(**kwargs)
    if not isinstance(model, nn.Module):
        raise ModelError(f"model.factory: {path} returned {type(model).__name__}, not a torch.nn.Module")
    return model


class NoModelFound(RuntimeError):
    """A student's checkout whose model is nowhere its environment finds it: the cell is not run."""

    result_status = "not_run"  # the runner records "not run: no model found ..." (the message)


def build_model(cell: dict) -> tuple[nn.Module, dict]:
    """The model of ``cell`` on its device, and a description of it for the result.

    The description holds the model's import path, source file and hashes, its parameter
    count beside the reference architecture's (``params_match`` False flags a difference),
    and the profiler ranges it emits inside attention.
    """
    spec = ModelSpec(**cell["model"])
    device = cell["device"]
    fit_check.check(cell)  # a step that cannot fit the card is out of memory before anything is built
    source = cell.get("model_source") or {}
    if source.get("missing"):
        raise NoModelFound(source["missing"])
    factory_path = source.get("factory")
    if not factory_path:
        impl = cell.get("implementation", "naive")
        layout = staff.semantics(cell.get("edition")).rope_layout  # the staff model of the cell's edition
        model = TransformerLM(spec, cell["context"], impl=impl, device=device, rope_layout=layout)
        info = {"kind": "builtin", "implementation": impl, **source_info(TransformerLM),
                "attention_ranges": attention_ranges("builtin", impl)}
        return model, {**info, **param_counts(model, spec)}
    add_paths(source.get("paths"))
    factory = resolve(factory_path)
    check_factory(factory, factory_path)
    kwargs = {"vocab_size": spec.vocab_size, "context_length": cell["context"], "d_model": spec.d_model,
              "num_layers": spec.num_layers, "num_heads": spec.num_heads, "d_ff": spec.d_ff,
              "rope_theta": spec.rope_theta}
    model = _call_factory(factory, factory_path, kwargs, device).to(device)
    info = {
        "kind": "user",
        "factory": factory_path,
        **source_info(factory),
        "package": package_source(_split(factory_path, "model.factory")[0]),
        "functions": {role: {"path": source[role], **source_info(inspect.unwrap(resolve(source[role], f"model.{role}")))}
                      for role in ROLES if source.get(role)},
        "attention_ranges": attention_ranges("user", source=source),
    }
    return model, {**info, **param_counts(model, spec)}
