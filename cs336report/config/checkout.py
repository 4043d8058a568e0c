"""The student's checkout and a user's model as the config names them, resolved without importing
or running them: the checkout's folder, its adapters file and a hash of its Python files; the
model's factory, the folders it imports from, the handout model's functions that profiler ranges
mark where the checkout has them, and a hash of its package's files. Cells carry these entries, so
editing the student's or the user's code reruns the cells that run it.

The probes that import and run that code (the adapters' signatures, one tiny run of each piece, a
forward of the model) are :mod:`cs336report.student.check`: the workflow's first rule,
check_student, and ``python -m cs336report check-config`` run them before any cell.

    checkout_entry({"checkout": "../assignment2-systems"})   # {"checkout": ..., "name": ..., "sha256_16": ...}
    model_entry(None, student)                               # {"factory": DEFAULT_FACTORY, "paths": [...], ...}
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import sys
import tomllib
from pathlib import Path

KEY = "student.checkout"
ADAPTERS_FILE = Path("tests") / "adapters.py"
BASICS_DIR = "cs336-basics"
DEFAULT_FACTORY = "cs336_basics.model:BasicsTransformerLM"
A1_PACKAGE = "cs336_basics"  # the Assignment 1 package the default factory comes from
CHECK_RECORD = "results/check_student/checkout.json"  # the check_student rule's record, read by the cells
# The handout model's attention and softmax (cs336-basics), wrapped in profiler ranges when present.
DEFAULT_ROLES = {"attention": "cs336_basics.model:scaled_dot_product_attention",
                 "softmax": "cs336_basics.nn_utils:softmax"}
ROLES = ("attention", "softmax")


class StudentError(ValueError):
    """A student checkout that cannot be used; the message starts with the config key."""


class ModelError(ValueError):
    """A configured model that cannot be used; the message starts with the config key."""


def split_path(path: str, what: str) -> tuple[str, list[str]]:
    """``package.module:name.attr`` as (module name, attribute names), or ModelError naming ``what``."""
    module_name, sep, attrs = path.partition(":")
    if not sep or not module_name or not attrs:
        raise ModelError(f"{what}: {path!r} must look like 'package.module:name'")
    return module_name, attrs.split(".")


def uv_source_paths(checkout: str | Path) -> list[Path]:
    """The folders the checkout's ``pyproject.toml`` installs packages from (``[tool.uv.sources]``
    entries with a ``path``, relative to the checkout), each as the folder its packages are imported
    from (its ``src/`` where it has one): where ``uv run`` finds the student's own Assignment 1 package."""
    root = Path(checkout).resolve()
    try:
        sources = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["uv"]["sources"]
    except (OSError, KeyError, TypeError, tomllib.TOMLDecodeError):
        return []
    found = []
    for source in sources.values():
        folder = (root / source["path"]).resolve() if isinstance(source, dict) and source.get("path") else None
        if folder and folder.is_dir():
            found.append(folder / "src" if (folder / "src").is_dir() else folder)
    return found


def checkout_paths(checkout: str | Path) -> list[str]:
    """Folders a checkout's code imports from, as the student's environment has them: its root
    (cs336_systems), the folders of its ``[tool.uv.sources]`` paths (:func:`uv_source_paths`), then
    cs336-basics/ (cs336_basics)."""
    root = Path(checkout).resolve()
    found = [root, *uv_source_paths(root), root / BASICS_DIR]
    return [str(p) for p in dict.fromkeys(found) if p.is_dir()]


def basics_folder(checkout: str | Path) -> Path | None:
    """The first folder of :func:`checkout_paths` that holds a ``cs336_basics`` package, or None."""
    return next((Path(p) for p in checkout_paths(checkout) if (Path(p) / "cs336_basics").is_dir()), None)


