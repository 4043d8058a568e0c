"""The source files a rule's results depend on: the import closure of the modules it runs.

A rule lists these files as inputs, so editing any module its command imports (directly, inside a
function, or through another module of the package) reruns it, and editing an unrelated module
does not. The closure is read from the source with :mod:`ast` (nothing is imported), over the
modules of this package only:

    closure(["cs336report.run.runner", "cs336report.experiments.benchmarking_script"])
    # ['cs336report/__init__.py', 'cs336report/accounting/transformer.py', ..., 'cs336report/run/runner.py']

Static ``import`` statements anywhere in a module count, and so does
``importlib.import_module("<literal>", __name__)``. A package whose ``__init__`` imports its
submodules by a computed name (the report's sections) brings all its submodules in. The
experiments package is the exception: it discovers every experiment module, but a rule runs one,
so each rule names its experiment module as a root instead.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

PACKAGE = "cs336report"
ROOT = Path(__file__).resolve().parent.parent.parent
# packages that discover their submodules at run time, but whose rules each name the one they run
PER_RULE = {f"{PACKAGE}.experiments"}


def _path(module: str, root: Path = ROOT) -> Path | None:
    """The source file of ``module`` (a package's ``__init__.py``), or None outside the package."""
    if module != PACKAGE and not module.startswith(PACKAGE + "."):
        return None
    base = root.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _is_package(module: str, root: Path = ROOT) -> bool:
    return (root.joinpath(*module.split(".")) / "__init__.py").is_file()


def _resolve(name: str | None, level: int, module: str, is_package: bool) -> str:
    if not level:
        return name or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


@cache
def imports(module: str, root: Path = ROOT) -> frozenset[str]:
    """The package modules ``module`` imports (its parents' ``__init__`` included)."""
    path = _path(module, root)
    if path is None:
        return frozenset()
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    dynamic = False
    source = path.read_text()
    tree = ast.parse(source, str(path))
    # imports are statements: walking statement bodies finds them without visiting every expression;
    # only a module that calls import_module needs the full walk
    nodes = ast.walk(tree) if "import_module" in source else _statements(tree)
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module, node.level, module, is_package)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # submodules imported by name
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module"):
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                name = arg.value
                found.add(_resolve(name.lstrip("."), len(name) - len(name.lstrip(".")), module, is_package)
                          if name.startswith(".") else name)
            else:
                dynamic = True
    if dynamic and is_package and module not in PER_RULE:
        folder = path.parent
        found.update(f"{module}.{p.stem}" for p in folder.glob("*.py") if p.stem != "__init__")
        found.update(f"{module}.{p.parent.name}" for p in folder.glob("*/__init__.py"))
    parents = module.split(".")
    found.update(".".join(parents[:i]) for i in range(1, len(parents)))
    return frozenset(m for m in found if _path(m, root) is not None and m != module)


def _statements(node: ast.AST):
    """Every statement under ``node``, at any depth of nesting (function and class bodies, branches,
    loops, with and try blocks)."""
    for field in ("body", "orelse", "finalbody", "handlers", "cases"):
        for child in getattr(node, field, None) or ():
            yield child
            yield from _statements(child)


def closure(roots, root: Path = ROOT) -> list[str]:
    """The source files (relative to the repository) of ``roots`` and every package module they import."""
    seen: set[str] = set()
    todo = [r for r in roots if _path(r, root) is not None]
    missing = [r for r in roots if _path(r, root) is None]
    if missing:
        raise ValueError(f"not modules of {PACKAGE}: {', '.join(missing)}")
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo.extend(imports(module, root) - seen)
    return sorted(str(_path(m, root).relative_to(root)) for m in seen)
