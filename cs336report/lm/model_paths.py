"""Finding a configured model's objects by name: ``package.module:name`` in, the object (or a
:class:`ModelError` naming the config key) out, and the checks on a factory that need no call.
The folders a checkout's packages import from go first on ``sys.path`` (:func:`add_paths`).

    resolve("cs336_basics.model:BasicsTransformerLM")           # the class
    resolve("cs336_basics.model:Block.forward", "model.attention")  # a dotted name
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

from ..config.checkout import ModelError, split_path as _split  # noqa: F401  (callers reach ModelError here)

FACTORY_ARGS = ("vocab_size", "context_length", "d_model", "num_layers", "num_heads", "d_ff", "rope_theta")


def add_paths(paths) -> None:
    """Put ``paths`` first on sys.path (once each), so the checkout's packages are the ones imported."""
    for path in reversed(list(paths or ())):
        if path not in sys.path:
            sys.path.insert(0, path)


def _import(module_name: str, what: str):
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise ModelError(
            f"{what}: cannot import module {module_name!r} ({exc}); install the package that provides it "
            f"(e.g. pip install -e path/to/your/cs336_basics) or add its folder to PYTHONPATH, in the "
            f"environment that runs snakemake"
        ) from None
    except Exception as exc:  # the user's module raised while importing
        raise ModelError(f"{what}: importing module {module_name!r} failed: {type(exc).__name__}: {exc}") from None


def _owner(path: str, what: str) -> tuple[object, str]:
    """The object holding the named attribute (a module or a class) and the attribute's name."""
    module_name, attrs = _split(path, what)
    owner = _import(module_name, what)
    for i, attr in enumerate(attrs[:-1]):
        try:
            owner = getattr(owner, attr)
        except AttributeError:
            raise ModelError(f"{what}: {module_name}:{'.'.join(attrs[:i])} has no attribute {attr!r}") from None
    return owner, attrs[-1]


def resolve(path: str, what: str = "model.factory"):
    """Import ``package.module:name`` (``name`` may be dotted, e.g. ``Class.method``)."""
    owner, name = _owner(path, what)
    try:
        return getattr(owner, name)
    except AttributeError:
        where = owner.__name__ if inspect.ismodule(owner) else getattr(owner, "__qualname__", repr(owner))
        raise ModelError(f"{what}: {'module ' if inspect.ismodule(owner) else ''}{where!r} has no attribute {name!r}") from None


def check_from_paths(path: str, paths: list[str] | None) -> None:
    """With ``paths`` (a student checkout's folders), the factory's package must come from one of them."""
    if not paths:
        return
    top = _split(path, "model.factory")[0].split(".")[0]
    module = sys.modules.get(top)
    where = [Path(p).resolve() for p in getattr(module, "__path__", [])] or \
        [Path(getattr(module, "__file__", "") or ".").resolve()]
    if not any(Path(p).resolve() in w.parents or Path(p).resolve() == w for p in paths for w in where):
        raise ModelError(f"model.factory: {top} is imported from {where[0]}, not from the checkout "
                         f"({', '.join(paths)}); uninstall that copy from the environment that runs snakemake "
                         f"(pip uninstall {top.replace('_', '-')}) so the checkout's is used")


def check_factory(factory, path: str) -> None:
    """The factory must accept Assignment 1's seven arguments by keyword and need no others."""
    if not callable(factory):
        raise ModelError(f"model.factory: {path} is a {type(factory).__name__}, not a class or function")
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return  # a builtin or C extension: calling it in check_source decides
    how = (f"it must accept ({', '.join(FACTORY_ARGS)}) by keyword, like Assignment 1's "
           f"BasicsTransformerLM(vocab_size, context_length, d_model, num_layers, num_heads, d_ff, rope_theta)")
    takes_any = any(p.kind == p.VAR_KEYWORD for p in params.values())
    missing = [a for a in FACTORY_ARGS if a not in params and not takes_any]
    positional = [a for a in FACTORY_ARGS if a in params and params[a].kind == params[a].POSITIONAL_ONLY]
    extra = [n for n, p in params.items() if n not in FACTORY_ARGS and p.default is p.empty
             and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    problems = []
    if missing:
        problems.append(f"does not take {', '.join(missing)}")
    if positional:
        problems.append(f"takes {', '.join(positional)} only by position")
    if extra:
        problems.append(f"also requires {', '.join(extra)}, which cs336report does not pass")
    if problems:
        sig = f"{getattr(factory, '__name__', path)}{inspect.signature(factory)}"
        raise ModelError(f"model.factory: {path} {'; '.join(problems)} (its signature is {sig}); {how}")