def source_hash(checkout: str | Path) -> str:
    """A hash over the checkout's Python files (hidden folders and virtual environments left out)."""
    root = Path(checkout).resolve()
    digest = hashlib.sha256()
    for file in sorted(root.rglob("*.py")):
        rel = file.relative_to(root)
        if any(part.startswith(".") or part in ("__pycache__", "site-packages", "node_modules") for part in rel.parts):
            continue
        digest.update(rel.as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def files_hash(files: list[tuple[str, Path]]) -> str | None:
    """A hash over (relative name, file) pairs, in the order given; None for no file."""
    digest = hashlib.sha256()
    for rel, file in files:
        digest.update(rel.encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()[:16] if files else None


def package_files(roots: list[Path], file: Path | None = None) -> list[tuple[str, Path]]:
    """Every ``.py`` file of a package's folders ``roots`` by its name under them, sorted; a
    module's own file where it is no package."""
    if roots:
        return sorted({(f.relative_to(root).as_posix(), f) for root in roots for f in root.rglob("*.py")
                       if "__pycache__" not in f.parts})
    return [(file.name, file)] if file else []


def package_hash(module_name: str, paths=()) -> str | None:
    """The hash of the files of ``module_name``'s top-level package, found (not imported) on
    ``paths`` and sys.path; None where it is not found."""
    top = module_name.split(".")[0]
    spec = (importlib.machinery.PathFinder.find_spec(top, [*map(str, paths), *sys.path])
            or importlib.util.find_spec(top))
    if spec is None:
        return None
    roots = [Path(p) for p in spec.submodule_search_locations or ()]
    origin = Path(spec.origin) if spec.origin and spec.has_location else None
    return files_hash(package_files(roots, origin))


def checkout_entry(student_config: dict | None) -> dict | None:
    """The ``student`` entry that cells carry (the checkout's folder, its name and a hash of its
    Python files), or None without a checkout; StudentError where the folder or its adapters file
    is missing."""
    checkout = (student_config or {}).get("checkout")
    if not checkout:
        return None
    root = Path(checkout).expanduser().resolve()
    if not root.is_dir():
        raise StudentError(f"{KEY}: {checkout!r} is not a folder ({root}); set it to your clone of "
                           f"assignment2-systems (the folder holding tests/adapters.py)")
    if not (root / ADAPTERS_FILE).is_file():
        raise StudentError(f"{KEY}: {root} has no {ADAPTERS_FILE}; set it to the root of your assignment2-systems "
                           f"clone, which holds the handout's tests/adapters.py")
    return {"checkout": str(root), "name": root.name, "sha256_16": source_hash(root)}


def installed_a1() -> dict | None:
    """Where the running environment imports the Assignment 1 package from without the checkout's
    folders (an installed distribution: ``pip install -e``, ``uv sync``), found by
    :func:`importlib.util.find_spec` without importing it, with the distributions that provide it
    (:func:`importlib.metadata.packages_distributions`); None where it is not installed."""
    spec = importlib.machinery.PathFinder.find_spec(A1_PACKAGE, sys.path)
    if spec is None:
        return None
    where = list(spec.submodule_search_locations or ()) or [spec.origin]
    dists = importlib.metadata.packages_distributions().get(A1_PACKAGE) or []
    return {"location": str(where[0]), "distributions": sorted(set(dists))}


def no_model(checkout: str | Path) -> str:
    """The message of the model cells of a checkout whose model is nowhere the student's environment
    would find it: where it looked."""
    root = Path(checkout).resolve()
    sources = ", ".join(str(p) for p in uv_source_paths(root)) or "none in its pyproject.toml"
    return (f"not run: no model found: no {A1_PACKAGE} package in the checkout's [tool.uv.sources] paths "
            f"({sources}), installed in the environment running the report, or in {root / BASICS_DIR}; "
            f"name your model with model.factory (package.module:Class)")


def model_entry(model_config: dict | None, student: dict | None) -> dict | None:
    """The ``model_source`` that cells carry, or None for the built-in model. With a checkout the
    model is the handout's BasicsTransformerLM of its Assignment 1 package unless a factory is
    named, found as the student's environment finds it: the checkout's ``[tool.uv.sources]`` paths,
    then an installed distribution (:func:`installed_a1`, recorded as ``installed``), then
    ``cs336-basics/``. Where none has it the entry is ``{"missing": why}`` (:func:`no_model`): the
    cells that need a model are not run, the rest (handout tests, FlashAttention) run. The handout
    model's attention and softmax are named for profiler ranges as ``optional_roles``, which the
    model's check drops where the model lacks or never calls them. StudentError or ModelError names
    the key."""
    model_config = {k: v for k, v in (model_config or {}).items() if v}
    if student:
        if not model_config.get("factory"):
            if basics_folder(student["checkout"]) is None:
                installed = installed_a1()
                if installed is None:
                    return {"missing": no_model(student["checkout"])}
                model_config["installed"] = installed
            model_config["factory"] = DEFAULT_FACTORY
            optional = [role for role in ROLES if not model_config.get(role)]
            model_config.update({role: DEFAULT_ROLES[role] for role in optional})
            model_config["optional_roles"] = optional
        model_config["paths"] = checkout_paths(student["checkout"])
    path = model_config.get("factory")
    if not path:
        for role in ROLES:
            if role in model_config:
                raise ModelError(
                    f"model.{role}: set without model.factory; the built-in model marks its own attention "
                    f"ranges, so name your model's factory too or remove model.{role}"
                )
        return None
    module_name = split_path(path, "model.factory")[0]
    for role in ROLES:
        if role in model_config:
            split_path(model_config[role], f"model.{role}")
    return {**model_config, "sha256_16": package_hash(module_name, model_config.get("paths") or ())}
